"""The content-addressed blob store: ``<state>/audit/blobs/sha256/ab/<hex>``.

Blobs are streamed in, hashed while written to a temp file (anonymous, ``O_TMPFILE``,
where the filesystem has it), size-limited, fsynced, made read-only (0444) and linked
into place; a wrong hash or an oversized stream stores
nothing. Any ``OSError`` while writing (a full state directory: ``ENOSPC``, ``EDQUOT``)
removes the temp file and raises ``StorageError``, so a failed upload leaves no partial
blob. Stored blobs are immutable. Reference counting and pinning live in the database
(``promoter.store.repo``), quotas in ``promoter.store.quota``, not here.

``stream`` opens a stored blob for reading in chunks without checking it: whoever
consumes it (the fs layer writing a temp file, ``Parent.write_temp``) hashes the bytes as
they pass and refuses a mismatch before using them, so each blob is read and hashed once
and never held whole in memory. ``read`` (whole bytes, re-hashed) stays for small blobs.

Fault points: ``blob_write`` (before each chunk is written), ``blob_commit`` (before
the temp file is fsynced and linked into place). A single upload that charges its run
makes the temp durable together with the quota record (``sync(fsync=False)``, one
``syncfs``, then ``place``; ``promoter.api.routes.blobs``). A batch (``promoter.store.blob_batch``)
uses ``sync`` and ``link`` instead of ``commit``, so it can fsync each fan-out directory
once for many blobs, or make all its temps durable with one ``syncfs`` and all its links
with another (``promoter.fs.group_sync``; ``sync(fsync=False)``, ``link(synced_after=True)``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path

from promoter.domain.wire_formats import blob_path
from promoter.errors import BlobHashMismatch, BlobMissing, PayloadTooLarge, StorageError
from promoter.faults import point
from promoter.fs import flush
from promoter.store.durable import NO_TMPFILE, fsync_dir, make_dirs, start_writeback
from promoter.store.state_temps import temp_name

CHUNK = 1 << 20
_ANON_FLAGS = os.O_WRONLY | os.O_TMPFILE | os.O_CLOEXEC
_NAMED_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)  # as ``Path.is_file`` reads


class BlobStream:
    """A stored blob, read in ``CHUNK`` pieces by ``chunks``; ``sha256`` is what it must hash to.

    The file is opened when ``chunks`` starts (a blob removed since ``BlobStore.stream``
    raises ``BlobMissing`` then) and closed when the iteration ends or is closed. Nothing
    here checks the digest: the reader does, in the same pass that uses the bytes.
    """

    def __init__(self, sha256: str, path: str) -> None:
        self.sha256 = sha256
        self.path = path

    def chunks(self) -> Generator[bytes, None, None]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise BlobMissing(
                f"blob {self.sha256} is not in the blob store", sha256=self.sha256
            ) from exc
        try:
            while chunk := os.read(fd, CHUNK):
                yield chunk
        finally:
            os.close(fd)

    def mismatch(self, actual: str) -> BlobHashMismatch:
        """The error for bytes that did not hash to ``sha256`` (as ``BlobStore.read`` raises)."""
        return BlobHashMismatch(
            f"stored blob {self.sha256} no longer hashes correctly",
            sha256=self.sha256,
            actual=actual,
        )


class BlobWriter:
    """One upload in progress: ``write`` chunks, then ``commit`` or ``abort``.

    The temp file is anonymous (``O_TMPFILE`` in the store's ``tmp/``) where the
    filesystem and ``/proc/self/fd`` allow it: it has no name until its link into place,
    so nothing is created or removed in ``tmp/`` and a crash leaves nothing behind.
    Elsewhere it is a fresh name in ``tmp/`` (``promoter.store.state_temps.temp_name``,
    which the daemon's start-up sweep removes once its writer is gone), removed once linked.
    """

    def __init__(self, store: BlobStore, sha256: str, max_bytes: int) -> None:
        self._store = store
        self._sha256 = sha256
        self._max = max_bytes
        self._hash = hashlib.sha256()
        self.size = 0
        self._tmp: str | None = None  # the temp's name, when it is not anonymous
        self._synced = False
        try:
            try:
                self._fd: int | None = self._open_temp()
            except FileNotFoundError:  # the temp directory is made on first use
                make_dirs(store.tmp_dir)
                self._fd = self._open_temp()
        except OSError as exc:
            raise StorageError(f"cannot store blob: {exc}") from exc

    def _open_temp(self) -> int:
        store = self._store
        if store.anonymous_temps:
            try:
                return os.open(store._tmp, _ANON_FLAGS, 0o600)
            except OSError as exc:
                if exc.errno not in NO_TMPFILE:
                    raise
                store.anonymous_temps = False  # this filesystem has none: named from now on
        self._tmp = os.path.join(store._tmp, temp_name())
        return os.open(self._tmp, _NAMED_FLAGS, 0o600)

    def write(self, chunk: bytes | memoryview) -> None:
        assert self._fd is not None
        self.size += len(chunk)
        if self.size > self._max:
            self.abort()
            raise PayloadTooLarge(f"blob is larger than {self._max} bytes", limit=self._max)
        self._hash.update(chunk)
        view = memoryview(chunk)
        try:
            point("blob_write")
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self.abort()
            raise StorageError(f"cannot store blob: {exc}") from exc

    def start_writeback(self) -> None:
        """Begin writing the temp file's bytes to the disk now (``sync`` still fsyncs it)."""
        if self._fd is not None:
            start_writeback(self._fd)

    def read_back(self) -> bytes:
        """The temp's bytes read again and re-hashed, before the blob is linked (a link's
        target text, for a verification of evidence not yet stored)."""
        if self._tmp is not None:
            fd = os.open(self._tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        else:
            assert self._fd is not None  # the anonymous inode, by its descriptor's /proc link
            fd = os.open(f"/proc/self/fd/{self._fd}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            with os.fdopen(os.dup(fd), "rb") as handle:
                data = handle.read()
        finally:
            os.close(fd)
        if hashlib.sha256(data).hexdigest() != self._sha256:
            raise BlobHashMismatch(
                f"the temp of blob {self._sha256} no longer hashes correctly", sha256=self._sha256
            )
        return data

    def check(self) -> None:
        """Raise ``BlobHashMismatch`` (and store nothing) unless the bytes hash right."""
        actual = self._hash.hexdigest()
        if actual != self._sha256:
            self.abort()
            raise BlobHashMismatch(
                "uploaded bytes do not hash to the sha256 in the URL",
                expected=self._sha256,
                actual=actual,
            )

    def commit(self) -> bool:
        """Move the blob into place; True if it is new, False if it was present."""
        assert self._fd is not None
        self.check()
        try:
            point("blob_commit")
        except OSError as exc:
            self.abort()
            raise StorageError(f"cannot store blob: {exc}") from exc
        self.sync()
        return self.place()

    def place(self) -> bool:
        """Link the synced temp file into place and fsync its directory; True if new.

        ``commit`` without its hash check and sync, for a caller that made the temp
        durable with a group of its own (``sync(fsync=False)``, then one ``syncfs``).
        """
        target = self._store.location(self._sha256)
        created = self.link()
        try:
            fsync_dir(Path(os.path.dirname(target)))
        except OSError as exc:
            raise StorageError(f"cannot store blob: {exc}") from exc
        return created

    def sync(self, *, fsync: bool = True) -> None:
        """Make the temp file read-only and durable, ready for ``link`` (no hash check).

        ``fsync=False``: read-only only; the caller makes it durable with its group
        (``promoter.fs.group_sync``) before it links it.
        """
        assert self._fd is not None
        try:
            os.fchmod(self._fd, 0o444)
            if fsync:
                flush.fsync(self._fd)
            if self._tmp is not None:  # a named temp is linked by its name
                os.close(self._fd)
                self._fd = None
            self._synced = True
        except OSError as exc:
            self.abort()
            raise StorageError(f"cannot store blob: {exc}") from exc

    def link(self, *, synced_after: bool = False) -> bool:
        """Link the synced temp file into place (the caller fsyncs the directory); new?

        ``synced_after``: the caller syncs the whole filesystem after its links
        (``promoter.fs.group_sync``), which makes a fan-out directory made here durable
        with them; otherwise its entry is fsynced before the link.
        """
        assert self._synced
        try:
            target = self._store.location(self._sha256)
            try:
                source = self._tmp if self._tmp is not None else self._fd
                _link_making_parent(source, target, sync_parent=not synced_after)
                return True
            except FileExistsError:
                return False
        except OSError as exc:
            raise StorageError(f"cannot store blob: {exc}") from exc
        finally:
            self.abort()

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # an anonymous temp vanishes with its last descriptor
            self._fd = None
        if self._tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp)  # the temp this writer created in the store's own tmp/


FIRST_READ = 1 << 16


def _measure(fan_out: int, sha256: str) -> int | None:
    """The size of the blob ``<hex[:2]>/<hex>`` under ``fan_out`` if it hashes to
    ``sha256``; None if it is missing or does not."""
    try:
        fd = os.open(f"{sha256[0:2]}/{sha256}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=fan_out)
    except FileNotFoundError:
        return None
    digest = hashlib.sha256()
    size = 0
    try:
        chunk = os.read(fd, FIRST_READ)
        while chunk:
            digest.update(chunk)
            size += len(chunk)
            chunk = os.read(fd, CHUNK)
    finally:
        os.close(fd)
    return size if digest.hexdigest() == sha256 else None


class BlobStore:
    def __init__(self, audit_root: Path) -> None:
        self.root = audit_root
        self.tmp_dir = audit_root / "tmp"
        self._root = os.fspath(audit_root)
        self._tmp = os.fspath(self.tmp_dir)
        self._fan_out = os.path.join(self._root, "blobs", "sha256")  # + /<hex[:2]>/<hex>
        # anonymous temps need /proc/self/fd to be linked by; cleared at the first
        # filesystem that refuses O_TMPFILE
        self.anonymous_temps = os.path.isdir("/proc/self/fd")

    def path_for(self, sha256: str) -> Path:
        return self.root / blob_path(sha256)

    def location(self, sha256: str) -> str:
        """``path_for`` as a string (no ``Path`` built: intake asks it for every blob).

        Joined by hand: ``sha256`` is the caller's already-validated lowercase hex.
        """
        return f"{self._fan_out}/{sha256[0:2]}/{sha256}"

    def has(self, sha256: str) -> bool:
        return os.path.isfile(self.location(sha256))

    def writer(self, sha256: str, max_bytes: int) -> BlobWriter:
        return BlobWriter(self, sha256, max_bytes)

    def put(self, sha256: str, data: bytes, max_bytes: int | None = None) -> bool:
        writer = self.writer(sha256, max_bytes or max(len(data), 1))
        writer.write(data)
        return writer.commit()

    def read(self, sha256: str) -> bytes:
        """The blob's bytes, re-hashed: a blob whose bytes changed is reported missing."""
        try:
            with open(self.location(sha256), "rb") as handle:  # no ``Path`` built
                data = handle.read()
        except FileNotFoundError as exc:
            raise BlobMissing(f"blob {sha256} is not in the blob store", sha256=sha256) from exc
        if hashlib.sha256(data).hexdigest() != sha256:
            raise BlobHashMismatch(
                f"stored blob {sha256} no longer hashes correctly", sha256=sha256
            )
        return data

    def stream(self, sha256: str) -> BlobStream:
        """The blob, to be read in chunks and checked by its reader; ``BlobMissing`` if absent
        (or not a regular file)."""
        path = self.location(sha256)
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)
        except OSError as exc:
            if exc.errno not in _ABSENT:
                raise
            regular = False
        if not regular:
            raise BlobMissing(f"blob {sha256} is not in the blob store", sha256=sha256)
        return BlobStream(sha256, path)

    def measure_all(self, digests: Sequence[str]) -> list[int | None]:
        """Re-read and re-hash each blob: its size if intact, None if missing or corrupt.

        Each blob is opened relative to one descriptor of the fan-out directory (the
        kernel walks two components per blob, not the state directory's whole path), and
        its first read asks for 64 KiB (a bundle's verification measures thousands of
        small blobs; a 1 MiB buffer for each is allocated to be thrown away).
        """
        try:
            fan_out = os.open(self._fan_out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return [None] * len(digests)
        try:
            return [_measure(fan_out, sha256) for sha256 in digests]
        finally:
            os.close(fan_out)

    def iter_chunks(self, sha256: str) -> Iterator[bytes]:
        try:
            handle = self.path_for(sha256).open("rb")
        except FileNotFoundError as exc:
            raise BlobMissing(f"blob {sha256} is not in the blob store", sha256=sha256) from exc
        with handle:
            while chunk := handle.read(CHUNK):
                yield chunk

    def remove(self, sha256: str) -> None:
        self.path_for(sha256).unlink(missing_ok=True)


def _link_making_parent(source: str | int | None, target: str, *, sync_parent: bool) -> None:
    """Link ``source`` (a temp's name, or the descriptor of an anonymous temp) as
    ``target``, making the target's fan-out directory when it is not there yet.

    The caller fsyncs the fan-out directory after the link; a directory made here has
    its entry in ``sha256/`` fsynced first (``sync_parent``), unless the caller syncs
    the whole filesystem after its links.
    """
    assert source is not None
    try:
        _link(source, target)
    except FileNotFoundError:
        # the new fan-out directory's own entry is made durable (unless synced after)
        make_dirs(Path(os.path.dirname(target)), sync=sync_parent)
        _link(source, target)


def _link(source: str | int, target: str) -> None:
    if isinstance(source, str):
        os.link(source, target)
        return
    # ``linkat(AT_SYMLINK_FOLLOW)`` of the descriptor's /proc link names the anonymous
    # inode itself; Python asks for it only with a directory descriptor given
    parent, name = os.path.split(target)
    dir_fd = os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.link(f"/proc/self/fd/{source}", name, dst_dir_fd=dir_fd, follow_symlinks=True)
    finally:
        os.close(dir_fd)
