"""A tree with some entries changed, written without reading the rest of it.

``edited_tree`` returns the id of ``base_tree`` with path edits applied (a file or link
set, or a path deleted). Only the trees on the edited paths are read (through one
running ``git cat-file --batch``) and only the trees that change are written (through a
``store`` callable, e.g. ``LooseObjects.store_object``), so the cost follows the edits,
not the tree's size: what ``git read-tree`` + ``update-index`` + ``write-tree`` give, for
a start tree of a large repository in milliseconds. A directory left with nothing is
left out of its parent, as git leaves it.

Deliberately not here: reading files, hashing blobs (the caller has their ids), or
gitlinks (a caller that must write one uses the index).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from promoter.errors import GitError
from promoter.git.objects import CatFile

__all__ = ["edited_tree"]

_DIR = b"40000"


class _Node:
    """One name of the edited tree: its own edit, if any, and the edits below it (a plain
    class: made at each run's import, where a dataclass's methods are compiled)."""

    __slots__ = ("children", "edited", "leaf")

    def __init__(self) -> None:
        self.edited = False  # whether the name itself is set or deleted
        self.leaf: tuple[bytes, str] | None = None  # set to this (mode, id); None: deleted
        self.children: dict[bytes, _Node] = {}


def _parse(data: bytes) -> dict[bytes, tuple[bytes, str]]:
    entries: dict[bytes, tuple[bytes, str]] = {}
    at = 0
    while at < len(data):
        space = data.index(b" ", at)
        nul = data.index(b"\0", space)
        mode, name = data[at:space], data[space + 1 : nul]
        entries[name] = (mode, data[nul + 1 : nul + 21].hex())
        at = nul + 21
    return entries


def _serialize(entries: dict[bytes, tuple[bytes, str]]) -> bytes:
    def key(name: bytes) -> bytes:
        return name + b"/" if entries[name][0] == _DIR else name

    return b"".join(
        entries[name][0] + b" " + name + b"\0" + bytes.fromhex(entries[name][1])
        for name in sorted(entries, key=key)
    )


def edited_tree(
    cat: CatFile,
    store: Callable[[bytes, bytes], str],
    base_tree: str,
    edits: Iterable[tuple[bytes, str | None, str | None]],
) -> str:
    """``base_tree`` with ``edits`` (path, mode or None to delete, blob id) applied."""
    root = _Node()
    for path, mode, oid in edits:
        node = root
        for part in path.split(b"/"):
            node = node.children.setdefault(part, _Node())
        node.edited = True
        node.leaf = None if mode is None or oid is None else (mode.encode("ascii"), oid)

    def read(oid: str) -> dict[bytes, tuple[bytes, str]]:
        info = cat.request(oid)
        if info is None or info.type != "tree":
            raise GitError(f"{oid} is not a tree of the repository", oid=oid)
        return _parse(b"".join(cat.chunks()))

    def apply(tree: str | None, node: _Node) -> str | None:
        entries = read(tree) if tree is not None else {}
        for name, child in node.children.items():
            if child.edited and child.leaf is not None:
                entries[name] = child.leaf  # a file or link: what was below goes
                continue
            if child.edited:
                entries.pop(name, None)
            if child.children:
                held = entries.get(name)
                below = held[1] if held is not None and held[0] == _DIR else None
                made = apply(below, child)
                if made is None:
                    entries.pop(name, None)
                else:
                    entries[name] = (_DIR, made)
        if not entries:
            return None
        return store(b"tree", _serialize(entries))

    return apply(base_tree, root) or store(b"tree", b"")
