"""Blob upload, lookup and download (protocol: api#blob-upload, api#hostile-input).

Uploads stream into ``promoter.store.blobs`` with every write, fsync and database record
in a worker thread, never on the event loop. Each executor run's uploads are counted
against its storage quota (``promoter.store.quota``) while they stream, and again at the
charge (uploads of the run in another worker of the daemon): an upload that would pass
it is refused with ``quota_exceeded`` (507) and stores nothing. Digest queries
check the blob store in a worker thread too, so a 100 000-digest query does not stall
other clients. ``POST /v1/blobs:batchUpdate`` takes many small blobs in one framed
stream (``promoter.domain.blob_frames``) and commits them together
(``promoter.store.blob_batch``): the same quota, limits and per-blob codes.

A single upload that charges its run makes the blob's temp and the run's quota record
durable with one ``syncfs`` where ``promoter.fs.group_sync`` offers it (the group is
started before the first byte is written; fault point ``after_upload_group_sync``),
then names the record (its directory fsynced), records the blob and links it (its
directory fsynced): three flushes, not four, in the same order of names on disk.
"""

from __future__ import annotations

import os
import re

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from promoter.api.deps import (
    ExecutorDep,
    OperatorDep,
    Port,
    document_slot,
    read_json_bytes,
    run_quota,
)
from promoter.api.models import BlobsMissingRequest
from promoter.api.openapi import Ok, operation
from promoter.api.params import HexParam
from promoter.api.responses import json_response
from promoter.api.workers import run_in_threadpool
from promoter.domain.blob_frames import BATCH_BLOB_MAX, BATCH_MAX_BLOBS, BATCH_MAX_BYTES
from promoter.domain.parsing import load_json
from promoter.domain.views import BlobBatchStored, BlobStored, MissingBlobs
from promoter.engine.ports import Archive, Ledger, Uploading
from promoter.errors import BadRequest, NotFound, PayloadTooLarge, StorageError, ValidationFailed
from promoter.faults import point
from promoter.fs.group_sync import GroupSync
from promoter.store import repo
from promoter.store.blob_batch import BlobBatch
from promoter.store.blobs import BlobWriter
from promoter.store.quota import RunQuota

# bytes of a batch body gathered on the event loop before one worker-thread hop parses
# and writes them: a body arrives in pieces of a few KiB, and a hop per piece cost more
# than the writes
FEED_BYTES = 1 << 20

router = APIRouter(prefix="/v1")
_HEX = re.compile(r"^[0-9a-f]{64}$")
MAX_QUERY = 100_000


def _missing(services: Archive, raw: bytes) -> Response:
    body = load_json(raw)
    if (
        not isinstance(body, dict)
        or set(body) != {"sha256"}
        or not isinstance(body["sha256"], list)
    ):
        raise ValidationFailed('body must be {"sha256": [<64 hex>, ...]}')
    digests = body["sha256"]
    if len(digests) > MAX_QUERY:
        raise PayloadTooLarge(f"at most {MAX_QUERY} digests per request", limit=MAX_QUERY)
    if not all(isinstance(d, str) and _HEX.match(d) for d in digests):
        raise ValidationFailed("every sha256 must be 64 lowercase hex characters")
    return json_response(
        {"missing": [d for d in dict.fromkeys(digests) if not services.blobs.has(d)]}
    )


@router.post(
    "/blobs:missing",
    response_model=MissingBlobs,
    **operation(
        "findMissingBlobs",
        summary="Ask which blobs are not stored yet",
        description=f"At most {MAX_QUERY} digests per request (more: `payload_too_large`); "
        "the answer lists the missing ones once each, in the order asked.",
        tags=["executor"],
        roles=["executor"],
        body=BlobsMissingRequest,
        body_example={"sha256": ["9f86d081" + "0" * 56]},
        ok={200: Ok("the digests not stored", MissingBlobs, {"missing": ["9f86d081" + "0" * 56]})},
    ),
)
async def blobs_missing(request: Request, _: ExecutorDep, services: Port[Uploading]) -> Response:
    raw = await read_json_bytes(request, services)
    async with document_slot(services):
        return await run_in_threadpool(_missing, services, raw)


