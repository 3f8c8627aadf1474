"""Single removals outside a worktree (``promoter.fs.own_entry``) take only promoter's own.

A path made this run is removed only while it still names what was made; an entry of a
tree promoter made is reached by descriptors, never through a link, and only a
non-directory entry (or an empty directory) goes. Each test plants what is not
promoter's and checks it is still there, byte for byte, afterwards.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from pathlib import Path

import pytest

from promoter.errors import PathUnsafe, RepositoryInvalid
from promoter.executor import sandbox_repo
from promoter.executor.confine import Relay
from promoter.fs import own_entry
from promoter.fs.own_entry import Made, OwnTree
from tests.support.mounts import bind_mount


def test_a_made_file_and_directory_are_removed_and_gone_is_not_an_error(tmp_path: Path) -> None:
    folder = Made.mkdir(tmp_path / "made")
    (tmp_path / "made" / "f").write_bytes(b"ours")
    made = Made.record(tmp_path / "made" / "f")
    assert made.remove() is True
    assert made.remove() is False
    assert folder.remove() is True
    assert not (tmp_path / "made").exists()


def test_a_name_taken_before_mkdir_is_never_claimed(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError):
        Made.mkdir(tmp_path / "taken")
    assert (tmp_path / "taken").is_dir()


def test_a_made_name_replaced_meanwhile_is_kept_and_refused(tmp_path: Path) -> None:
    path = tmp_path / "sock"
    path.write_bytes(b"ours")
    made = Made.record(path)
    path.rename(tmp_path / "moved")  # still alive: its inode cannot be reused
    path.write_bytes(b"someone else's")
    with pytest.raises(PathUnsafe, match="no longer what promoter made"):
        made.remove()
    assert path.read_bytes() == b"someone else's"


def test_a_made_directory_that_is_not_empty_stays(tmp_path: Path) -> None:
    made = Made.mkdtemp(str(tmp_path / "relay-"))
    (Path(made.path) / "theirs").write_bytes(b"kept")
    with pytest.raises(OSError) as raised:
        made.remove()
    assert raised.value.errno in (errno.ENOTEMPTY, errno.EEXIST)
    assert (Path(made.path) / "theirs").read_bytes() == b"kept"


def test_an_own_tree_is_never_left_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"person's bytes")
    top = tmp_path / "clone"
    top.mkdir()
    (top / "link").symlink_to(outside)
    with OwnTree.open(top) as tree, pytest.raises(OSError) as raised:
        tree.directory(["link"])
    assert raised.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert (outside / "victim").read_bytes() == b"person's bytes"
    with pytest.raises(OSError):  # the top itself is not followed either
        OwnTree.open(top / "link")


def test_an_entry_is_removed_as_itself_and_a_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"person's bytes")
    top = tmp_path / "clone"
    (top / "d" / "sub").mkdir(parents=True)
    (top / "d" / "full").mkdir()
    (top / "d" / "full" / "f").write_bytes(b"x")
    (top / "d" / "link").symlink_to(outside)
    with OwnTree.open(top) as tree, tree.directory([b"d"]) as folder:
        assert folder.remove_entry("link") is True
        assert folder.remove_entry("link") is False
        with pytest.raises(PathUnsafe, match="is a directory"):
            folder.remove_entry("sub")
        assert folder.remove_empty_dir("full") is False
        assert folder.remove_empty_dir("sub") is True
    assert outside.read_bytes() == b"person's bytes"
    assert (top / "d" / "full" / "f").read_bytes() == b"x"
    assert sorted(os.listdir(top / "d")) == ["full"]


def test_directories_are_made_below_an_own_tree_with_create(tmp_path: Path) -> None:
    top = tmp_path / "clone"
    top.mkdir()
    with OwnTree.open(top) as tree, tree.directory(["a", "b"], create=True) as folder:
        assert folder.path == str(top / "a" / "b")
        assert (top / "a" / "b").is_dir()


@pytest.mark.parametrize("lookup", ["openat2", "openat"])
def test_a_mount_inside_an_own_tree_is_never_entered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lookup: str
) -> None:
    if lookup == "openat":  # no openat2: the device and mount id checks are the guard
        monkeypatch.setattr(own_entry, "lookup_refuses_mounts", lambda: False)
        monkeypatch.setattr(
            own_entry, "open_dir_component", lambda fd, name, flags: os.open(name, flags, dir_fd=fd)
        )
    elif not own_entry.lookup_refuses_mounts():
        pytest.skip("this kernel has no openat2")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"person's bytes")
    top = tmp_path / "clone"
    (top / "mnt").mkdir(parents=True)
    with bind_mount(outside, top / "mnt"), OwnTree.open(top) as tree:
        with pytest.raises((OSError, PathUnsafe)) as raised:
            tree.directory(["mnt"])
        if lookup == "openat":
            assert isinstance(raised.value, PathUnsafe)
        else:
            assert isinstance(raised.value, OSError) and raised.value.errno == errno.EXDEV
        assert (top / "mnt" / "victim").read_bytes() == b"person's bytes"


def _sandbox(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "run"
    git = home / "clone" / ".git"
    for name in ("objects", "refs", "info"):
        (git / name).mkdir(parents=True)
    (git / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    (git / "config").write_bytes(b"[core]\n")
    sandbox_repo.seal(home, home / "clone")
    return home, home / "clone"


def test_restore_removes_widening_files_of_the_sandbox_only(tmp_path: Path) -> None:
    home, clone = _sandbox(tmp_path)
    (clone / ".git" / "objects" / "info").mkdir()
    (clone / ".git" / "objects" / "info" / "alternates").write_bytes(b"/elsewhere\n")
    (clone / ".git" / "shallow").write_bytes(b"0" * 40 + b"\n")
    (clone / ".git" / "config").write_bytes(b"[core]\n\thooksPath = /bad\n")
    assert sandbox_repo.restore(home, clone) == ["config", "objects/info/alternates", "shallow"]
    assert not (clone / ".git" / "shallow").exists()
    assert (clone / ".git" / "config").read_bytes() == b"[core]\n"


def test_restore_never_removes_through_a_linked_directory(tmp_path: Path) -> None:
    home, clone = _sandbox(tmp_path)
    outside = tmp_path / "persons-objects-info"
    outside.mkdir()
    (outside / "alternates").write_bytes(b"person's alternates\n")
    (clone / ".git" / "objects" / "info").symlink_to(outside)
    with pytest.raises(RepositoryInvalid, match="not a directory of its own"):
        sandbox_repo.restore(home, clone)
    assert (outside / "alternates").read_bytes() == b"person's alternates\n"


def test_the_relay_removes_its_socket_and_directory_and_keeps_a_replacement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    relay = Relay("http://127.0.0.1:9")
    relay.close()
    assert not relay.directory.exists()

    relay = Relay("http://127.0.0.1:9")
    relay.path.rename(relay.directory / "moved")  # still alive: its inode cannot be reused
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(relay.path))  # someone else's socket under the relay's name
        with caplog.at_level(logging.WARNING, logger="promoter.run"):
            relay.close()
        assert relay.path.exists()
        assert any("no longer what promoter made" in r.getMessage() for r in caplog.records)
    relay.path.unlink()
    (relay.directory / "moved").unlink()
    relay.directory.rmdir()
