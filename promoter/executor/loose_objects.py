"""Throw-away blobs for the builder: one read pass names, hashes and stores a file's bytes.

This module owns ``LooseObjects``: writing blobs into a private git object directory as
loose objects stored without compression (zlib level 0, which git reads like any other),
computing the git blob id (SHA-1 of header and bytes) and the sha256 in the same pass
that writes them, and remembering each stored blob's sha256 and size. Bytes whose id is
the caller's ``known`` one (the base's) are hashed and not stored. ``store_object``
stores one small object of another type the same way (the builder's private commit).

``chunks`` reads back a blob it stored itself (the seeded start lays the person's new
content from there without starting a ``cat-file``). It deliberately does not decide
which paths to read, pack anything or read any other object (``cat-file`` does). A file
that is not a regular file, or whose size changes while it is read, is refused with
``Unstable``; other ``OSError`` reach the caller.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import zlib
from collections.abc import Iterable, Iterator

from promoter.fs.own_temp import OwnTemp

__all__ = ["LooseObjects", "Unstable"]

_CHUNK = 1 << 20
IN_MEMORY = 4 << 20  # read whole up to this size; stream above


class Unstable(Exception):
    """The file is not a regular file, or changed while it was read."""


class LooseObjects:
    """Blobs stored in ``objects`` (a private object directory); ``digests`` by id."""

    def __init__(self, objects: str) -> None:
        self.objects = objects
        self.digests: dict[str, tuple[str, int]] = {}

    def store_file(self, full: bytes, known: str | None = None) -> str:
        """The blob id of the regular file ``full`` (not following a final symlink)."""
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb", buffering=0) as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise Unstable
            size = st.st_size
            if size <= IN_MEMORY:
                data = handle.readall()
                if len(data) != size:
                    raise Unstable
                return self.store_bytes(data, known)
            return self._stream(_chunks(handle), size, known)

    def store_bytes(self, data: bytes, known: str | None = None) -> str:
        """The blob id of ``data``, stored unless it is ``known`` or already stored."""
        header = b"blob %d\0" % len(data)
        oid = hashlib.sha1(header + data, usedforsecurity=False).hexdigest()  # git's name
        if oid != known and oid not in self.digests:
            temp = self._write_temp([header, data])
            self._place_or_drop(temp, oid, keep=True)
            self.digests[oid] = (hashlib.sha256(data).hexdigest(), len(data))
        return oid

    def chunks(self, oid: str) -> Iterator[bytes] | None:
        """The bytes of blob ``oid`` as this store wrote it, or ``None`` when it did not
        store it; opened at once, read as iterated (``ValueError``: not the blob it wrote)."""
        if oid not in self.digests:
            return None
        fd = os.open(
            os.path.join(self.objects, oid[:2], oid[2:]), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        )
        return _inflated(os.fdopen(fd, "rb", buffering=0), self.digests[oid][1])

    def store_object(self, kind: bytes, data: bytes) -> str:
        """The id of the ``kind`` object (``commit``, ``tree``) holding ``data``, stored."""
        header = b"%s %d\0" % (kind, len(data))
        oid = hashlib.sha1(header + data, usedforsecurity=False).hexdigest()
        self._place_or_drop(self._write_temp([header, data]), oid, keep=True)
        return oid

    def _stream(self, chunks: Iterable[memoryview], size: int, known: str | None) -> str:
        header = b"blob %d\0" % size
        sha1 = hashlib.sha1(header, usedforsecurity=False)  # git's object name
        sha256 = hashlib.sha256()
        seen = 0

        def hashed() -> Iterator[bytes | memoryview]:
            nonlocal seen
            yield header
            for chunk in chunks:
                seen += len(chunk)
                sha1.update(chunk)
                sha256.update(chunk)
                yield chunk

        temp = self._write_temp(hashed())
        oid = sha1.hexdigest()
        keep = seen == size and oid != known and oid not in self.digests
        self._place_or_drop(temp, oid, keep=keep)
        if seen != size:
            raise Unstable
        if keep:
            self.digests[oid] = (sha256.hexdigest(), size)
        return oid

    def _write_temp(self, parts: Iterable[bytes | memoryview]) -> OwnTemp:
        """``parts`` as a zlib stream stored without compression, in a private temp file."""
        deflate = zlib.compressobj(0)
        temp = OwnTemp.create(self.objects, "tmp_obj_")
        try:
            with os.fdopen(temp.fd, "wb") as out:
                for part in parts:
                    out.write(deflate.compress(part))
                out.write(deflate.flush())
        except BaseException:
            temp.discard()
            raise
        return temp

    def _place_or_drop(self, temp: OwnTemp, oid: str, *, keep: bool) -> None:
        try:
            if keep:
                folder = os.path.join(self.objects, oid[:2])
                os.makedirs(folder, mode=0o700, exist_ok=True)
                temp.place(os.path.join(folder, oid[2:]))
                return
        except BaseException:
            temp.discard()
            raise
        temp.discard()  # our own temp file in the private directory


def _chunks(handle: io.RawIOBase) -> Iterator[memoryview]:
    """The rest of ``handle`` (an unbuffered binary file) in views of one reused buffer."""
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    while True:
        count = handle.readinto(buffer)
        if not count:
            return
        yield view[:count]


def _inflated(handle: io.RawIOBase, size: int) -> Iterator[bytes]:
    """The content of the loose blob of ``size`` bytes read from ``handle`` (closed at the
    end); ``ValueError`` for another header, length or an unfinished stream."""
    with handle:
        inflate = zlib.decompressobj()
        header = b"blob %d\0" % size
        pending: bytes | None = b""
        seen = 0
        for chunk in _chunks(handle):
            data = inflate.decompress(chunk)
            if pending is not None:
                pending += data
                if len(pending) < len(header):
                    continue
                if not pending.startswith(header):
                    raise ValueError("not the blob this store wrote")
                data, pending = pending[len(header) :], None
            seen += len(data)
            if data:
                yield data
        if pending is not None or not inflate.eof or inflate.unused_data or seen != size:
            raise ValueError("not the blob this store wrote")
