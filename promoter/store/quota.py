"""Per-run storage quota: the bytes of new blobs each executor run has stored
(protocol: storage#storage-quota).

``RunQuota.reserve(run, n)`` claims bytes before they are written and raises
``QuotaExceeded`` when the run's stored plus in-flight bytes would pass the limit, so an
upload over quota is refused while it streams and stores nothing. ``settle(run, reserved,
stored)`` ends a reservation: ``stored`` bytes (a blob this upload created) become a
durable charge, the rest is given back. A run is charged first, then the blob is
committed; a commit that fails or finds the blob already present gives the bytes back, so
a crash between the two can only over-charge, never let a run store more than its quota.
Charges live in one small file per run under ``<state>/quota/``, replaced with temp +
fsync + rename, so they survive restarts. ``charging`` is ``settle`` for an upload that
flushes its blob's temp and the record's temp with one ``syncfs`` (``promoter.fs.
group_sync``): the record's temp is written, the caller's block makes both durable,
then the record is renamed into place and its directory fsynced, all before the blob
is linked; the order on disk is the same as ``settle``'s, one flush fewer.

Fault points: ``quota_after_*`` (``promoter.store.durable``'s, one after each syscall of a
record's write).

Deliberately not here: which blobs a run uploaded (blobs are shared and deduplicated; only
the run that stored a blob first pays for it), and giving bytes back when ``gc`` removes
a blob: a run's quota is spent for the run's lifetime. One daemon process per state
directory is assumed (the counts are guarded by a thread lock, not a file lock).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from promoter.errors import QuotaExceeded, StorageError
from promoter.store.durable import StagedReplace, make_dirs, write_replace


class RunQuota:
    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = directory
        self.limit = limit
        self._lock = threading.Lock()  # the counts (and a run's first read), never a write
        self._save_lock = threading.Lock()  # one quota file write at a time
        self._stored: dict[str, int] = {}
        self._pending: dict[str, int] = {}

    def used(self, run_id: str) -> int:
        """Bytes charged to ``run_id`` (stored blobs; uploads in flight not included)."""
        with self._lock:
            return self._load(run_id)

    def reserve(self, run_id: str, size: int) -> None:
        """Claim ``size`` more bytes for an upload in flight, or raise ``QuotaExceeded``."""
        with self._lock:
            stored = self._load(run_id)
            pending = self._pending.get(run_id, 0)
            if stored + pending + size > self.limit:
                raise QuotaExceeded(
                    f"executor run {run_id} would store more than its quota of "
                    f"{self.limit} bytes ({stored} stored, {pending} in flight)",
                    limit=self.limit,
                    stored=stored,
                )
            self._pending[run_id] = pending + size

    def settle(self, run_id: str, reserved: int, stored: int) -> None:
        """End a reservation of ``reserved`` bytes; charge ``stored`` of them durably."""
        with self._lock:
            self._pending[run_id] = max(0, self._pending.get(run_id, 0) - reserved)
            if not self._pending[run_id]:
                del self._pending[run_id]
            if not stored:
                return
            self._stored[run_id] = self._load(run_id) + stored
        self._persist(run_id, undo=stored)

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

        On entering, the record's temp is written in the records' folder and not flushed
        (nothing is written when nothing is charged). The block must make that temp
        durable (one ``syncfs`` of that filesystem, with the caller's own files: see
        ``alongside``); on leaving it, the record is renamed into place and its folder
        fsynced. An exception in the block, or while writing, takes the charge back and
        leaves the record as it was (``StorageError`` for an ``OSError`` of the record's
        own). Quota records are written one at a time, this whole block included, so the
        file always ends at the newest total.
        """
        with self._lock:
            self._pending[run_id] = max(0, self._pending.get(run_id, 0) - reserved)
            if not self._pending[run_id]:
                del self._pending[run_id]
            if stored:
                self._stored[run_id] = self._load(run_id) + stored
        if not stored:
            yield
            return
        with self._save_lock:
            staged: StagedReplace | None = None
            try:
                with self._lock:
                    total = self._stored[run_id]
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
            except BaseException:
                with self._lock:
                    self._stored[run_id] = max(0, self._stored[run_id] - stored)
                raise
            finally:
                if staged is not None:
                    staged.close()

    def refund(self, run_id: str, size: int) -> None:
        """Give back ``size`` durably charged bytes (a charged commit that failed)."""
        with self._lock:
            self._stored[run_id] = max(0, self._load(run_id) - size)
        self._persist(run_id, undo=-size)

    def _persist(self, run_id: str, *, undo: int) -> None:
        """Write the run's newest total; on failure take back the change of ``undo`` bytes.

        Writes are serialized by their own lock and each writes the newest total, so the
        file ends at the latest value, while ``reserve`` never waits for an fsync.
        """
        with self._save_lock:
            with self._lock:
                total = self._stored[run_id]
            try:
                self._save(run_id, total)
            except BaseException:
                with self._lock:
                    self._stored[run_id] = max(0, self._stored[run_id] - undo)
                raise

    def _file(self, run_id: str) -> Path:
        return self.directory / f"{hashlib.sha256(run_id.encode()).hexdigest()[:32]}.json"

    def _load(self, run_id: str) -> int:
        if run_id not in self._stored:
            try:
                record = json.loads(self._file(run_id).read_bytes())
                self._stored[run_id] = int(record["bytes"])
            except FileNotFoundError:
                self._stored[run_id] = 0
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise StorageError(f"cannot read the quota record of {run_id}: {exc}") from exc
        return self._stored[run_id]

    @staticmethod
    def _record(run_id: str, total: int) -> bytes:
        return json.dumps({"executor_run_id": run_id, "bytes": total}, sort_keys=True).encode()

    def _save(self, run_id: str, total: int) -> None:
        try:
            write_replace(self._file(run_id), self._record(run_id, total), fault="quota")
        except OSError as exc:
            raise StorageError(f"cannot write the quota record of {run_id}: {exc}") from exc