class _Upload:
    """One blob upload: quota reserved as bytes arrive, charged once, or given back.

    Every method but ``abort`` runs in a worker thread (they read and write files).
    """

    def __init__(self, services: Uploading, run_id: str, sha256: str) -> None:
        self.services = services
        self.quota: RunQuota = run_quota(services)
        self.run_id = run_id
        self.sha256 = sha256
        self.reserved = 0
        self.settled = False
        self.writer: BlobWriter | None = None
        self.free = False  # the blob is already stored: uploading it again costs nothing
        self.group: GroupSync | None = None  # the temp and the quota record, one syncfs

    def reserve_up_to(self, size: int) -> None:
        if size > self.reserved and not self.free:
            self.quota.reserve(self.run_id, size - self.reserved)
            self.reserved = size

    def open(self, limit: int, declared: int) -> None:
        self.services.host.refuse_writes()  # a fenced host could never promote it
        self.free = self.services.blobs.has(self.sha256)
        self.reserve_up_to(declared)
        self.writer = self.services.blobs.writer(self.sha256, limit)
        pending = self.services.settings.group_sync_limit
        if not self.free and pending is not None:  # before the first byte is written
            tmp = os.fspath(self.services.blobs.tmp_dir)  # the temp's, made by the writer
            self.group = GroupSync.start_at(tmp, pending, "after_upload_group_sync")

    def _grouped(self, charge: int) -> GroupSync | None:
        """The group sync for this commit: a charge to write, and the quota records on the
        filesystem of the blob's temp (else None: an fsync each)."""
        if not charge or self.group is None:
            return None
        return self.group if self.quota.alongside(self.services.blobs.tmp_dir) else None

    def _charge_together(self, group: GroupSync, charge: int) -> None:
        """Charge the run with the blob's temp and the quota record durable in one
        ``syncfs``, the record then named and its directory fsynced (``RunQuota.charging``);
        any failure takes the charge back and drops the temp."""
        assert self.writer is not None
        with self.quota.charging(self.run_id, self.reserved, charge):
            try:
                point("blob_commit")  # as ``BlobWriter.commit``'s, before the temp is durable
            except OSError as exc:
                self.writer.abort()
                raise StorageError(f"cannot store blob: {exc}") from exc
            self.writer.sync(fsync=False)
            try:
                group.sync()
            except OSError as exc:
                self.writer.abort()
                raise StorageError(f"cannot store blob: {exc}") from exc

    def write(self, chunk: bytes) -> None:
        assert self.writer is not None
        self.reserve_up_to(self.writer.size + len(chunk))
        self.writer.write(chunk)

    def commit(self) -> tuple[bool, int]:
        """Check the hash, charge the run, record the blob, link it in; (created, size).

        The database record comes before the blob appears, so a write locked out of the
        database (``database_busy``) or a full disk stores no blob at all.
        """
        assert self.writer is not None
        self.writer.check()
        size = self.writer.size
        present = self.services.blobs.has(self.sha256)
        if not present:
            self.free = False  # removed meanwhile (gc): this upload stores it, and pays
            self.reserve_up_to(size)
        charge = 0 if present else size
        group = self._grouped(charge)  # may refuse: ``abort`` then gives the bytes back
        self.settled = True
        if group is None:
            self.quota.settle(self.run_id, self.reserved, charge)
        else:
            self._charge_together(group, charge)  # the temp durable, the charge named
        try:
            # not flushed: the blob's own bytes and name are; a row lost with a power
            # failure only leaves a blob without its row, which nothing relies on
            with self.services.db.session(durable=False) as session:
                repo.record_blob(session, self.sha256, size)
            created = self.writer.commit() if group is None else self.writer.place()
        except BaseException:
            if charge:
                self.quota.refund(self.run_id, charge)
            raise
        if charge and not created:
            self.quota.refund(self.run_id, charge)
        return created, size

    def close(self) -> None:
        """Close the group's descriptor (after a commit, or with ``abort``)."""
        if self.group is not None:
            self.group.close()

    def abort(self) -> None:
        self.close()
        if self.writer is not None:
            self.writer.abort()
        if not self.settled:
            self.settled = True
            self.quota.settle(self.run_id, self.reserved, 0)


@router.put(
    "/blobs/sha256/{sha256}",
    response_model=BlobStored,
    **operation(
        "putBlob",
        summary="Upload a blob",
        description="The raw bytes, streamed, hashed and size-limited (`max_blob_bytes`); "
        "bytes that do not hash to the named sha256 are `blob_hash_mismatch`. New bytes count "
        "against the run's storage quota (`quota_exceeded`); a stored blob again is free.",
        tags=["executor"],
        roles=["executor"],
        errors=["blob_hash_mismatch", "quota_exceeded", "database_busy", "payload_too_large"],
        body_schema={"type": "string", "format": "binary"},
        body_media_type="application/octet-stream",
        body_required=False,
        ok={
            201: Ok(
                "stored now",
                BlobStored,
                {"sha256": "9f86d081" + "0" * 56, "bytes": 1, "created": True},
            ),
            200: Ok("already stored", BlobStored),
        },
    ),
)
async def put_blob(
    sha256: HexParam, request: Request, principal: ExecutorDep, services: Port[Uploading]
) -> Response:
    limit = services.settings.max_blob_bytes
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        if not declared.isdigit():
            raise BadRequest("Content-Length is not a number")
        raise PayloadTooLarge(f"blob is larger than {limit} bytes", limit=limit)
    assert principal.run_id is not None  # an executor token is bound to one run
    upload = _Upload(services, principal.run_id, sha256)
    try:
        await run_in_threadpool(upload.open, limit, int(declared or 0))
        async for chunk in request.stream():
            await run_in_threadpool(upload.write, chunk)
        created, size = await run_in_threadpool(upload.commit)
    except BaseException:
        upload.abort()  # close + unlink of the temp file: also safe while cancelled
        raise
    upload.close()
    return json_response(
        {"sha256": sha256, "bytes": size, "created": created}, 201 if created else 200
    )


