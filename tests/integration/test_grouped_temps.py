"""Temps begun together (``Applier.begin`` then ``end_begun``): each is fsynced before it is
named, in the order begun, and a failure part-way through a group leaves no temp of the
group behind, whether the filesystem gives anonymous temps (``O_TMPFILE``) or named ones.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter import faults
from promoter.domain.path_state import State
from promoter.domain.paths import temp_name
from promoter.engine.operation import apply as apply_module
from promoter.engine.operation.apply import Applier
from promoter.errors import BlobHashMismatch, PromoterError
from promoter.fs import group_sync, temps
from promoter.fs.root import Root
from promoter.store.blobs import BlobStore
from tests.support.daemon import running_daemon
from tests.support.flows import init_repo
from tests.support.promotion import promote, submit, tree_bytes

CONTENTS = [f"file {i}\n".encode() * (i + 1) for i in range(5)]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def new_state(data: bytes) -> State:
    return State(True, sha(data), "100644")


@pytest.fixture(params=[True, False], ids=["o_tmpfile", "named_temp"])
def anonymous(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if not request.param:  # the filesystem without O_TMPFILE: each temp named from the start
        monkeypatch.setattr(temps, "_proc_fd_links", lambda: False)
    return bool(request.param)


@pytest.fixture
def inject(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(faults.ENV, "after_temp_write=EIO@2")
    faults.reset()
    yield
    faults.reset()


def names(work: Path) -> list[str]:
    return sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())


TEMPS = [temp_name("op_grouped", 1, seq) for seq in range(len(CONTENTS))]


def begin_all(apply: Applier) -> None:
    """Begin a temp of ``CONTENTS[seq]`` for ``d/f<seq>.txt``, every one of them."""
    for seq, data in enumerate(CONTENTS):
        apply.begin(seq, f"d/f{seq}.txt", new_state(data), data, TEMPS[seq])


def test_begun_temps_get_their_names_only_when_ended_and_hold_every_byte(
    root: Root, work: Path, anonymous: bool
) -> None:
    apply = Applier(root)
    try:
        begin_all(apply)
        named_before_end = names(work)
        apply.end_begun()
        assert sorted(apply.staged) == list(range(len(CONTENTS)))
        for seq, data in enumerate(CONTENTS):
            assert (work / "d" / TEMPS[seq]).read_bytes() == data
    finally:
        apply.close()
    expected_early = [] if anonymous else sorted(f"d/{t}" for t in TEMPS)
    assert named_before_end == expected_early


def test_a_failed_end_drops_every_temp_still_begun_and_keeps_the_ones_staged(
    root: Root, work: Path, anonymous: bool, inject: None
) -> None:
    apply = Applier(root)
    try:
        begin_all(apply)
        with pytest.raises(PromoterError) as info:
            apply.end_begun()  # the second temp's end fails (EIO after its write)
        assert info.value.code == "write_failed"
        assert list(apply.staged) == [0] and not apply.begun and not apply.kept
        assert names(work) == [f"d/{TEMPS[0]}"]  # the failed one and the later ones: gone
        apply.drop_staged()
        assert names(work) == []
    finally:
        apply.close()


def test_a_blob_altered_inside_a_group_drops_the_group_when_the_pass_is_dropped(
    root: Root, work: Path, tmp_path: Path, anonymous: bool
) -> None:
    store = BlobStore(tmp_path / "audit")
    for data in CONTENTS:
        store.put(sha(data), data)
    altered = store.path_for(sha(CONTENTS[2]))
    altered.chmod(0o644)
    altered.write_bytes(b"X" * len(CONTENTS[2]))
    apply = Applier(root)
    try:
        with pytest.raises(BlobHashMismatch):
            for seq, data in enumerate(CONTENTS):
                temp = temp_name("op_grouped", 1, seq)
                apply.begin(seq, f"d/f{seq}.txt", new_state(data), store.stream(sha(data)), temp)
        assert sorted(apply.begun) == [0, 1]
        apply.drop_staged()  # what a promotion does on a staging failure
        assert not apply.begun and not apply.staged and not apply.kept
    finally:
        apply.close()
    assert names(work) == []


@pytest.mark.slow
def test_promotion_with_more_changes_than_one_group_refuses_cleanly_on_eio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anonymous: bool
) -> None:
    files = {f"src/f{i:03d}.txt": f"old {i}\n".encode() for i in range(150)}
    changes = [(p, d, d.replace(b"old", b"new")) for p, d in files.items()]
    repo = init_repo(tmp_path / "lab", files)
    with running_daemon(tmp_path / "state", {"lab": repo}) as daemon:
        identity = daemon.services.registry.by_name("lab").identity
        _, bundle, receipt = submit(daemon, repo, identity, changes)
        before = tree_bytes(repo)
        monkeypatch.setenv(faults.ENV, "after_temp_write=EIO@70")  # inside the second group
        faults.reset()
        view = promote(daemon, bundle, receipt).json()
        assert (view["status"], view["code"]) == ("refused", "write_failed"), view
        assert tree_bytes(repo) == before
        assert not list(repo.rglob(".promoter-tmp-*"))
        monkeypatch.delenv(faults.ENV)
        faults.reset()
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        assert {p: tree_bytes(repo)[p][0] for p, _, _ in changes} == {
            p: new for p, _, new in changes
        }


def test_one_group_sync_makes_every_begun_temp_durable_before_the_first_is_named(
    root: Root, work: Path, anonymous: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a group sync stands for the temps' fsyncs: it runs once, after every temp of
    the group holds all its bytes and its mode, before any anonymous temp has a name; no
    temp is fsynced on its own, and no early writeback is asked for."""
    monkeypatch.setattr(group_sync, "kernel_reports_errors", lambda: True)
    monkeypatch.setattr(group_sync, "filesystem_type", lambda fd: 0xEF53)
    monkeypatch.setattr(group_sync, "pending_bytes", lambda: 0)
    real = group_sync._syncfs
    seen: list[list[str]] = []

    def syncfs(fd: int) -> None:
        seen.append(names(work))
        real(fd)

    (work / "d").mkdir(exist_ok=True)  # a directory made on the way is fsynced: not a temp
    fsynced: list[int] = []
    monkeypatch.setattr(group_sync, "_syncfs", syncfs)
    monkeypatch.setattr(temps.os, "fsync", lambda fd: fsynced.append(fd))
    monkeypatch.setattr(temps, "start_writeback", lambda fd: fsynced.append(-fd))
    apply = Applier(root, group_sync_limit=0)
    try:
        begin_all(apply)
        apply.end_begun()
        staged = {seq: (work / "d" / TEMPS[seq]).read_bytes() for seq in apply.staged}
    finally:
        apply.close()
    assert seen == [[] if anonymous else sorted(f"d/{t}" for t in TEMPS)]
    assert fsynced == []
    assert staged == dict(enumerate(CONTENTS))


