"""Fixtures for the fs layer's tests: a worktree root, an outside directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.fs.root import Root


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "f.txt").write_bytes(b"outside original")
    (path / "g.txt").write_bytes(b"outside g")
    return path


@pytest.fixture
def root(work: Path) -> Iterator[Root]:
    with Root.open(work) as opened:
        yield opened