def record_blobs(services: Ledger, blobs: list[tuple[str, int]]) -> None:
    """Every blob of a batch in one database commit, not flushed (as one blob's row)."""
    with services.db.session(durable=False) as session:
        repo.record_blobs(session, blobs)


@router.post(
    "/blobs:batchUpdate",
    response_model=BlobBatchStored,
    **operation(
        "batchUpdateBlobs",
        summary="Upload many small blobs at once",
        description="A stream of frames, each the line `<sha256> <size>` and then exactly "
        f"`size` bytes; at most {BATCH_MAX_BLOBS} blobs of at most {BATCH_BLOB_MAX} bytes "
        f"each (and `max_blob_bytes`), {BATCH_MAX_BYTES} bytes in all. Each blob is hashed "
        "and sized while it streams and answered as a single upload would be, in frame "
        "order: `status` 201 stored now, 200 already stored, or the `code` that refused it "
        "(`payload_too_large`, `quota_exceeded`, `blob_hash_mismatch`), which stores "
        "nothing of that blob. The blobs that hashed right are committed together (one "
        "database commit, one fsync per directory). A malformed or truncated frame "
        "(`bad_request`) or a storage error refuses the whole batch.",
        tags=["executor"],
        roles=["executor"],
        errors=["database_busy", "payload_too_large", "storage_error", "bad_request"],
        body_schema={"type": "string", "format": "binary"},
        body_media_type="application/octet-stream",
        body_required=False,
        ok={
            200: Ok(
                "one answer per blob",
                BlobBatchStored,
                {
                    "responses": [
                        {
                            "sha256": "9f86d081" + "0" * 56,
                            "bytes": 1,
                            "created": True,
                            "status": 201,
                            "code": None,
                            "detail": None,
                        }
                    ]
                },
            )
        },
    ),
)
async def batch_update_blobs(
    request: Request, principal: ExecutorDep, services: Port[Uploading]
) -> Response:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > BATCH_MAX_BYTES):
        if not declared.isdigit():
            raise BadRequest("Content-Length is not a number")
        raise PayloadTooLarge(f"a batch is at most {BATCH_MAX_BYTES} bytes", limit=BATCH_MAX_BYTES)
    assert principal.run_id is not None  # an executor token is bound to one run
    services.host.refuse_writes()  # a fenced host could never promote them
    batch = BlobBatch(
        services.blobs,
        run_quota(services),
        principal.run_id,
        blob_limit=min(services.settings.max_blob_bytes, BATCH_BLOB_MAX),
        record=lambda blobs: record_blobs(services, blobs),
        group_sync_limit=services.settings.group_sync_limit,
    )
    received = 0
    pending = bytearray()  # chunks as they arrive, handed to the worker FEED_BYTES at a time
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > BATCH_MAX_BYTES:
                raise PayloadTooLarge(
                    f"a batch is at most {BATCH_MAX_BYTES} bytes", limit=BATCH_MAX_BYTES
                )
            pending += chunk
            if len(pending) >= FEED_BYTES:
                await run_in_threadpool(batch.feed, bytes(pending))
                pending.clear()
        if pending:
            await run_in_threadpool(batch.feed, bytes(pending))
        answers = await run_in_threadpool(batch.finish)
    except BaseException:
        batch.abort()  # unlinks of temp files and reservations given back: safe cancelled
        raise
    # what the metrics count as blob intake: each blob's bytes under its own status
    request.state.blob_intake = [(int(a["status"]), int(a["bytes"] or 0)) for a in answers]
    return json_response({"responses": answers})


@router.get(
    "/blobs/sha256/{sha256}",
    response_class=StreamingResponse,
    **operation(
        "getBlob",
        summary="Download a blob",
        description="The stored bytes of a blob.",
        tags=["operator"],
        roles=["operator"],
        errors=["not_found"],
        ok={
            200: Ok(
                "the bytes",
                {"type": "string", "format": "binary"},
                media_type="application/octet-stream",
            )
        },
    ),
)
def get_blob(sha256: HexParam, _: OperatorDep, services: Port[Archive]) -> Response:
    if not services.blobs.has(sha256):
        raise NotFound(f"blob {sha256} is not stored", sha256=sha256)
    return StreamingResponse(
        services.blobs.iter_chunks(sha256), media_type="application/octet-stream"
    )
