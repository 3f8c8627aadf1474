"""The grant's symlink policy (protocol: documents#symlink-leaves): which link targets a grant
allows.

A symlink is promotable as a leaf of mode ``120000`` whose content (the blob) is its
target text. The grant's ``symlinks`` field says which links a bundle may hold:

- ``none`` (the default): no change may have a link as its old or new state;
- ``inside``: a new link's target must be relative, and resolving it lexically from the
  link's own directory must stay inside the worktree and never pass through ``.git``;
- ``any``: every target text is allowed (the grant says so explicitly).

Under every policy a target must be non-empty, hold no NUL and be at most
``MAX_TARGET_BYTES`` long (the kernel's limit for a link's text).

Pure and lexical: nothing here reads the disk. Whether a component of the target is
itself a link is not judged here: promoter never follows a link, at any step, but the
programs that follow it later do, so under ``inside`` each link is also resolved through
the links of the tree the promotion would leave (protocol: bundles#symlinks-by-resolution,
``promoter.domain.resolve``).
"""

from __future__ import annotations

__all__ = ["MAX_TARGET_BYTES", "POLICIES", "SYMLINK_MODE", "is_link", "shown", "target_problem"]

SYMLINK_MODE = "120000"  # a leaf's git mode when it is a link (``path_state`` names it too)
MAX_TARGET_BYTES = 4095
POLICIES = ("none", "inside", "any")


def is_link(mode: str | None) -> bool:
    return mode == SYMLINK_MODE


def shown(target: bytes) -> str:
    """A target text as printable text: bytes that are not UTF-8 become ``\\xNN``."""
    return target.decode("utf-8", "backslashreplace")


def target_problem(path: str, target: bytes, policy: str) -> str | None:
    """Why the link at ``path`` with ``target`` breaks ``policy``, or None when it is allowed."""
    if policy not in POLICIES:
        return f"unknown symlink policy {policy!r}"
    if policy == "none":
        return "the grant allows no symlinks (symlinks: none)"
    if not target:
        return "the link target is empty"
    if b"\x00" in target:
        return "the link target contains NUL"
    if len(target) > MAX_TARGET_BYTES:
        return f"the link target is {len(target)} bytes, more than {MAX_TARGET_BYTES}"
    if policy == "any":
        return None
    if target.startswith(b"/"):
        return "the link target is absolute (symlinks: inside)"
    where = path.split("/")[:-1]
    for part in target.split(b"/"):
        if part in (b"", b"."):
            continue
        if part == b"..":
            if not where:
                return "the link target leaves the worktree (symlinks: inside)"
            where.pop()
            continue
        if part.decode("utf-8", "surrogateescape").casefold() == ".git":
            return "the link target passes through .git (symlinks: inside)"
        where.append(part.decode("utf-8", "surrogateescape"))
    return None
