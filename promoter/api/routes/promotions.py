"""A promotion with its evidence in one request
(protocol: promotion#one-request-with-both-authorities).

``POST /v1/promotions:withEvidence`` is for a caller holding both authorities: an
orchestrator's (or the operator's) token in ``Authorization`` and the run's executor token
in ``Promoter-Executor-Token``. Both are checked before the body is read, so a caller
without both stores nothing. The body (``promoter.domain.evidence_frames``) is the
bundle's frame, then blob frames as ``POST /v1/blobs:batchUpdate`` takes them, with its
bounds (frames, bytes a blob, bytes in all) and its quota; the bundle is bounded like
``POST /v1/bundles`` (``max_document_bytes``, depth, values). The bundle is admitted
(its run and its grant's run are the executor token's) before any blob is written; a
blob the batch would refuse refuses the whole request, and nothing of it is stored.

Then the bundle is verified over the blobs in their temps, the blobs, the charge and
both documents are stored together, durable, and the promotion is requested
(``promoter.engine.operation.with_evidence``, ``promoter.store.evidence``); waiting and
the answer are ``POST /v1/promotions``'s. The same request again answers the
same operation. Parsing, hashing, writing and verification run in worker threads; the
bundle's parse and the verification each hold a document slot, never the blobs' stream.

Asked for them (``diff``, ``receipt``), the answer carries what a caller would read next:
the bundle's first diff page, built while the promotion runs, and the promotion receipt
once completed, each exactly as its own request answers it (``GET /v1/bundles/{id}/diff``,
``GET /v1/operations/{id}/receipt``); one whose reading fails (a promoter error, or the
blob store's ``OSError`` for the diff) is left out and named in ``not_carried`` with the
error's code and detail, never failing the promotion's answer
(protocol: promotion#one-request-with-both-authorities). Any other exception is a fault
of the daemon's: logged with its traceback and named ``internal``, as the separate read
answers it, the promotion's answer standing all the same.

Not here: what a promotion does (``promoter.engine.operation``), the separate requests,
which keep their meaning (``blobs``, ``bundles``, ``operations``).
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response

from promoter.api import gc_policy
from promoter.api.deps import OrchestratorDep, ServicesDep, document_slot, run_quota
from promoter.api.jsonshape import ShapeBudget
from promoter.api.openapi import Ok, operation
from promoter.api.responses import model_response
from promoter.api.routes.blobs import FEED_BYTES, record_blobs
from promoter.api.routes.bundles import SUBMIT_CODES
from promoter.api.routes.operations import ENDED, PROMOTE_CODES, WAIT_SECONDS
from promoter.api.workers import run_in_threadpool
from promoter.domain.blob_frames import BATCH_BLOB_MAX, BATCH_MAX_BLOBS, BATCH_MAX_BYTES
from promoter.domain.evidence_frames import BUNDLE_HEADER_MAX, parse_bundle_header
from promoter.domain.models import GrantV1, PatchBundleV1
from promoter.domain.parsing import load_json
from promoter.domain.status import OperationStatus
from promoter.domain.views import CarriedPart, NotCarried, OperationAccepted, PromotedWithEvidence
from promoter.engine.intake.bundles import admit_bundle
from promoter.engine.operation import receipts, runner, views
from promoter.engine.operation.with_evidence import GROUP_FAULT, promote_with_evidence
from promoter.engine.ports import Credentials, Promoting, Provenance, Records, Reviewing, Uploading
from promoter.engine.review.diff import bundle_diff
from promoter.errors import (
    BadRequest,
    Forbidden,
    PayloadTooLarge,
    PromoterError,
    StorageError,
    Unauthenticated,
)
from promoter.store.blob_batch import BlobBatch
from promoter.store.credentials import Principal

router = APIRouter(prefix="/v1")
log = logging.getLogger("promoter.operations")
_UNEXPECTED = "an unexpected error occurred; see the daemon's log"  # as problems.py answers it
EXECUTOR_HEADER = "Promoter-Executor-Token"
Admitted = tuple[Any, tuple[PatchBundleV1, GrantV1]]


async def _run_authority(services: Credentials, token: str | None) -> Principal:
    """The run whose executor token the request carries besides its own credential."""
    if token is None or not token.strip():
        raise Unauthenticated(f"this request needs the run's executor token in {EXECUTOR_HEADER}")
    found = await run_in_threadpool(services.auth.authenticate, token.strip())
    if found.role != "executor" or found.run_id is None:
        raise Forbidden(
            f"{EXECUTOR_HEADER} must be an executor token; it is an {found.role} token",
            role=found.role,
        )
    return found


def _admit(services: Provenance, raw: bytes, run_id: str) -> Admitted:
    data = load_json(raw)
    return data, admit_bundle(services, data, run_id=run_id)


class _Body:
    """The bundle's frame gathered (bounded as a document), then the blobs fed to a batch."""

    def __init__(self, services: Uploading, run_id: str) -> None:
        self.services = services
        self.run_id = run_id
        settings = services.settings
        self.document_limit = settings.max_document_bytes
        self.shape = ShapeBudget(
            max_depth=settings.max_json_depth, max_items=settings.max_json_items
        )
        self.head = bytearray()
        self.size: int | None = None
        self.bundle = bytearray()
        self.admitted: Admitted | None = None
        self.batch: BlobBatch | None = None
        self.blob_bytes = 0
        self.pending = bytearray()

    def take_bundle(self, view: memoryview) -> memoryview:
        """Consume what ``view`` holds of the bundle's frame; the rest of it."""
        if self.size is None:
            newline = bytes(view[: BUNDLE_HEADER_MAX + 1 - len(self.head)]).find(b"\n")
            if newline < 0:
                self.head += view
                if len(self.head) > BUNDLE_HEADER_MAX:
                    raise BadRequest('the body must start with the line "bundle <size>"')
                return view[len(view) :]
            self.head += view[:newline]
            size = parse_bundle_header(bytes(self.head))
            if size is None:
                raise BadRequest('the body must start with the line "bundle <size>"')
            if size > self.document_limit:
                raise PayloadTooLarge(
                    f"the bundle is larger than {self.document_limit} bytes",
                    limit=self.document_limit,
                )
            self.size = size
            view = view[newline + 1 :]
        piece = view[: self.size - len(self.bundle)]
        self.shape.feed(bytes(piece))
        self.bundle += piece
        return view[len(piece) :]

    @property
    def bundle_complete(self) -> bool:
        return self.size is not None and len(self.bundle) == self.size

    def start_blobs(self, admitted: Admitted) -> None:
        self.admitted = admitted
        self.bundle = bytearray()  # parsed: the document is held once
        self.batch = BlobBatch(
            self.services.blobs,
            run_quota(self.services),
            self.run_id,
            blob_limit=min(self.services.settings.max_blob_bytes, BATCH_BLOB_MAX),
            record=lambda blobs: record_blobs(self.services, blobs),
            group_sync_limit=self.services.settings.group_sync_limit,
            group_fault=GROUP_FAULT,  # the evidence's syncs (``promoter.store.evidence``)
        )

    def take_blobs(self, view: memoryview) -> bytes | None:
        """Count ``view`` against the batch's bound; the bytes to feed once enough gathered."""
        self.blob_bytes += len(view)
        if self.blob_bytes > BATCH_MAX_BYTES:
            raise PayloadTooLarge(
                f"the blobs of a request are at most {BATCH_MAX_BYTES} bytes",
                limit=BATCH_MAX_BYTES,
            )
        self.pending += view
        if len(self.pending) < FEED_BYTES:
            return None
        return self.rest()

    def rest(self) -> bytes:
        out = bytes(self.pending)
        self.pending.clear()
        return out

    def refuse_a_refused_blob(self) -> None:
        """A blob the batch refused (too big, over quota, bytes not its hash) refuses all."""
        assert self.batch is not None
        for item in self.batch.items:
            if item.error is not None:
                raise item.error

    def end(self) -> Admitted:
        """The bytes still gathered fed, then a refused blob refusing all: in this order,
        in the worker thread's call that stores the evidence (one hop, not two)."""
        assert self.batch is not None and self.admitted is not None
        if self.pending:
            self.batch.feed(self.rest())
        self.refuse_a_refused_blob()
        admitted, self.admitted = self.admitted, None  # the caller's alone, to free it
        return admitted

    def abort(self) -> None:
        if self.batch is not None:
            self.batch.abort()


