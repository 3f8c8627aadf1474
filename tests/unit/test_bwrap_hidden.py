"""Which directories bubblewrap's command line hides (``confine._bwrap_argv``).

Each hidden directory gets one empty ``--tmpfs`` unless a directory above it is hidden
too; a file or a link is never mounted over (a link's directory is hidden by its real
path); the interpreter's prefix below a hidden directory is bound back read-only. The
directories live outside ``/tmp`` (always hidden, it would hide them all) when the
machine has ``/dev/shm``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.executor import confine


@pytest.fixture
def root() -> Iterator[Path]:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm: every temporary directory is below the hidden /tmp")
    made = Path(tempfile.mkdtemp(prefix="promoter-test-hide-", dir="/dev/shm"))
    try:
        yield made
    finally:
        shutil.rmtree(made)


def _tmpfs(argv: list[str]) -> list[str]:
    return [argv[at + 1] for at, word in enumerate(argv) if word == "--tmpfs"]


def _box(root: Path, hide: list[Path]) -> confine.Sandbox:
    for directory in ("a/b", "c", "d", "run/clone", "run/home"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    (root / "file").write_bytes(b"token")
    if not (root / "link").is_symlink():
        (root / "link").symlink_to(root / "d")
    return confine.Sandbox(clone=root / "run/clone", home=root / "run/home", hide=hide)


def test_each_hidden_directory_is_mounted_over_once_below_no_other(root: Path) -> None:
    hide = [root / "a/b", root / "a", root / "c", root / "file", root / "link", root / "a"]
    argv = confine._bwrap_argv("bwrap", _box(root, hide), None, 0)
    ours = [path for path in _tmpfs(argv) if path.startswith(f"{root}/")]
    assert ours == [str(root / "a"), str(root / "c"), str(root / "d")]
    assert "/tmp" in _tmpfs(argv)
    base = str(confine.interpreter_prefix())
    assert ["--ro-bind", base, base] not in [argv[at : at + 3] for at in range(len(argv))]


def test_a_hidden_directory_above_the_interpreter_binds_it_back(root: Path) -> None:
    base = confine.interpreter_prefix()
    argv = confine._bwrap_argv("bwrap", _box(root, [root / "c", base.parent]), None, 0)
    assert str(base.parent) in _tmpfs(argv)
    assert ["--ro-bind", str(base), str(base)] in [argv[at : at + 3] for at in range(len(argv))]
