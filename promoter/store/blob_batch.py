"""Batched blob intake: many small blobs from one framed stream, committed together.

``BlobBatch.feed`` parses the frames of ``promoter.domain.blob_frames`` as chunks arrive
and writes each blob to its own temp while hashing it, its quota reserved at its header;
``finish`` commits every blob that hashed right at once, in the order of a single upload
(protocol: storage#blob-intake-order), with one ``syncfs`` for the temps and one for the
directories where ``promoter.fs.group_sync`` allows, else a few fsyncs at once. Per-blob
and whole-batch refusals are a single upload's (protocol: api#blob-upload); a charge that
another worker's charges left over the run's quota refuses each blob the batch would have
stored with ``quota_exceeded`` and stores none of them. Fault points:
``blob_batch_write``, ``blob_batch_synced``, ``blob_batch_charged``,
``blob_batch_recorded``, ``blob_batch_link``.

Not here: HTTP, authentication, the request's size bound (the route's), or which blobs go
into a batch (the client's).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from promoter.domain.blob_frames import BATCH_MAX_BLOBS, HEADER_MAX, parse_header
from promoter.errors import (
    BadRequest,
    BlobHashMismatch,
    PayloadTooLarge,
    PromoterError,
    QuotaExceeded,
    StorageError,
)
from promoter.faults import point
from promoter.fs.group_sync import GroupSync
from promoter.fs.shares import in_shares
from promoter.store.blobs import BlobStore, BlobWriter
from promoter.store.durable import fsync_dir
from promoter.store.quota import RunQuota

SYNC_WORKERS = 8
T = TypeVar("T")
Record = Callable[[list[tuple[str, int]]], None]


def _point(name: str) -> None:
    """A fault point whose I/O error reads as the storage error it stands for."""
    try:
        point(name)
    except OSError as exc:
        raise StorageError(f"cannot store blob: {exc}") from exc


def _in_shares(items: Sequence[T], work: Callable[[T], object]) -> None:
    """``work`` on every item, in up to ``SYNC_WORKERS`` threads that each take every n-th
    item (``promoter.fs.shares``); the earliest failed item's error is raised once all
    ended."""
    in_shares(items, work, workers=SYNC_WORKERS, name="blob-batch-sync")


@dataclass
class Item:
    sha256: str
    size: int
    writer: BlobWriter | None = None
    reserved: int = 0
    free: bool = False  # already stored when its header arrived: costs nothing
    charge: int = 0
    created: bool = False
    error: PromoterError | None = None

    def answer(self) -> dict[str, Any]:
        if self.error is not None:
            return {
                "sha256": self.sha256,
                "bytes": self.size,
                "created": False,
                "status": self.error.http_status,
                "code": self.error.code,
                "detail": str(self.error),
            }
        status = 201 if self.created else 200
        return {
            "sha256": self.sha256,
            "bytes": self.size,
            "created": self.created,
            "status": status,
            "code": None,
            "detail": None,
        }


class BlobBatch:
    """One batch in progress: ``feed`` chunks, then ``finish`` or ``abort``.

    Every method but ``abort`` does file I/O: call them in a worker thread.
    """

    def __init__(
        self,
        store: BlobStore,
        quota: RunQuota,
        run_id: str,
        *,
        blob_limit: int,
        record: Record,
        max_blobs: int = BATCH_MAX_BLOBS,
        group_sync_limit: int | None = None,
        group_fault: str = "after_group_sync",
    ) -> None:
        self.store = store
        self.quota = quota
        self.run_id = run_id
        self.blob_limit = blob_limit
        self.max_blobs = max_blobs
        self._record = record
        self.items: list[Item] = []
        # one syncfs for the temps and one for the links, where it is as good as fsyncs;
        # started before anything is written (it samples the filesystem's errors now), on
        # the temps' own directory (a link into place never leaves its filesystem)
        self._group = (
            None
            if group_sync_limit is None
            else GroupSync.start_at(os.fspath(store.tmp_dir), group_sync_limit, group_fault)
        )
        self._head = bytearray()
        self._current: Item | None = None
        self._remaining = 0
        self._settled = False

    # --- streaming ----------------------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            if self._current is None:
                newline = bytes(view[: HEADER_MAX + 1 - len(self._head)]).find(b"\n")
                if newline < 0:
                    self._head += view
                    view = view[len(view) :]
                    if len(self._head) > HEADER_MAX:
                        raise BadRequest("a blob frame header is longer than allowed")
                    continue
                self._head += view[:newline]
                view = view[newline + 1 :]
                self._start(bytes(self._head))
                self._head.clear()
                continue
            piece = view[: self._remaining]
            view = view[len(piece) :]
            self._remaining -= len(piece)
            item = self._current
            if item.writer is not None:
                _point("blob_batch_write")
                item.writer.write(piece)  # hashed and written from the body's bytes
            if not self._remaining:
                self._end(item)

    def _start(self, line: bytes) -> None:
        header = parse_header(line)
        if header is None:
            raise BadRequest('a blob frame header must be "<64 lowercase hex> <size>"')
        if len(self.items) >= self.max_blobs:
            raise PayloadTooLarge(f"at most {self.max_blobs} blobs per batch", limit=self.max_blobs)
        item = Item(*header)
        self.items.append(item)
        self._current, self._remaining = item, item.size
        if item.size > self.blob_limit:
            item.error = PayloadTooLarge(
                f"blob is larger than {self.blob_limit} bytes, the most a batch carries",
                limit=self.blob_limit,
            )
        else:
            item.free = self.store.has(item.sha256)
            if not item.free:
                try:
                    self.quota.reserve(self.run_id, item.size)
                    item.reserved = item.size
                except QuotaExceeded as exc:
                    item.error = exc
        if item.error is None:
            item.writer = self.store.writer(item.sha256, max(item.size, 1))
        if not self._remaining:
            self._end(item)

    def _end(self, item: Item) -> None:
        self._current = None
        if item.writer is None:
            return
        try:
            item.writer.check()
        except BlobHashMismatch as exc:
            item.error = exc
            item.writer = None
            return
        if self._group is None:  # one syncfs writes them all at once; else hint each
            item.writer.start_writeback()  # its fsync in ``finish`` then waits far less

    # --- committing ---------------------------------------------------------------------

    @property
    def group(self) -> GroupSync | None:
        """The batch's group sync (None: an fsync each), opened before its first byte."""
        return self._group

    @property
    def reserved(self) -> int:
        return sum(i.reserved for i in self.items)

    def stage(self) -> list[Item]:
        """The blobs that hashed right, each charged (none for one stored meanwhile), with
        nothing flushed, for a caller that stores them with other evidence
        (``promoter.store.evidence``) and then ends the batch (``settled``) or aborts it.
        A blob refused now (removed meanwhile and over quota) raises its error."""
        if self._current is not None or self._head:
            raise BadRequest("the batch ended inside a blob frame")
        good = self._charge([i for i in self.items if i.error is None and i.writer is not None])
        for item in self.items:
            if item.error is not None:
                raise item.error
        return good

    def settled(self) -> None:
        """The reservations are ended by the caller (``RunQuota.charging`` or ``settle``):
        ``abort`` gives none back from now on."""
        self._settled = True

    def record(self, good: list[Item]) -> None:
        """The blobs' rows, in one database commit (not flushed)."""
        self._record([(i.sha256, i.size) for i in good])

    def drop(self, item: Item) -> None:
        """Remove the temp of a blob that will not be linked."""
        self._drop(item)

    def finish(self) -> list[dict[str, Any]]:
        """Commit every blob that hashed right; one answer per frame, in frame order."""
        try:
            return self._finish()
        finally:
            self._close_group()

    def close_group(self) -> None:
        """Close the batch's group sync (idempotent): after its last ``sync``."""
        self._close_group()

    def _close_group(self) -> None:
        if self._group is not None:
            self._group.close()
            self._group = None

    def _finish(self) -> list[dict[str, Any]]:
        if self._current is not None or self._head:
            raise BadRequest("the batch ended inside a blob frame")
        good = [i for i in self.items if i.error is None and i.writer is not None]
        alongside = len(good) > 1 and self._group is not None
        group = self._group if alongside and self.quota.alongside(self.store.tmp_dir) else None
        if group is None:
            self._sync([i.writer for i in good if i.writer is not None])
            _point("blob_batch_synced")
        good = self._charge(good)
        charged = sum(i.charge for i in good)
        self._settled = True
        reserved = sum(i.reserved for i in self.items)
        try:
            if group is None:
                self.quota.settle(self.run_id, reserved, charged)
            else:  # the record's temp durable with the blobs' temps, then named, then linked
                with self.quota.charging(self.run_id, reserved, charged):
                    self._sync_together([i.writer for i in good if i.writer is not None], group)
                    _point("blob_batch_synced")
        except QuotaExceeded as exc:  # charged meanwhile by another worker: none stored
            for item in good:
                if item.charge:
                    item.error = exc
                    self._drop(item)
            good, charged = [i for i in good if i.error is None], 0
        try:
            _point("blob_batch_charged")
            self._record([(i.sha256, i.size) for i in good])
        except BaseException:
            if charged:
                self.quota.refund(self.run_id, charged)
            raise
        _point("blob_batch_recorded")
        self._link(good)
        return [item.answer() for item in self.items]

    def _charge(self, good: list[Item]) -> list[Item]:
        """Set each blob's charge (none for one stored meanwhile); the blobs still good."""
        for item in good:
            if self.store.has(item.sha256):
                continue
            if item.free:  # removed meanwhile (gc): this batch stores it, and pays
                try:
                    self.quota.reserve(self.run_id, item.size)
                except QuotaExceeded as exc:
                    item.error = exc
                    self._drop(item)
                    continue
                item.free, item.reserved = False, item.size
            item.charge = item.size
        return [i for i in good if i.error is None]

    def _sync_together(self, writers: list[BlobWriter], group: GroupSync) -> None:
        """One ``syncfs`` for every temp and the quota record's (written by the caller)."""
        for writer in writers:
            writer.sync(fsync=False)
        try:
            group.sync()
        except OSError as exc:
            raise StorageError(f"cannot store blob: {exc}") from exc

    def _sync(self, writers: list[BlobWriter]) -> None:
        """fsync every temp file, a few at once: concurrent fsyncs share journal commits;
        or, where the filesystem allows (``GroupSync``), one ``syncfs`` for them all."""
        if len(writers) > 1 and self._group is not None:
            for writer in writers:
                writer.sync(fsync=False)
            try:
                self._group.sync()
            except OSError as exc:
                raise StorageError(f"cannot store blob: {exc}") from exc
            return
        _in_shares(writers, lambda writer: writer.sync())

    def _link(self, good: list[Item]) -> None:
        refund = 0
        parents: dict[str, None] = {}
        pending = list(good)
        group = self._group if len(good) > 1 else None  # one syncfs after every link
        try:
            while pending:
                item = pending[0]
                assert item.writer is not None
                _point("blob_batch_link")
                item.created = item.writer.link(synced_after=group is not None)
                item.writer = None
                pending.pop(0)
                parents[os.path.dirname(self.store.location(item.sha256))] = None
                if item.charge and not item.created:
                    refund += item.charge
        except BaseException:
            refund += sum(i.charge for i in pending)
            raise
        finally:
            try:
                try:  # each fan-out directory once, a few at once; or one syncfs
                    if group is not None:
                        group.sync()
                    else:
                        _in_shares(list(parents), lambda parent: fsync_dir(Path(parent)))
                except OSError as exc:
                    raise StorageError(f"cannot store blob: {exc}") from exc
            finally:
                for item in pending:
                    self._drop(item)
                if refund:
                    self.quota.refund(self.run_id, refund)

    def _drop(self, item: Item) -> None:
        if item.writer is not None:
            item.writer.abort()
            item.writer = None

    def abort(self) -> None:
        """Remove every temp file and give back every reservation not yet settled."""
        self._close_group()
        for item in self.items:
            self._drop(item)
        if not self._settled:
            self._settled = True
            reserved = sum(i.reserved for i in self.items)
            if reserved:
                self.quota.settle(self.run_id, reserved, 0)
