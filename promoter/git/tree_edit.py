"""A new tree from an old one: some paths removed, some files set, only touched trees rewritten.

This module owns ``edit_tree``: given a base tree (read through a running
``cat-file --batch``), the paths to remove (each with everything below it) and the files
to set (path to mode and blob id), it builds the resulting tree the way ``write-tree``
would from an index holding the same files: entries in git's order (a directory sorts as
its name plus ``/``), directories left empty dropped, untouched subtrees kept by id. Only
the trees on the way to a touched path are read and written; new trees are stored as
loose objects (zlib, the way git stores them) in the given object directory, through a
temp file of promoter's own that is renamed into place. Removals apply before additions.

It refuses (``TreeConflict``) a file to set below a path that is a file in the result,
a path that is set twice, and a base that is missing or no tree; the caller then
builds the tree another way. It deliberately does not decide which paths changed or
hash file contents (callers hand in blob ids), and it writes nothing but tree objects.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Iterable, Mapping

from promoter.domain.record_type import field, record
from promoter.fs.own_temp import OwnTemp
from promoter.git.objects import CatFile

__all__ = ["TREE_MODE", "TreeConflict", "edit_tree", "parse_tree", "tree_bytes"]

TREE_MODE = b"40000"
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class TreeConflict(Exception):
    """The edit cannot be applied to this base as asked."""


def parse_tree(data: bytes) -> dict[bytes, tuple[bytes, bytes]]:
    """``name -> (mode, 20-byte id)`` of a raw tree object's entries."""
    entries: dict[bytes, tuple[bytes, bytes]] = {}
    pos, end = 0, len(data)
    while pos < end:
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        mode, name = data[pos:space], data[space + 1 : nul]
        entries[name] = (mode, data[nul + 1 : nul + 21])
        pos = nul + 21
    return entries


def tree_bytes(entries: Mapping[bytes, tuple[bytes, bytes]]) -> bytes:
    """The raw tree object of ``entries``, in git's order."""

    def key(name: bytes) -> bytes:
        return name + b"/" if entries[name][0] == TREE_MODE else name

    ordered = sorted(entries, key=key)
    return b"".join(entries[name][0] + b" " + name + b"\0" + entries[name][1] for name in ordered)


@record
class _Node:
    """One directory of the result: its entries, and the subdirectories being edited."""

    entries: dict[bytes, tuple[bytes, bytes]]
    children: dict[bytes, _Node] = field(default_factory=dict)


class _Editor:
    def __init__(self, reader: CatFile, objects: str, base: str) -> None:
        self.reader = reader
        self.objects = objects
        self.root = _Node(self._read(base))

    def _read(self, oid: str) -> dict[bytes, tuple[bytes, bytes]]:
        if oid == _EMPTY_TREE:
            return {}
        info = self.reader.request(oid)
        if info is None or info.type != "tree":
            data = b"".join(self.reader.chunks()) if info is not None else b""
            raise TreeConflict(f"{oid} is not a tree in this repository ({len(data)} bytes)")
        return parse_tree(b"".join(self.reader.chunks()))

    def _child(self, node: _Node, name: bytes, *, create: bool) -> _Node | None:
        child = node.children.get(name)
        if child is not None:
            return child
        entry = node.entries.get(name)
        if entry is None:
            if not create:
                return None
            child = _Node({})
        elif entry[0] == TREE_MODE:
            child = _Node(self._read(entry[1].hex()))
        elif create:
            raise TreeConflict(f"{name!r} is a file, and a file below it is to be set")
        else:
            return None
        node.children[name] = child
        return child

    def remove(self, path: bytes) -> None:
        *parents, last = path.split(b"/")
        node: _Node | None = self.root
        for name in parents:
            assert node is not None
            node = self._child(node, name, create=False)
            if node is None:
                return  # nothing there to remove
        assert node is not None
        node.entries.pop(last, None)
        node.children.pop(last, None)

    def add(self, path: bytes, mode: bytes, oid: bytes) -> None:
        *parents, last = path.split(b"/")
        node: _Node | None = self.root
        for name in parents:
            assert node is not None
            node = self._child(node, name, create=True)
        assert node is not None
        if last in node.children or (last in node.entries and node.entries[last][0] == TREE_MODE):
            raise TreeConflict(f"{path!r} is a directory, and a file is to be set there")
        node.entries[last] = (mode, oid)

    def write(self, node: _Node) -> bytes | None:
        """The id of ``node`` as a tree (written if new); ``None`` when it is empty."""
        for name, child in node.children.items():
            oid = self.write(child)
            if oid is None:
                node.entries.pop(name, None)
            else:
                node.entries[name] = (TREE_MODE, oid)
        node.children = {}
        if not node.entries:
            return None
        return _store(self.objects, tree_bytes(node.entries))


def edit_tree(
    reader: CatFile,
    objects: str,
    base: str,
    removed: Iterable[bytes],
    added: Mapping[bytes, tuple[bytes, str]],
) -> str:
    """The tree ``base`` with ``removed`` (and what is below them) gone and ``added`` set."""
    editor = _Editor(reader, objects, base)
    for path in removed:
        editor.remove(path)
    for path, (mode, oid) in added.items():
        editor.add(path, mode, bytes.fromhex(oid))
    written = editor.write(editor.root)
    return (written if written is not None else _store(objects, b"")).hex()


def _store(objects: str, body: bytes) -> bytes:
    """Store the tree ``body`` as a loose object unless it is there; its 20-byte id."""
    data = b"tree %d\0" % len(body) + body
    oid = hashlib.sha1(data, usedforsecurity=False).digest()
    hexed = oid.hex()
    folder = os.path.join(objects, hexed[:2])
    final = os.path.join(folder, hexed[2:])
    if os.path.exists(final):
        return oid
    os.makedirs(folder, mode=0o755, exist_ok=True)
    temp = OwnTemp.create(folder, "tmp_obj_")
    try:
        with os.fdopen(temp.fd, "wb") as out:
            out.write(zlib.compress(data))
        temp.place(final)
    finally:
        temp.discard()  # only if the name still holds the temp (not placed)
    return oid
