"""``fs.group_sync``: when one ``syncfs`` may stand for many fsyncs, and how it fails.

A group sync is offered only on a kernel that reports writeback errors through
``syncfs``, on a local journaling filesystem, with little else waiting to be written;
anything else answers None (the caller fsyncs each file). A
failed sync fails every later call too (never retried and trusted), and a closed one
refuses instead of syncing some other descriptor.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter import faults
from promoter.fs import group_sync
from promoter.fs.group_sync import GroupSync

LIMIT = 64 << 20  # bytes pending system-wide above which a group is declined


@pytest.fixture
def dir_fd(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


@pytest.fixture
def offered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every condition met, whatever this machine is: the refusals are tested one by one."""
    monkeypatch.setattr(group_sync, "kernel_reports_errors", lambda: True)
    monkeypatch.setattr(group_sync, "filesystem_type", lambda fd: 0xEF53)
    monkeypatch.setattr(group_sync, "pending_bytes", lambda: 0)


def test_offered_when_every_condition_holds(offered: None, dir_fd: int) -> None:
    group = GroupSync.start(dir_fd, LIMIT)
    assert group is not None
    group.sync()
    group.close()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("kernel_reports_errors", lambda: False),  # before Linux 5.8: errors not reported
        ("filesystem_type", lambda fd: 0x01021994),  # tmpfs
        ("filesystem_type", lambda fd: 0x6969),  # NFS
        ("filesystem_type", lambda fd: 0x65735546),  # FUSE
        ("filesystem_type", lambda fd: None),  # unknown
        ("pending_bytes", lambda: LIMIT + 1),  # a busy disk
        ("pending_bytes", lambda: None),  # /proc/meminfo unread
    ],
)
def test_declined_where_it_would_not_be_as_good_as_fsyncs(
    offered: None,
    dir_fd: int,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    name: str,
    value: object,
) -> None:
    monkeypatch.setattr(group_sync, name, value)
    with caplog.at_level(logging.DEBUG, logger="promoter.fs"):
        assert GroupSync.start(dir_fd, LIMIT) is None
    [record] = [r for r in caplog.records if r.name == "promoter.fs"]
    assert record.getMessage().startswith("an fsync per file, not one syncfs: ")


def test_a_failed_sync_fails_every_later_call_too(
    offered: None, dir_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = GroupSync.start(dir_fd, LIMIT)
    assert group is not None
    monkeypatch.setenv(faults.ENV, "after_group_sync=EIO@1")
    faults.reset()
    try:
        with pytest.raises(OSError) as first:
            group.sync()
        monkeypatch.delenv(faults.ENV)
        faults.reset()
        with pytest.raises(OSError) as again:  # the kernel would report it only once
            group.sync()
        assert again.value is first.value and first.value.errno == errno.EIO
    finally:
        group.close()


def test_a_closed_group_refuses_instead_of_syncing_another_descriptor(
    offered: None, dir_fd: int
) -> None:
    group = GroupSync.start(dir_fd, LIMIT)
    assert group is not None
    group.close()
    group.close()  # twice is harmless
    with pytest.raises(OSError) as closed:
        group.sync()
    assert closed.value.errno == errno.EBADF


def test_the_readings_it_decides_on() -> None:
    pending = group_sync.pending_bytes()
    assert pending is None or pending >= 0
    fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert group_sync.filesystem_type(fd) == 0x9FA0  # procfs: never a group sync
    finally:
        os.close(fd)
