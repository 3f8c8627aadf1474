"""The inotify adapter: what ``promoter.fs.watch`` relies on, pinned against the kernel.

Names come back as the exact bytes of the directory entry (not UTF-8 ones included), the
descriptor never blocks and is not inherited, a final symlink and a file are not watched,
a watch the kernel already dropped unwatches quietly, and a closed descriptor says so.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.fs import inotify
from promoter.fs.inotify import Event, Inotify

pytestmark = pytest.mark.skipif(not inotify.available(), reason="inotify is not available here")

MASK = inotify.IN_CREATE | inotify.IN_DELETE | inotify.IN_MOVED_FROM | inotify.IN_MOVED_TO


@pytest.fixture
def ino() -> Iterator[Inotify]:
    watch = Inotify()
    yield watch
    watch.close()


def test_names_are_the_entries_exact_bytes(tmp_path: Path, ino: Inotify) -> None:
    root = os.fsencode(tmp_path)
    wd = ino.add_watch(root, MASK)
    names = [b"caf\xc3\xa9", b"x\xff\xfe", b"back\\slash", b"n" * 255]
    for name in names:
        open(root + b"/" + name, "xb").close()
    os.mkdir(root + b"/dir\x80")
    os.rename(root + b"/x\xff\xfe", root + b"/y\xfe")
    events = ino.read_events()
    assert events[: len(names)] == [Event(wd, inotify.IN_CREATE, name) for name in names]
    assert events[len(names)] == Event(wd, inotify.IN_CREATE | inotify.IN_ISDIR, b"dir\x80")
    assert [(e.mask, e.name) for e in events[len(names) + 1 :]] == [
        (inotify.IN_MOVED_FROM, b"x\xff\xfe"),
        (inotify.IN_MOVED_TO, b"y\xfe"),
    ]


def test_reading_an_empty_queue_returns_at_once(tmp_path: Path, ino: Inotify) -> None:
    ino.add_watch(os.fsencode(tmp_path), MASK)
    assert ino.read_events() == []
    assert ino.fd is not None
    assert os.get_blocking(ino.fd) is False
    assert fcntl.fcntl(ino.fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC


def test_a_file_or_a_final_symlink_is_not_watched(tmp_path: Path, ino: Inotify) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_bytes(b"")
    (tmp_path / "link").symlink_to("dir")
    for name in ("file", "link"):
        with pytest.raises(OSError) as caught:
            ino.add_watch(os.fsencode(tmp_path / name), MASK)
        assert caught.value.errno == errno.ENOTDIR


def test_removing_a_dropped_watch_is_quiet(tmp_path: Path, ino: Inotify) -> None:
    (tmp_path / "dir").mkdir()
    wd = ino.add_watch(os.fsencode(tmp_path / "dir"), MASK)
    (tmp_path / "dir").rmdir()
    events = ino.read_events()
    assert Event(wd, inotify.IN_IGNORED, b"") in events
    ino.remove_watch(wd)
    ino.remove_watch(wd)


def test_a_closed_descriptor_says_so(tmp_path: Path) -> None:
    watch = Inotify()
    assert watch.fd is not None
    watch.close()
    watch.close()
    assert watch.fd is None
    with pytest.raises(OSError) as caught:
        watch.read_events()
    assert caught.value.errno == errno.EBADF
