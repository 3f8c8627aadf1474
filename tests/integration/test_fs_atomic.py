"""Durable compare-and-swap writes through descriptor chains, on real files."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter import faults
from promoter.domain.paths import temp_name
from promoter.errors import PathUnsafe, TargetDrift, WriteFailed
from promoter.fs.aside import settle
from promoter.fs.chain import ExpectedState
from promoter.fs.leaf import TEMP_PREFIX
from promoter.fs.root import Root

MISSING = ExpectedState(False, None, None)

TMP = temp_name("op_test", 1, 0)


def state(data: bytes, mode: str = "100644") -> ExpectedState:
    return ExpectedState(True, hashlib.sha256(data).hexdigest(), mode)


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def write(root: Root, rel: str, data: bytes, mode: str, old: ExpectedState) -> list[str]:
    with root.open_parent(rel, create=True) as parent:
        temp = parent.write_temp(data, mode, temp=TMP)
        parent.replace(temp, expected_old=old, new=state(data, mode))
        parent.fsync()
        return parent.created_dirs


def temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX))


def test_create_writes_exact_bytes_with_umask_mode(root: Root, work: Path) -> None:
    assert write(root, "new.txt", b"hello\n", "100644", MISSING) == []
    assert (work / "new.txt").read_bytes() == b"hello\n"
    assert stat.S_IMODE((work / "new.txt").stat().st_mode) == 0o644
    assert root.read_state("new.txt").matches(state(b"hello\n"))
    assert temps(work) == []


def test_create_in_new_nested_directories_reports_them_shallowest_first(
    root: Root, work: Path
) -> None:
    (work / "a").mkdir()
    created = write(root, "a/b/c/d.txt", b"x", "100644", MISSING)
    assert created == ["a/b", "a/b/c"]
    assert (work / "a/b/c/d.txt").read_bytes() == b"x"
    assert stat.S_IMODE((work / "a/b").stat().st_mode) == 0o755


def test_modify_replaces_bytes_and_keeps_a_single_link(root: Root, work: Path) -> None:
    (work / "f.txt").write_bytes(b"old")
    write(root, "f.txt", b"new", "100644", state(b"old"))
    assert (work / "f.txt").read_bytes() == b"new"
    assert (work / "f.txt").stat().st_nlink == 1
    assert temps(work) == []


def test_delete_removes_the_exact_old_file(root: Root, work: Path) -> None:
    (work / "f.txt").write_bytes(b"old")
    with root.open_parent("f.txt", create=False) as parent:
        parent.unlink_checked(state(b"old"), aside=TMP)
        parent.fsync()
    assert not (work / "f.txt").exists()
    assert root.read_state("f.txt").kind == "missing"


def test_delete_of_an_already_missing_file_is_idempotent(root: Root, work: Path) -> None:
    with root.open_parent("gone.txt", create=False) as parent:
        parent.unlink_checked(state(b"old"), aside=TMP)
    assert list(work.iterdir()) == []


def test_delete_of_edited_file_is_drift_and_keeps_it(root: Root, work: Path) -> None:
    (work / "f.txt").write_bytes(b"user edit")
    with root.open_parent("f.txt", create=False) as parent, pytest.raises(TargetDrift):
        parent.unlink_checked(state(b"old"), aside=TMP)
    assert (work / "f.txt").read_bytes() == b"user edit"


def test_delete_with_wrong_mode_is_drift(root: Root, work: Path) -> None:
    (work / "f.txt").write_bytes(b"old")
    os.chmod(work / "f.txt", 0o755)
    with root.open_parent("f.txt", create=False) as parent, pytest.raises(TargetDrift):
        parent.unlink_checked(state(b"old", "100644"), aside=TMP)
    assert (work / "f.txt").exists()


def test_exec_bit_is_set_where_read_is_set(root: Root, work: Path) -> None:
    (work / "run.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(work / "run.sh", 0o640)
    write(root, "run.sh", b"#!/bin/sh\necho\n", "100755", state(b"#!/bin/sh\n"))
    assert stat.S_IMODE((work / "run.sh").stat().st_mode) == 0o750
    assert root.read_state("run.sh").mode == "100755"


def test_exec_bit_is_cleared_everywhere(root: Root, work: Path) -> None:
    (work / "run.sh").write_bytes(b"x")
    os.chmod(work / "run.sh", 0o755)
    write(root, "run.sh", b"x", "100644", state(b"x", "100755"))
    assert stat.S_IMODE((work / "run.sh").stat().st_mode) == 0o644
    assert root.read_state("run.sh").mode == "100644"


def test_restrictive_bits_of_replaced_file_are_kept(root: Root, work: Path) -> None:
    (work / "secret.env").write_bytes(b"A=1\n")
    os.chmod(work / "secret.env", 0o600)
    write(root, "secret.env", b"A=2\n", "100644", state(b"A=1\n"))
    assert stat.S_IMODE((work / "secret.env").stat().st_mode) == 0o600


def test_new_executable_gets_umask_mode_with_exec(root: Root, work: Path) -> None:
    os.umask(0o027)
    write(root, "tool", b"#!/bin/sh\n", "100755", MISSING)
    assert stat.S_IMODE((work / "tool").stat().st_mode) == 0o750


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\xff\x00binary\x80",
        b"line1\r\nline2\r\n",
        b"no newline",
        bytes(range(256)) * 4099,
    ],
    ids=["empty", "binary", "crlf", "no-eol", "large"],
)
def test_bytes_in_equal_bytes_out(root: Root, work: Path, data: bytes) -> None:
    write(root, "d/blob.bin", data, "100644", MISSING)
    assert (work / "d/blob.bin").read_bytes() == data
    leaf = root.read_state("d/blob.bin")
    assert (leaf.kind, leaf.size, leaf.sha256) == (
        "file",
        len(data),
        hashlib.sha256(data).hexdigest(),
    )


def test_empty_file_is_not_missing(root: Root, work: Path) -> None:
    write(root, "empty", b"", "100644", MISSING)
    assert not root.read_state("empty").matches(MISSING)
    assert root.read_state("empty").matches(state(b""))


def test_replace_when_already_new_is_idempotent(root: Root, work: Path) -> None:
    (work / "f.txt").write_bytes(b"new")
    inode = (work / "f.txt").stat().st_ino
    write(root, "f.txt", b"new", "100644", state(b"old"))
    assert (work / "f.txt").stat().st_ino == inode
    assert temps(work) == []


def test_create_over_an_existing_file_is_drift(root: Root, work: Path) -> None:
    (work / "f.txt").write_bytes(b"someone else's")
    with pytest.raises(TargetDrift) as info:
        write(root, "f.txt", b"mine", "100644", MISSING)
    assert info.value.context["found"]["kind"] == "file"
    assert (work / "f.txt").read_bytes() == b"someone else's"
    assert temps(work) == []


def test_modify_of_a_missing_file_is_drift(root: Root, work: Path) -> None:
    with pytest.raises(TargetDrift) as info:
        write(root, "f.txt", b"new", "100644", state(b"old"))
    assert info.value.context["found"]["kind"] == "missing"
    assert list(work.iterdir()) == []


def test_directory_at_target_is_drift(root: Root, work: Path) -> None:
    (work / "f.txt").mkdir()
    with pytest.raises(TargetDrift):
        write(root, "f.txt", b"new", "100644", state(b"old"))
    assert (work / "f.txt").is_dir()


def test_file_where_a_directory_is_expected_is_drift(root: Root, work: Path) -> None:
    (work / "a").write_bytes(b"file")
    with pytest.raises(TargetDrift) as info:
        root.read_state("a/b.txt")
    assert info.value.context["found"] == "not_a_directory"
    with pytest.raises(TargetDrift):
        write(root, "a/b.txt", b"x", "100644", MISSING)
    assert (work / "a").read_bytes() == b"file"


def test_missing_parent_without_create_is_reported(root: Root) -> None:
    assert root.read_state("no/such/file").kind == "missing"
    with pytest.raises(TargetDrift) as info:
        root.open_parent("no/such/file", create=False)
    assert info.value.context["found"] == "missing_parent"


def test_nested_repository_is_never_entered(root: Root, work: Path) -> None:
    (work / "vendor/lib/.git").mkdir(parents=True)
    with pytest.raises(PathUnsafe):
        write(root, "vendor/lib/x.py", b"x", "100644", MISSING)
    assert sorted(p.name for p in (work / "vendor/lib").iterdir()) == [".git"]


def test_remove_dir_if_empty_only_removes_empty_directories(root: Root, work: Path) -> None:
    (work / "a/b").mkdir(parents=True)
    (work / "a/keep").write_bytes(b"k")
    assert root.remove_dir_if_empty("a/b") is True
    assert root.remove_dir_if_empty("a") is False
    assert root.remove_dir_if_empty("a/b") is False
    assert root.remove_dir_if_empty("a/keep") is False
    assert (work / "a/keep").read_bytes() == b"k"


def test_remove_dir_never_follows_a_symlink(root: Root, work: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside_empty"
    outside.mkdir()
    (work / "link").symlink_to(outside)
    assert root.remove_dir_if_empty("link") is False
    assert outside.is_dir()
    assert (work / "link").is_symlink()


def test_settle_removes_only_promoters_bytes_and_keeps_the_rest(root: Root, work: Path) -> None:
    (work / "d").mkdir()
    (work / "d" / "f.txt").write_bytes(b"new")
    (work / "d" / TMP).write_bytes(b"new")  # promoter's staged bytes: removed
    other = temp_name("op_test", 1, 1)
    (work / "d" / other).write_bytes(b"someone's")  # not promoter's: kept
    with root.open_parent("d/f.txt", create=False) as parent:
        assert settle(parent, TMP, old=state(b"old"), new=state(b"new")).action == "removed"
        result = settle(parent, other, old=state(b"old"), new=state(b"new"))
        assert settle(parent, TMP, old=state(b"old"), new=state(b"new")).action == "absent"
    assert result.action == "kept" and result.kept is not None
    assert result.kept.kept_as == "d/.promoter-kept-op_test-1-1"
    assert (work / "d" / ".promoter-kept-op_test-1-1").read_bytes() == b"someone's"
    assert sorted(p.name for p in (work / "d").iterdir()) == [".promoter-kept-op_test-1-1", "f.txt"]


def test_settle_refuses_names_that_are_not_promoter_temps(root: Root, work: Path) -> None:
    (work / "other").write_bytes(b"o")
    with root.open_parent("other", create=False) as parent, pytest.raises(PathUnsafe):
        settle(parent, "other", old=MISSING, new=state(b"o"))
    assert (work / "other").read_bytes() == b"o"


@pytest.fixture
def inject(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    faults.reset()
    yield monkeypatch
    faults.reset()


def test_io_error_after_temp_write_leaves_no_temp(
    root: Root, work: Path, inject: pytest.MonkeyPatch
) -> None:
    inject.setenv(faults.ENV, "after_temp_write=EIO")
    with root.open_parent("f.txt", create=True) as parent, pytest.raises(WriteFailed) as info:
        parent.write_temp(b"data", "100644", temp=TMP)
    assert info.value.context["errno"] == errno.EIO
    assert list(work.iterdir()) == []


def test_io_error_before_replace_keeps_the_old_file(
    root: Root, work: Path, inject: pytest.MonkeyPatch
) -> None:
    (work / "f.txt").write_bytes(b"old")
    inject.setenv(faults.ENV, "before_replace=ENOSPC")
    with pytest.raises(WriteFailed) as info:
        write(root, "f.txt", b"new", "100644", state(b"old"))
    assert info.value.context["errno"] == errno.ENOSPC
    assert (work / "f.txt").read_bytes() == b"old"
    assert temps(work) == []


def test_failed_parent_fsync_is_reported_not_retried(
    root: Root, work: Path, inject: pytest.MonkeyPatch
) -> None:
    inject.setenv(faults.ENV, "after_parent_fsync=EIO")
    with root.open_parent("f.txt", create=True) as parent:
        temp = parent.write_temp(b"new", "100644", temp=TMP)
        parent.replace(temp, expected_old=MISSING, new=state(b"new"))
        with pytest.raises(WriteFailed):
            parent.fsync()
    assert root.read_state("f.txt").matches(state(b"new"))


def test_renameat2_unsupported_falls_back_for_create_and_modify(
    root: Root, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(*args: object) -> None:
        raise OSError(errno.EINVAL, "unsupported")

    monkeypatch.setattr("promoter.fs.atomic.renameat2", unsupported)
    write(root, "f.txt", b"one", "100644", MISSING)
    write(root, "f.txt", b"two", "100755", state(b"one"))
    assert (work / "f.txt").read_bytes() == b"two"
    assert (work / "f.txt").stat().st_nlink == 1
    (work / "g.txt").write_bytes(b"theirs")
    with pytest.raises(TargetDrift):
        write(root, "g.txt", b"mine", "100644", MISSING)
    assert (work / "g.txt").read_bytes() == b"theirs"
    assert temps(work) == []


def test_kill_after_exchange_leaves_the_old_file_for_settle_to_remove(work: Path) -> None:
    (work / "f.txt").write_bytes(b"old")
    script = (
        "import hashlib, sys\n"
        "from promoter.fs.chain import ExpectedState\n"
        "from promoter.fs.root import Root\n"
        "h = lambda b: ExpectedState(True, hashlib.sha256(b).hexdigest(), '100644')\n"
        "with Root.open(sys.argv[1]) as r, r.open_parent('f.txt', create=False) as p:\n"
        f"    t = p.write_temp(b'new', '100644', temp={TMP!r})\n"
        "    p.replace(t, expected_old=h(b'old'), new=h(b'new'))\n"
    )
    env = {**os.environ, faults.ENV: "after_exchange=kill"}
    done = subprocess.run([sys.executable, "-c", script, str(work)], env=env, check=False)
    assert done.returncode == 137
    assert (work / "f.txt").read_bytes() == b"new"
    assert (work / TMP).read_bytes() == b"old"
    with Root.open(work) as root, root.open_parent("f.txt", create=False) as parent:
        assert settle(parent, TMP, old=state(b"old"), new=state(b"new")).action == "removed"
    assert temps(work) == []


def test_kill_while_a_temp_is_anonymous_leaves_no_name_behind(work: Path) -> None:
    (work / "f.txt").write_bytes(b"old")
    script = (
        "import sys\n"
        "from promoter.fs.root import Root\n"
        "with Root.open(sys.argv[1]) as r, r.open_parent('f.txt', create=False) as p:\n"
        f"    p.write_temp(b'new' * 4096, '100644', temp={TMP!r})\n"
    )
    env = {**os.environ, faults.ENV: "before_temp_named=kill"}
    done = subprocess.run([sys.executable, "-c", script, str(work)], env=env, check=False)
    assert done.returncode == 137
    assert sorted(os.listdir(work)) == ["f.txt"]
    assert (work / "f.txt").read_bytes() == b"old"