@pytest.mark.parametrize("grouped", [True, False], ids=["group_syncfs", "fsync_each"])
def test_debug_log_says_which_flush_path_a_pass_took(
    root: Root,
    work: Path,
    grouped: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator reading a slow promotion's debug log sees whether its new files and
    directories were made durable by one ``syncfs`` or by an fsync each."""
    if grouped:
        monkeypatch.setattr(group_sync, "kernel_reports_errors", lambda: True)
        monkeypatch.setattr(group_sync, "filesystem_type", lambda fd: 0xEF53)
        monkeypatch.setattr(group_sync, "pending_bytes", lambda: 0)
    caplog.set_level(logging.DEBUG, logger="promoter.apply")
    apply = Applier(root, group_sync_limit=0 if grouped else None)
    try:
        begin_all(apply)
        apply.end_begun()
        apply.fsync()
    finally:
        apply.close()
    how = "one group syncfs" if grouped else "an fsync each, up to 5 at once"
    lines = [r.getMessage() for r in caplog.records if r.name == "promoter.apply"]
    # the temps of one directory still take one group sync; its one directory an fsync
    assert lines == [
        f"flush path: {how} for {len(CONTENTS)} new files",
        "flush path: an fsync each for 1 directories",
    ]


def test_without_a_group_sync_every_temp_of_a_group_is_fsynced_before_the_first_is_named(
    root: Root, work: Path, anonymous: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback's fsyncs run a few at once, off the calling thread, and every one of
    them has returned before any anonymous temp gets its name."""
    real = os.fsync
    seen: list[tuple[str, list[str]]] = []
    lock = threading.Lock()

    def fsync(fd: int) -> None:
        real(fd)
        with lock:
            seen.append((threading.current_thread().name, names(work)))

    apply = Applier(root)
    try:
        begin_all(apply)
        begun = {pending.fd for pending, _ in apply.begun.values()}
        monkeypatch.setattr(os, "fsync", fsync)
        apply.end_begun()
        monkeypatch.setattr(os, "fsync", real)
        staged = {seq: (work / "d" / TEMPS[seq]).read_bytes() for seq in apply.staged}
    finally:
        apply.close()
    assert len(begun) == len(CONTENTS)
    assert len(seen) == len(CONTENTS)
    assert all(thread.startswith("pass-fsync") for thread, _ in seen)
    early = [] if anonymous else sorted(f"d/{t}" for t in TEMPS)
    assert [found for _, found in seen] == [early] * len(CONTENTS)
    assert staged == dict(enumerate(CONTENTS))


@pytest.mark.parametrize("at_once", [1, apply_module.FSYNCS_AT_ONCE], ids=["serial", "shares"])
def test_a_failed_fsync_in_the_concurrent_fallback_fails_the_group_as_the_serial_loop_did(
    root: Root, work: Path, anonymous: bool, monkeypatch: pytest.MonkeyPatch, at_once: int
) -> None:
    """The third temp's fsync fails (EIO): the two before it are named and staged, it
    and the ones after it are dropped, and the error is the one its own fsync raised,
    whether the fsyncs ran one after another or a few at once; nothing is retried."""
    monkeypatch.setattr(apply_module, "FSYNCS_AT_ONCE", at_once)
    real = os.fsync
    apply = Applier(root)
    try:
        begin_all(apply)
        failing = apply.begun[2][0].fd
        calls: list[int] = []

        def fsync(fd: int) -> None:
            calls.append(fd)
            if fd == failing:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        with pytest.raises(PromoterError) as info:
            apply.end_begun()
        monkeypatch.setattr(os, "fsync", real)
        assert (info.value.code, info.value.context["path"]) == ("write_failed", "d/f2.txt")
        assert info.value.context["errno"] == errno.EIO
        assert list(apply.staged) == [0, 1] and not apply.begun and not apply.kept
        assert names(work) == [f"d/{TEMPS[0]}", f"d/{TEMPS[1]}"]
        assert calls.count(failing) == 1  # never retried
        apply.drop_staged()
        assert names(work) == []
    finally:
        apply.close()
