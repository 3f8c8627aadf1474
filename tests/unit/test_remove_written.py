"""``store.durable.remove_written``: promoter's own state files are removed only while
they hold exactly the bytes promoter wrote; anything else stays, under its own name."""

from __future__ import annotations

from pathlib import Path

from promoter.store.durable import remove_written


def test_exactly_the_written_bytes_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "key.next"
    path.write_bytes(b"promoter's key\n")
    assert remove_written(path, b"promoter's key\n") is True
    assert list(tmp_path.iterdir()) == []


def test_a_file_rewritten_by_someone_else_is_kept_under_its_name(tmp_path: Path) -> None:
    path = tmp_path / "key.next"
    path.write_bytes(b"somebody's newer key\n")
    assert remove_written(path, b"promoter's key\n") is False
    assert path.read_bytes() == b"somebody's newer key\n"
    assert list(tmp_path.iterdir()) == [path]


def test_a_hard_linked_file_is_kept(tmp_path: Path) -> None:
    path, other = tmp_path / "key.next", tmp_path / "elsewhere"
    path.write_bytes(b"promoter's key\n")
    other.hardlink_to(path)
    assert remove_written(path, b"promoter's key\n") is False
    assert path.read_bytes() == other.read_bytes() == b"promoter's key\n"
    assert sorted(tmp_path.iterdir()) == sorted([path, other])


def test_longer_bytes_with_the_written_prefix_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "key.next"
    path.write_bytes(b"promoter's key\nand more")
    assert remove_written(path, b"promoter's key\n") is False
    assert path.read_bytes() == b"promoter's key\nand more"