class _Answering(Promoting, Reviewing, Records, Protocol):
    """Promotes, and reads the bundle's diff and the receipt for the answer."""


def _diff(services: Reviewing, bundle: PatchBundleV1) -> dict[str, Any] | NotCarried:
    """The stored ``bundle``'s first diff page as ``GET /v1/bundles/{id}/diff`` answers
    it, or why it cannot be built now: a promoter error (a blob missing or changed, git
    failing) or the blob store's ``OSError``; the caller asks for it by its own request."""
    bundle_id = bundle.bundle_id
    failed: PromoterError
    try:
        return dict(bundle_diff(services, bundle_id, stored=bundle))
    except OSError as exc:  # reading the blob store (the separate read fails alike)
        failed = StorageError(f"the bundle's diff could not be read: {exc.strerror or exc}")
    except PromoterError as exc:
        failed = exc
    except Exception:  # a fault of the daemon's: logged whole; the promotion's answer stands
        log.exception("the diff of %s is left out of the answer", bundle_id)
        return _unexpected("diff")
    log.warning("the diff of %s is left out of the answer: %s", bundle_id, failed.detail)
    return NotCarried(part="diff", code=failed.code, detail=failed.detail)


def _receipt(services: Records, operation_id: str) -> dict[str, Any] | NotCarried:
    """The completed promotion's receipt as ``GET /v1/operations/{id}/receipt`` serves it
    (its audit copy compared and written again as that read does), or why it cannot be
    read: a promoter error (the database unavailable or busy; a copy not written is
    served all the same)."""
    try:
        return dict(json.loads(receipts.promotion_receipt(services, operation_id)))
    except PromoterError as exc:
        log.warning("the receipt of %s is left out of the answer: %s", operation_id, exc.detail)
        return NotCarried(part="receipt", code=exc.code, detail=exc.detail)
    except Exception:  # a fault of the daemon's: logged whole; the promotion's answer stands
        log.exception("the receipt of %s is left out of the answer", operation_id)
        return _unexpected("receipt")


