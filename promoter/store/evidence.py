"""One request's evidence stored at once: its blobs, its run's charge, its two documents
(protocol: storage#evidence-of-one-request).

``Evidence`` takes a ``BlobBatch`` whose blobs are written to temps and hashed, and stores
them with the bundle and its verification receipt, in the order of
protocol: storage#durable-order with the fewest flushes: every temp (the blobs', the quota
record's, the documents') written, then one ``syncfs``; the quota record renamed and
``quota/`` fsynced (the charge named and durable before any blob is linked); the blobs
recorded in the database; every blob and document linked, never over a file; one
``syncfs``. Where ``promoter.fs.group_sync`` offers no group, every temp and every
directory keeps an fsync of its own, in the same order (the record's temp, fsynced,
renamed and its folder fsynced by ``RunQuota.settle`` after the other temps). ``stage``
answers for the staged blobs before they are linked (``StagedBlobs``), so the bundle is
verified, and its receipt written, before anything is named.

A failure before the names (a temp's write, the first ``syncfs``, the record's rename)
stores nothing named and gives the charge back; a failed link gives back the charges of
the blobs not linked; a failed last sync is a ``StorageError`` with the names left in
place (complete, their bytes durable, the charge kept). Fault points (besides the
writers' own: ``quota_after_*``, ``audit_<kind>_after_*``): ``evidence_temps_written``,
``after_evidence_group_sync`` (each ``syncfs``), ``evidence_synced``, ``evidence_linked``
(after each link: blobs, then the bundle, then the receipt), ``evidence_names_synced``.

Not here: verification and which documents (``promoter.engine.operation.with_evidence``),
the frames (``promoter.store.blob_batch``), HTTP.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from promoter.errors import PromoterError, StorageError
from promoter.faults import point
from promoter.fs.group_sync import GroupSync
from promoter.store.audit import AuditStore
from promoter.store.blob_batch import BlobBatch, Item
from promoter.store.blobs import BlobStore, BlobWriter
from promoter.store.durable import StagedNew, fsync_dir, make_dirs

GROUP_FAULT = "after_evidence_group_sync"
Document = tuple[str, str, bytes, type[PromoterError]]  # kind, name, bytes, its conflict


@contextmanager
def _storing(what: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise StorageError(f"cannot store {what}: {exc}") from exc


class StagedBlobs:
    """The blob store as a verification reads it (``BlobSizes``), with the staged blobs in
    it: each already hashed to its name while it streamed, read back from its temp."""

    def __init__(self, store: BlobStore, staged: dict[str, BlobWriter]) -> None:
        self._store = store
        self._staged = staged

    def measure_all(self, digests: Sequence[str]) -> list[int | None]:
        others = [d for d in digests if d not in self._staged]
        sizes = dict(zip(others, self._store.measure_all(others), strict=True))
        return [self._staged[d].size if d in self._staged else sizes[d] for d in digests]

    def read(self, sha256: str) -> bytes:
        writer = self._staged.get(sha256)
        return self._store.read(sha256) if writer is None else writer.read_back()


class Evidence:
    """The evidence of one request in progress: ``stage``, then ``store`` or ``abort``.

    Every method but ``abort`` does file I/O: call them in a worker thread.
    """

    def __init__(self, batch: BlobBatch, audit: AuditStore) -> None:
        self.batch = batch
        self.audit = audit
        self._blobs: list[Item] = []
        self._documents: list[StagedNew] = []

    def stage(self) -> StagedBlobs:
        """End the batch's frames and work out its charge; the blobs as they will be."""
        self._blobs = self.batch.stage()
        staged = {i.sha256: i.writer for i in self._blobs if i.writer is not None}
        return StagedBlobs(self.batch.store, staged)

    def answers(self) -> list[dict[str, Any]]:
        """One answer per blob frame, as ``POST /v1/blobs:batchUpdate`` gives them."""
        return [item.answer() for item in self.batch.items]

    def store(self, documents: Sequence[Document]) -> list[bool]:
        """Store the staged blobs and ``documents``; per document, whether it is new.

        A document that differs from one already stored raises its conflict before
        anything is written (and, stored meanwhile by another writer, after the names).
        """
        for kind, name, data, conflict in documents:
            stored = self.audit.get(kind, name)
            if stored is not None and stored != data:
                raise conflict(f"a different {kind} is already stored as {name}", name=name)
        paths = [self.audit.path(kind, name) for kind, name, _, _ in documents]
        try:
            with _storing("the documents"):
                for path, (kind, _, _, _) in zip(paths, documents, strict=True):
                    make_dirs(path.parent, fault=f"audit_{kind}")
                group = self._group(paths)
            self._temps(documents, paths, group)
            self._record()
            created = self._names(documents, group)
        finally:
            self._close_documents()
            self.batch.close_group()
        for (kind, name, data, conflict), new, path in zip(documents, created, paths, strict=True):
            if not new and path.read_bytes() != data:
                raise conflict(f"a different {kind} is already stored as {name}", name=name)
        return created

    def _group(self, paths: list[Path]) -> GroupSync | None:
        """The batch's group sync where the record and the documents share its filesystem."""
        group = self.batch.group
        if group is None or not self.batch.quota.alongside(self.batch.store.tmp_dir):
            return None
        device = os.stat(self.batch.store.tmp_dir).st_dev
        if any(os.stat(path.parent).st_dev != device for path in paths):
            return None
        return group

    def _temps(
        self, documents: Sequence[Document], paths: list[Path], group: GroupSync | None
    ) -> None:
        """Every temp durable, then the charge named and durable."""
        batch = self.batch
        writers = [i.writer for i in self._blobs if i.writer is not None]
        charged = sum(i.charge for i in self._blobs)
        reserved = batch.reserved
        if group is None:  # an fsync each, then the record as ``settle`` writes it
            for writer in writers:
                writer.sync()
            self._write_documents(documents, paths, sync=True)
            point("evidence_temps_written")
            point("evidence_synced")
            batch.settled()
            batch.quota.settle(batch.run_id, reserved, charged)
            return
        batch.settled()  # ``charging`` ends the reservations as it starts
        with batch.quota.charging(batch.run_id, reserved, charged):  # the record's temp
            for writer in writers:
                writer.sync(fsync=False)
            self._write_documents(documents, paths, sync=False)
            point("evidence_temps_written")
            with _storing("the evidence"):
                group.sync()
            point("evidence_synced")
        # named, and quota/ fsynced, on leaving ``charging``

    def _write_documents(
        self, documents: Sequence[Document], paths: list[Path], *, sync: bool
    ) -> None:
        for path, (kind, _, data, _) in zip(paths, documents, strict=True):
            with _storing(f"{kind} {path.stem}"):
                self._documents.append(StagedNew(path, data, fault=f"audit_{kind}", sync=sync))

    def _record(self) -> None:
        """The blobs' rows before their names; a failure gives the charge back."""
        charged = sum(i.charge for i in self._blobs)
        try:
            self.batch.record(self._blobs)
        except BaseException:
            if charged:
                self.batch.quota.refund(self.batch.run_id, charged)
            raise

    def _names(self, documents: Sequence[Document], group: GroupSync | None) -> list[bool]:
        """Link every blob, then every document; then their names made durable."""
        batch = self.batch
        refund = 0
        folders: dict[str, None] = {}
        pending = list(self._blobs)
        try:
            while pending:
                item = pending[0]
                assert item.writer is not None
                item.created = item.writer.link(synced_after=group is not None)
                item.writer = None
                pending.pop(0)
                point("evidence_linked")
                folders[os.path.dirname(batch.store.location(item.sha256))] = None
                if item.charge and not item.created:
                    refund += item.charge  # stored meanwhile by another request: not ours
        except BaseException:
            refund += sum(i.charge for i in pending)
            for item in pending:
                batch.drop(item)
            raise
        finally:
            if refund:
                batch.quota.refund(batch.run_id, refund)
        created: list[bool] = []
        for staged, (kind, name, _, _) in zip(self._documents, documents, strict=True):
            with _storing(f"{kind} {name}"):
                created.append(staged.link())
            point("evidence_linked")
        with _storing("the evidence"):
            if group is not None:
                group.sync()
            else:
                for folder in folders:
                    fsync_dir(Path(folder))
                for staged in self._documents:
                    staged.sync_dir()
        point("evidence_names_synced")
        return created

    def _close_documents(self) -> None:
        documents, self._documents = self._documents, []
        for staged in documents:
            staged.close()

    def abort(self) -> None:
        """Remove every temp not linked and give back every reservation not yet ended."""
        self._close_documents()
        self.batch.abort()
