"""A base made over an older one: the changes between two trees as an overlay layer.

``lay`` fills a new base's ``tree/`` with what changed from ``parent``'s tree to
``tree`` (``git diff-tree -r``): the changed and added files, links and gitlinks (an
empty directory, as a checkout makes one) with their exact bytes (no conversion), a
whiteout for each deleted path, and a whiteout for a directory the changes leave with
nothing; and its ``.git/index``: the parent's index (whose stat data stays true, the
unchanged files being the parent's very inodes below) with the changed entries set.
Its cost follows the changes between the commits, not the repository's size, apart
from copying the index.

Deliberately not here: the base's temp name, lock, marker and placing
(``base_cache.py``), and deciding when a chain is too deep (``base_cache``).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from promoter.executor import layers
from promoter.git.objects import CatFile
from promoter.git.records import decode_path
from promoter.git.runner import run_git

__all__ = ["lay"]

_ABSENT = "000000"
_LINK = "120000"
_GITLINK = "160000"


def _changes(
    parent: str, tree: str, env: dict[str, str], timeout: float
) -> list[tuple[str, str, str]]:
    """(path, new mode, new id) of every change from ``parent`` to ``tree``; the mode
    ``000000`` for a deletion."""
    out = run_git(
        ["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", parent, tree],
        env=env, timeout=timeout,
    ).stdout  # fmt: skip
    fields = out.split(b"\0")
    found: list[tuple[str, str, str]] = []
    for at in range(0, len(fields) - 1, 2):
        meta, raw = fields[at], fields[at + 1]
        _, new_mode, _, new_oid, _ = meta.lstrip(b":").decode("ascii").split(" ")
        found.append((decode_path(raw), new_mode, new_oid))
    return found


def _write(cat: CatFile, files: Path, path: str, mode: str, oid: str) -> None:
    target = Path(os.fsdecode(os.path.join(os.fsencode(files), os.fsencode(path))))
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode == _GITLINK:
        target.mkdir()
        return
    if mode == _LINK:
        os.symlink(cat.read_blob(oid), os.fsencode(target))
        return
    perms = 0o777 if mode == "100755" else 0o666
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, perms)
    try:
        for chunk in cat.blob_chunks(oid):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def lay(
    parent: tuple[str, tuple[Path, ...], tuple[str, ...]],
    tree: str,
    files: Path,
    env: dict[str, str],
    timeout: float,
) -> list[str]:
    """Lay the changes from the parent base to ``tree`` into ``files``; the new tree's
    gitlinks. ``parent`` is the parent's tree, layers (top first) and gitlinks; ``env``
    the private git directory's (objects: the person's) with ``GIT_INDEX_FILE`` at
    ``files/.git/index``.
    """
    parent_tree, chain, parent_gitlinks = parent
    changes = _changes(parent_tree, tree, env, timeout)
    written = {path for path, mode, _ in changes if mode != _ABSENT}
    with CatFile(cwd=files, env=env, timeout=timeout) as cat:
        for path, mode, oid in changes:
            if mode != _ABSENT:
                _write(cat, files, path, mode, oid)
            elif not layers.needs_no_whiteout(path, written):
                target = os.path.join(os.fsencode(files), os.fsencode(path))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(0, 0))
    layers.collapse_empty(files, chain)
    index = Path(env["GIT_INDEX_FILE"])
    shutil.copyfile(chain[0] / ".git" / "index", index)
    lines = b"".join(
        b"%s %s\t%s\0"
        % (
            (mode if mode != _ABSENT else "0").encode(),
            (oid if mode != _ABSENT else "0" * 40).encode(),
            os.fsencode(path),
        )
        for path, mode, oid in changes
    )
    if lines:
        run_git(
            ["update-index", "-z", "--index-info"],
            env={**env, "GIT_LITERAL_PATHSPECS": "1"}, input=lines, timeout=timeout,
        )  # fmt: skip
    gone = {path for path, _, _ in changes}
    kept = [path for path in parent_gitlinks if path not in gone]
    return sorted(kept + [path for path, mode, _ in changes if mode == _GITLINK])