def _unexpected(part: CarriedPart) -> NotCarried:
    """A part whose reading met a fault of the daemon's, named as its own request answers
    that fault (``internal``): the promotion the answer reports happened all the same, and
    a failed answer would hide it from a caller that does not retry a promotion."""
    return NotCarried(part=part, code="internal", detail=_UNEXPECTED)


def _promote(
    services: _Answering, body: _Body, fence: int, wait: bool, diff: bool, receipt: bool
) -> tuple[Response, list[dict[str, Any]]]:
    data, checked = body.end()
    assert body.batch is not None
    with gc_policy.paused():  # as a submission's: the document is freed before it resumes
        promoted = promote_with_evidence(services, data, checked, body.batch, fence)
        del data
    submitted, requested = promoted.submitted, promoted.requested
    operation_id = requested.operation_id
    # built while the attempt runs in its own thread: the stored bundle, never the worktree
    shown = _diff(services, submitted.bundle) if diff else None
    missing = [shown] if isinstance(shown, NotCarried) else []
    if wait:
        runner.wait_for(services, operation_id, WAIT_SECONDS)
    view = views.operation_view(services.db, operation_id)
    existing = not requested.started  # an operation that already ended is answered as it is
    ended = (wait or existing) and view.status in ENDED
    completed = ended and view.status == OperationStatus.COMPLETED
    read = _receipt(services, operation_id) if completed and (receipt or existing) else None
    if isinstance(read, NotCarried):
        missing.append(read)
    elif read is not None and existing:  # as POST /v1/promotions answers it
        view.receipt = read
    answer = PromotedWithEvidence(
        bundle_id=submitted.bundle.bundle_id,
        bundle_sha256=submitted.bundle.bundle_sha256,
        verification_receipt=submitted.receipt,
        operation=view
        if ended
        else OperationAccepted(operation_id=operation_id, status=view.status),
        diff=None if isinstance(shown, NotCarried) else shown,
        receipt=read if isinstance(read, dict) and receipt else None,
        not_carried=missing or None,
    )
    return model_response(answer, 200 if ended else 202), promoted.blobs


