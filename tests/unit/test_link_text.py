"""``promoter.fs.link_text.read_link_text``: a link's text read by descriptor chain, never followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from promoter.errors import PathUnsafe
from promoter.fs.link_text import read_link_text
from promoter.fs.root import Root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_bytes(b"f\n")
    os.symlink("../outside", root / "d" / "l")
    os.symlink("d", root / "via")
    (tmp_path / "outside").mkdir()
    os.symlink("/etc/passwd", tmp_path / "outside" / "x")
    return root


def test_a_link_reads_as_its_text_and_nothing_else_does(tree: Path) -> None:
    with Root.open(tree) as root:
        assert read_link_text(root, "d/l") == b"../outside"
        assert read_link_text(root, "d/f") is None
        assert read_link_text(root, "d") is None
        assert read_link_text(root, "d/missing") is None
        assert read_link_text(root, "missing/x") is None
        assert read_link_text(root, "d/f/below") is None  # a file on the way: nothing below


def test_a_link_on_the_way_is_never_followed(tree: Path) -> None:
    with Root.open(tree) as root:
        with pytest.raises(PathUnsafe):
            read_link_text(root, "via/l")
        with pytest.raises(PathUnsafe):
            read_link_text(root, "d/l/x")  # would read outside/x through d/l
