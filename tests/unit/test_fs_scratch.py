"""``promoter.fs.scratch``: a private directory and files made without ``tempfile``, and
their removal as ``shutil.rmtree(ignore_errors=True)`` removes, never through a link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from promoter.fs.scratch import anonymous_file, remove_scratch_dir, scratch_dir, scratch_file


def test_a_scratch_dir_is_new_private_and_where_tempfile_would_put_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = scratch_dir("promoter-shadow-", str(tmp_path))
    assert os.path.dirname(made) == str(tmp_path)
    assert os.path.basename(made).startswith("promoter-shadow-")
    assert stat.S_IMODE(os.lstat(made).st_mode) == 0o700
    assert scratch_dir("promoter-shadow-", str(tmp_path)) != made
    import tempfile

    default = scratch_dir("promoter-test-scratch-")
    try:
        assert os.path.dirname(default) == tempfile.gettempdir()
    finally:
        remove_scratch_dir(default)


def test_a_scratch_file_is_new_exclusive_and_private(tmp_path: Path) -> None:
    fd, path = scratch_file(str(tmp_path), "obj-")
    try:
        assert os.path.dirname(path) == str(tmp_path)
        assert os.path.basename(path).startswith("obj-")
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
        assert os.fstat(fd).st_ino == os.lstat(path).st_ino
    finally:
        os.close(fd)


def test_an_anonymous_file_reads_back_what_was_written_and_has_no_name() -> None:
    with anonymous_file() as handle:
        os.write(handle.fileno(), b"fatal: bad object\n")  # as a child writes its stderr
        handle.seek(0)
        assert handle.read() == b"fatal: bad object\n"
        assert os.fstat(handle.fileno()).st_nlink == 0


def test_removal_takes_the_whole_tree_and_never_follows_a_link(tmp_path: Path) -> None:
    """A link inside the scratch directory, to a directory and to a file elsewhere, is
    removed as an entry: what it points to is untouched."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "kept.txt").write_bytes(b"the person's\n")
    made = Path(scratch_dir("promoter-shadow-", str(tmp_path)))
    (made / "objects" / "ab").mkdir(parents=True)
    (made / "objects" / "ab" / "cdef").write_bytes(b"x")
    (made / "refs" / "heads").mkdir(parents=True)
    (made / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    (made / "to-dir").symlink_to(outside)
    (made / "objects" / "to-file").symlink_to(outside / "deep" / "kept.txt")
    remove_scratch_dir(str(made))
    assert not made.exists() and not made.is_symlink()
    assert (outside / "deep" / "kept.txt").read_bytes() == b"the person's\n"


def test_removal_of_what_is_gone_or_a_link_does_nothing(tmp_path: Path) -> None:
    remove_scratch_dir(str(tmp_path / "never-made"))
    target = tmp_path / "target"
    target.mkdir()
    (target / "kept").write_bytes(b"k")
    link = tmp_path / "link"
    link.symlink_to(target)
    remove_scratch_dir(str(link))  # not opened through the link, not removed
    assert link.is_symlink() and (target / "kept").read_bytes() == b"k"