@router.post(
    "/promotions:withEvidence",
    response_model=PromotedWithEvidence,
    **operation(
        "createPromotionWithEvidence",
        summary="Upload blobs, submit a bundle and promote it in one request",
        description="For a caller holding both authorities: an orchestrator (or operator) "
        f"token in `Authorization` and the run's executor token in `{EXECUTOR_HEADER}`; "
        "without both, `unauthenticated` or `forbidden` and nothing stored. The body is the "
        "line `bundle <size>` and exactly `size` bytes of the PatchBundleV1 (bounded like "
        "`POST /v1/bundles`), then blob frames as `POST /v1/blobs:batchUpdate` takes them "
        f"(at most {BATCH_MAX_BLOBS} blobs of at most {BATCH_BLOB_MAX} bytes, "
        f"{BATCH_MAX_BYTES} bytes of blob frames; bigger blobs go by `PUT` first). A bundle "
        "of another run, a malformed frame or a blob the batch would refuse refuses the "
        "whole request with that code, nothing stored. Then the blobs, the bundle and its "
        "passed verification receipt are stored, durable, and the promotion is requested "
        "under `fence`: 202 with the receipt and the operation's id; with `wait`, 200 with "
        "the receipt and the operation once it ended. The same request again answers the "
        "same operation: once it ended, 200 with it at once, as `POST /v1/promotions` "
        "answers it.",
        tags=["orchestrator"],
        roles=("orchestrator", "operator"),
        errors=sorted(
            {*SUBMIT_CODES, *PROMOTE_CODES, "bad_request", "quota_exceeded", "storage_error"}
            | {"payload_too_large"}
        ),
        body_schema={"type": "string", "format": "binary"},
        body_media_type="application/octet-stream",
        ok={
            202: Ok("stored and requested; poll the operation", PromotedWithEvidence),
            200: Ok(
                "stored and promoted; the operation after it ended (`wait`)", PromotedWithEvidence
            ),
        },
    ),
)
async def post_promotion_with_evidence(
    request: Request,
    _: OrchestratorDep,
    services: ServicesDep,
    fence: Annotated[int, Query(ge=0, le=2**53 - 1, description="the lease's fence")],
    wait: Annotated[bool, Query(description="answer only once the operation ended")] = False,
    executor_token: Annotated[
        str | None,
        Header(alias=EXECUTOR_HEADER, description="the run's executor token"),
    ] = None,
    diff: Annotated[
        bool,
        Query(
            description="the answer carries `diff`: the bundle's first diff page as "
            "`GET /v1/bundles/{id}/diff` answers it, built while the promotion runs "
            "(left out when it cannot be built, and named in `not_carried` with why)"
        ),
    ] = False,
    receipt: Annotated[
        bool,
        Query(
            description="with `wait`, once the promotion completed, the answer carries "
            "`receipt`: the promotion receipt as `GET /v1/operations/{id}/receipt` serves "
            "it (left out when it cannot be read, and named in `not_carried` with why)"
        ),
    ] = False,
) -> Response:
    run = await _run_authority(services, executor_token)
    assert run.run_id is not None
    document_limit = services.settings.max_document_bytes
    limit = BUNDLE_HEADER_MAX + 1 + document_limit + BATCH_MAX_BYTES
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        if not declared.isdigit():
            raise BadRequest("Content-Length is not a number")
        raise PayloadTooLarge(f"the body is larger than {limit} bytes", limit=limit)
    services.host.refuse_writes()  # a fenced host could never promote it
    body = _Body(services, run.run_id)
    try:
        async for chunk in request.stream():
            view = memoryview(chunk)
            if body.admitted is None:
                view = body.take_bundle(view)
                if not body.bundle_complete:
                    continue
                async with document_slot(services):
                    admitted = await run_in_threadpool(
                        _admit, services, bytes(body.bundle), run.run_id
                    )
                body.start_blobs(admitted)
                del admitted  # the body holds it until the evidence is stored
            if view:
                ready = body.take_blobs(view)
                if ready is not None:
                    assert body.batch is not None
                    await run_in_threadpool(body.batch.feed, ready)
        if body.admitted is None:
            raise BadRequest("the body ended inside the bundle's frame")
        async with document_slot(services):  # the evidence is dropped on any error in there
            answer, answers = await run_in_threadpool(
                _promote, services, body, fence, wait, diff, receipt
            )
    except BaseException:
        body.abort()  # unlinks of temps and reservations given back: safe cancelled
        raise
    request.state.blob_intake = [(int(a["status"]), int(a["bytes"] or 0)) for a in answers]
    return answer
