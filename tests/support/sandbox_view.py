"""A sandbox's files as the command left them, read on the host whatever its layout.

A copy clone is read where it is; an overlay sandbox (``promoter.executor.layers``) is
read through its layers, as the kernel merges them, without mounting it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from promoter.executor import layers, upper
from promoter.executor.sandbox import RunRecord
from tests.support.promotion import tree_bytes

__all__ = ["sandbox_file", "sandbox_tree"]


def sandbox_file(record: RunRecord, rel: str) -> Path | None:
    """Where the sandbox's file ``rel`` is on the host; None when it has none."""
    if record.layout != "overlay":
        path = Path(record.clone) / rel
        return path if path.exists() or path.is_symlink() else None
    box, _ = upper.run_layers(record.clone, record.base_tree)
    found = layers.resolve(box.all(), rel)
    return None if found is None else Path(os.fsdecode(found[0]))


def sandbox_tree(record: RunRecord) -> dict[str, tuple[bytes, int]]:
    """``tree_bytes`` of the sandbox's worktree (``.git`` left out)."""
    if record.layout != "overlay":
        return tree_bytes(Path(record.clone))
    box, _ = upper.run_layers(record.clone, record.base_tree)
    stack = box.all()
    out: dict[str, tuple[bytes, int]] = {}
    for path in sorted(layers.walk_files(stack, "")):
        if path == ".git" or path.startswith(".git/"):
            continue
        found = layers.resolve(stack, path)
        assert found is not None
        where, st = found
        if stat.S_ISLNK(st.st_mode):
            out[path] = (os.readlink(where), -1)
        elif stat.S_ISREG(st.st_mode):
            out[path] = (Path(os.fsdecode(where)).read_bytes(), st.st_mode & 0o7777)
    return out
