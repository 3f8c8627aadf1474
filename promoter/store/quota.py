"""Per-run storage quota: the bytes of new blobs each executor run has stored
(protocol: storage#storage-quota).

``RunQuota.reserve(run, n)`` claims bytes before they are written and raises
``QuotaExceeded`` when the run's stored plus in-flight bytes would pass the limit, so an
upload over quota is refused while it streams and stores nothing. That is an early
refusal, from this process's uploads in flight only. ``settle(run, reserved, stored)``
ends a reservation: ``stored`` bytes (a blob this upload created) become a durable charge,
the rest is given back. The charge is the check that holds: it reads the run's record
from disk, refuses with ``QuotaExceeded`` (nothing written) when the record plus
``stored`` would pass the limit, and writes the new total, all under a lock held across
every process of the daemon, so the workers of ``serve --workers N`` (each with its own
uploads in flight) can neither lose each other's charges nor let a run pass its quota.
A run is charged first, then the blob is committed; a commit that fails or finds the
blob already present gives the bytes back, so a crash between the two can only
over-charge, never let a run store more than its quota.

Charges live in one small file per run under ``<state>/quota/``, replaced with temp +
fsync + rename, so they survive restarts. ``charging`` is ``settle`` for an upload that
flushes its blob's temp and the record's temp with one ``syncfs`` (``promoter.fs.
group_sync``): the record's temp is written, the caller's block makes both durable,
then the record is renamed into place and its directory fsynced, all before the blob
is linked; the order on disk is the same as ``settle``'s, one flush fewer.

The lock is an exclusive ``flock`` of the ``quota/`` folder itself (promoter's own, made
by ``make_dirs``, never deleted; opened with ``O_NOFOLLOW``, so never through a symlink),
taken after a thread lock of this process (a ``flock`` is its open file's, and this
process keeps one): one charge, refund or ``charging`` block at a time in the daemon,
held across the read, the check and the write (see docs/decisions/
quota-charges-under-a-folder-flock.md).

Fault points: ``quota_after_*`` (``promoter.store.durable``'s, one after each syscall of a
record's write).

Deliberately not here: which blobs a run uploaded (blobs are shared and deduplicated; only
the run that stored a blob first pays for it), and giving bytes back when ``gc`` removes
a blob: a run's quota is spent for the run's lifetime.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from promoter.errors import QuotaExceeded, StorageError
from promoter.store.durable import StagedReplace, make_dirs, write_replace

_LOCK_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class RunQuota:
    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = directory
        self.limit = limit
        self._lock = threading.Lock()  # this process's reservations, never a write
        self._charge_lock = threading.Lock()  # this process's turn at the folder's flock
        self._folder: int | None = None  # the quota folder, opened once, for its flock
        self._pending: dict[str, int] = {}

    def used(self, run_id: str) -> int:
        """Bytes charged to ``run_id`` (stored blobs; uploads in flight not included)."""
        return self._read(run_id)

    def reserve(self, run_id: str, size: int) -> None:
        """Claim ``size`` more bytes for an upload in flight, or raise ``QuotaExceeded``."""
        stored = self._read(run_id)
        with self._lock:
            pending = self._pending.get(run_id, 0)
            if stored + pending + size > self.limit:
                raise self._exceeded(run_id, stored, pending)
            self._pending[run_id] = pending + size

    def settle(self, run_id: str, reserved: int, stored: int) -> None:
        """End a reservation of ``reserved`` bytes; charge ``stored`` of them durably, or
        raise ``QuotaExceeded`` (nothing charged) when the run's record plus ``stored``
        would pass the limit."""
        self._release(run_id, reserved)
        if not stored:
            return
        with self._charging():
            total = self._charge(run_id, stored)
            self._save(run_id, total)

    def alongside(self, directory: Path) -> bool:
        """Whether the quota records are on the filesystem of ``directory`` (their folder
        made first if missing): then one ``syncfs`` there makes a record's temp durable
        with the caller's files (``charging``)."""
        try:
            make_dirs(self.directory, fault="quota")
            return os.stat(self.directory).st_dev == os.stat(directory).st_dev
        except OSError as exc:
            raise StorageError(f"cannot make the quota records' folder: {exc}") from exc

    @contextmanager
    def charging(self, run_id: str, reserved: int, stored: int) -> Iterator[None]:
        """``settle``, the charge's record made durable by the caller's group sync.

        On entering, the reservation ends, the charge is checked against the run's record
        (``QuotaExceeded`` then, before the block runs) and the record's temp is written in
        the records' folder and not flushed (nothing is written when nothing is charged).
        The block must make that temp durable (one ``syncfs`` of that filesystem, with the
        caller's own files: see ``alongside``); on leaving it, the record is renamed into
        place and its folder fsynced. An exception in the block, or while writing, leaves
        the record as it was (``StorageError`` for an ``OSError`` of the record's own).
        The daemon's charges are made one at a time, this whole block included, so the
        file always ends at the newest total.
        """
        self._release(run_id, reserved)
        if not stored:
            yield
            return
        with self._charging():
            total = self._charge(run_id, stored)
            staged: StagedReplace | None = None
            try:
                try:
                    staged = StagedReplace(
                        self._file(run_id), self._record(run_id, total), fault="quota"
                    )
                except OSError as exc:
                    raise StorageError(f"cannot write the quota record of {run_id}: {exc}") from exc
                yield
                try:
                    staged.finish()
                except OSError as exc:
                    raise StorageError(f"cannot write the quota record of {run_id}: {exc}") from exc
            finally:
                if staged is not None:
                    staged.close()

    def refund(self, run_id: str, size: int) -> None:
        """Give back ``size`` durably charged bytes (a charged commit that failed)."""
        with self._charging():
            self._save(run_id, max(0, self._read(run_id) - size))

    def _release(self, run_id: str, reserved: int) -> None:
        with self._lock:
            left = max(0, self._pending.get(run_id, 0) - reserved)
            if left:
                self._pending[run_id] = left
            else:
                self._pending.pop(run_id, None)

    def _charge(self, run_id: str, stored: int) -> int:
        """The run's new total with ``stored`` more bytes (under ``_charging``), or
        ``QuotaExceeded`` when it would pass the limit."""
        total = self._read(run_id) + stored
        if total > self.limit:
            raise self._exceeded(run_id, total - stored, 0)
        return total

    def _exceeded(self, run_id: str, stored: int, pending: int) -> QuotaExceeded:
        return QuotaExceeded(
            f"executor run {run_id} would store more than its quota of "
            f"{self.limit} bytes ({stored} stored, {pending} in flight)",
            limit=self.limit,
            stored=stored,
        )

    @contextmanager
    def _charging(self) -> Iterator[None]:
        """This process's thread lock, then the quota folder's ``flock``: one charge at a
        time among every worker on this state directory."""
        with self._charge_lock:
            folder = self._open_folder()
            try:
                fcntl.flock(folder, fcntl.LOCK_EX)
            except OSError as exc:
                raise StorageError(f"cannot lock the quota records' folder: {exc}") from exc
            try:
                yield
            finally:
                fcntl.flock(folder, fcntl.LOCK_UN)

    def _open_folder(self) -> int:
        if self._folder is None:
            try:
                make_dirs(self.directory, fault="quota")
                self._folder = os.open(self.directory, _LOCK_FLAGS)
            except OSError as exc:
                raise StorageError(f"cannot open the quota records' folder: {exc}") from exc
        return self._folder

    def _file(self, run_id: str) -> Path:
        return self.directory / f"{hashlib.sha256(run_id.encode()).hexdigest()[:32]}.json"

    def _read(self, run_id: str) -> int:
        """The run's charged total as its record on disk holds it (0 without a record)."""
        try:
            record = json.loads(self._file(run_id).read_bytes())
            return int(record["bytes"])
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"cannot read the quota record of {run_id}: {exc}") from exc

    @staticmethod
    def _record(run_id: str, total: int) -> bytes:
        return json.dumps({"executor_run_id": run_id, "bytes": total}, sort_keys=True).encode()

    def _save(self, run_id: str, total: int) -> None:
        try:
            write_replace(self._file(run_id), self._record(run_id, total), fault="quota")
        except OSError as exc:
            raise StorageError(f"cannot write the quota record of {run_id}: {exc}") from exc
