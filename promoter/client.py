"""A typed HTTP client for the promoter daemon (SPEC §7); the CLI and executors use it.

This module owns the wire side of every endpoint: one method per endpoint, the bearer
token, streaming blob uploads, and the translation of answers. A problem+json answer is
raised as the promoter error class named by its ``code`` (``error_class(code)``), with
the problem's other members as the error's context, so callers catch the same
``PromoterError`` subclasses the engine raises. A server that cannot be reached is a
``ConfigError`` naming the URL.

Idempotent calls (every GET and PUT, and the POSTs the server deduplicates: grants,
bundles, blobs:missing, promotions) are retried with exponential backoff (``Backoff``,
whose ``sleep`` a test may replace) on connection errors and on 503; a body streamed
from an iterable is never retried. The older methods return the server's answers as
plain dicts (the CLI reads them), or as wire models where SPEC §3 defines the document;
``operation``, ``events`` and ``watch`` answer the API's response models, and
``AsyncPromoterClient`` (httpx's async client) answers them for the whole orchestrator
flow. It deliberately holds no policy: it does not build or check documents.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from promoter.api.models import (
    BlobStored,
    BundleSubmitted,
    EventFeed,
    ExecutorToken,
    FeedEvent,
    GrantRegistered,
    LeaseSet,
    MissingBlobs,
    OperationAccepted,
    OperationView,
)
from promoter.domain.blob_frames import (
    BATCH_BLOB_MAX,
    BATCH_MAX_BLOBS,
    BATCH_MAX_BYTES,
    frame_bytes,
    frame_header,
)
from promoter.domain.models import (
    DsseEnvelope,
    FileState,
    GrantV1,
    LeaseV1,
    PatchBundleV1,
    PatchVerificationReceiptV1,
)
from promoter.errors import BadRequest, ConfigError, PromoterError, error_class

__all__ = ["MISSING_BATCH", "AsyncPromoterClient", "Backoff", "PromoterClient", "file_chunks"]

MISSING_BATCH = 10_000  # digests per blobs:missing request (the server takes 100,000)
CHUNK = 1 << 20
_PROBLEM_MEMBERS = ("type", "title", "status", "detail", "code")
IDEMPOTENT_METHODS = ("GET", "HEAD", "PUT", "DELETE")
WATCH_WAIT = 30.0  # seconds one long-poll of ``watch`` waits
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Backoff:
    """Retries of idempotent calls: ``attempts`` in all, delays doubling from ``first``."""

    attempts: int = 4
    first: float = 0.25
    cap: float = 8.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    async_sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)

    def delays(self) -> Iterator[float]:
        """The delay before each retry (``attempts - 1`` of them)."""
        for retry in range(max(self.attempts, 1) - 1):
            yield min(self.first * (2**retry), self.cap)


DEFAULT_BACKOFF = Backoff()
NO_RETRY = Backoff(attempts=1)

Json = dict[str, Any]
BlobSource = bytes | Path | Iterable[bytes]


def file_chunks(path: Path, chunk_size: int = CHUNK) -> Iterator[bytes]:
    """The bytes of a file in chunks, without holding it whole."""
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_size):
            yield chunk


def _raise_for(response: httpx.Response) -> None:
    """Raise the promoter error an unsuccessful answer stands for."""
    if response.is_success:
        return
    media = response.headers.get("content-type", "").split(";")[0].strip()
    problem: Any = None
    if media in ("application/problem+json", "application/json"):
        try:
            problem = json.loads(response.content)
        except ValueError:
            problem = None
    if isinstance(problem, dict) and isinstance(problem.get("code"), str):
        cls = error_class(problem["code"])
        detail = str(problem.get("detail") or problem.get("title") or "")
        context = {k: v for k, v in problem.items() if k not in _PROBLEM_MEMBERS}
        if cls is PromoterError:
            context.update(server_code=problem["code"], http_status=response.status_code)
        try:
            error = cls(detail, **context)
        except TypeError:  # a class with a narrower constructor: keep code and detail
            error = cls(detail)
        raise error
    snippet = response.text[:200].strip()
    raise PromoterError(
        f"{response.request.method} {response.request.url.path} answered "
        f"{response.status_code} without a problem document: {snippet}",
        http_status=response.status_code,
    )


@functools.cache
def _verifying_tls() -> ssl.SSLContext:
    """httpx's default verifying context (certifi's bundle, or ``SSL_CERT_FILE``/``_DIR``),
    made once per process: loading the bundle takes about 50 ms of CPU."""
    return httpx.create_ssl_context()


def tls_context(url: str) -> ssl.SSLContext:
    """The TLS context a client of ``url`` is given.

    An ``https`` daemon gets the verifying context, shared by every client of the
    process. A plain ``http`` one (the loopback default) gets a context that trusts no
    certificate at all: no TLS is spoken to it, and were it ever (redirects are not
    followed), every handshake would fail. Either way no client loads the CA bundle for
    itself, which every CLI command and both clients of an orchestrator's flow paid.
    """
    if url.lower().startswith("https:"):
        return _verifying_tls()
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, with no trust anchors


class PromoterClient:
    """One connection pool to one daemon, with one bearer token (or none)."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._transport = transport
        self._backoff = backoff
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            verify=tls_context(self.url),
        )

    def with_token(self, token: str | None) -> PromoterClient:
        """A second client for the same server with another token (e.g. an executor's)."""
        return PromoterClient(
            self.url, token, timeout=self._timeout, transport=self._transport, backoff=self._backoff
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PromoterClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- transport ------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | Iterable[bytes] | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        ok_statuses: tuple[int, ...] = (),
        idempotent: bool | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        delays = _retry_delays(self._backoff, method, content, idempotent, ok_statuses)
        while True:
            try:
                response = self._http.request(
                    method,
                    path,
                    json=json_body,
                    content=content,
                    params=params,
                    headers=headers,
                    timeout=timeout or self._timeout,
                )
            except httpx.TransportError as exc:
                delay = next(delays, None)
                if delay is None or isinstance(exc, httpx.TimeoutException):
                    limit = timeout or self._timeout
                    raise _unreachable(self.url, method, path, limit, exc) from exc
                self._backoff.sleep(delay)
                continue
            if response.status_code == 503 and 503 not in ok_statuses:
                delay = next(delays, None)
                if delay is not None:
                    self._backoff.sleep(delay)
                    continue
            if response.status_code not in ok_statuses:
                _raise_for(response)
            return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Json:
        response = self._send(method, path, **kwargs)
        try:
            body = response.json()
        except ValueError as exc:
            raise PromoterError(f"{method} {path} answered with a body that is not JSON") from exc
        if not isinstance(body, dict):
            raise PromoterError(f"{method} {path} answered with JSON that is not an object")
        return body

    # --- health ---------------------------------------------------------------------------

    def healthz(self) -> Json:
        return self._json("GET", "/healthz")

    def readyz(self) -> Json:
        """Readiness; a 503 ``not_ready`` answer is returned, not raised."""
        return self._json("GET", "/readyz", ok_statuses=(503,))

    def keys(self) -> Json:
        return self._json("GET", "/v1/keys")

    # --- orchestrator: repositories, tokens, grants, leases -------------------------------

    def repositories(self) -> list[Json]:
        return list(self._json("GET", "/v1/repositories")["repositories"])

    def mint_executor_token(self, executor_run_id: str, ttl_seconds: int = 3600) -> Json:
        """``{token, executor_run_id, expires_at}`` for a new executor token."""
        body = {"executor_run_id": executor_run_id, "ttl_seconds": ttl_seconds}
        return self._json("POST", "/v1/executor-tokens", json_body=body)

    def register_grant(self, grant: GrantV1 | Mapping[str, Any]) -> Json:
        """``{grant_id, grant_sha256, created}``; registering identical bytes again is a no-op."""
        document = grant.wire() if isinstance(grant, GrantV1) else dict(grant)
        response = self._send("POST", "/v1/grants", json_body=document, idempotent=True)
        return {**response.json(), "created": response.status_code == 201}

    def get_grant(self, grant_id: str) -> GrantV1:
        response = self._send("GET", f"/v1/grants/{_segment(grant_id)}")
        return GrantV1.model_validate_json(response.content)

    def grant_base(self, grant_id: str) -> dict[str, FileState]:
        """A chained grant's base: per path the state its base operations left."""
        answer = self._json("GET", f"/v1/grants/{_segment(grant_id)}/base")
        return {
            str(item["path"]): FileState.model_validate(item["state"]) for item in answer["states"]
        }

    def set_lease(self, workflow_id: str, stage: str, lease: LeaseV1 | Mapping[str, Any]) -> Json:
        document = lease.wire() if isinstance(lease, LeaseV1) else dict(lease)
        path = f"/v1/leases/{_segment(workflow_id)}/{_segment(stage)}"
        return self._json("PUT", path, json_body=document)

    # --- blobs ----------------------------------------------------------------------------

    def blobs_missing(self, digests: Iterable[str]) -> list[str]:
        """Which of ``digests`` the blob store does not hold (asked in batches)."""
        wanted = list(dict.fromkeys(digests))
        missing: list[str] = []
        for start in range(0, len(wanted), MISSING_BATCH):
            batch = wanted[start : start + MISSING_BATCH]
            answer = self._json(
                "POST", "/v1/blobs:missing", json_body={"sha256": batch}, idempotent=True
            )
            missing.extend(answer["missing"])
        return missing

    def put_blob(self, sha256: str, source: BlobSource, *, size: int | None = None) -> Json:
        """Upload one blob, streamed from bytes, a file path or an iterable of chunks.

        ``{sha256, bytes, created}``; the server hashes while it stores and keeps nothing
        when the bytes do not hash to ``sha256``.
        """
        content: bytes | Iterable[bytes]
        if isinstance(source, bytes):
            content, size = source, len(source)
        elif isinstance(source, Path):
            size = source.stat().st_size if size is None else size
            content = file_chunks(source)
        else:
            content = source
        headers = {"Content-Type": "application/octet-stream"}
        if size is not None:
            headers["Content-Length"] = str(size)
        path = f"/v1/blobs/sha256/{_segment(sha256)}"
        return self._json("PUT", path, content=content, headers=headers)

    def put_blobs(self, blobs: Iterable[tuple[str, int, BlobSource]]) -> list[Json]:
        """Upload ``(sha256, size, source)`` blobs: small ones batched, big ones streamed.

        Blobs of at most ``BATCH_BLOB_MAX`` bytes go in ``POST /v1/blobs:batchUpdate``
        requests (as many per request as its limits allow, each body streamed); bigger
        ones through ``put_blob``. One ``{sha256, bytes, created}`` per blob, in order;
        the first blob the server refused is raised as its code's error, after every
        batch before it was stored.
        """
        answers: dict[int, Json] = {}
        batch: list[tuple[str, int, BlobSource]] = []
        places: list[int] = []
        batch_bytes = 0

        def send() -> None:
            answers.update(zip(places, self._post_batch(batch, batch_bytes), strict=True))

        for index, (sha256, size, source) in enumerate(blobs):
            if size > BATCH_BLOB_MAX:
                answers[index] = self.put_blob(sha256, source, size=size)
                continue
            added = frame_bytes(sha256, size)
            if batch and (len(batch) >= BATCH_MAX_BLOBS or batch_bytes + added > BATCH_MAX_BYTES):
                send()
                batch, places, batch_bytes = [], [], 0
            batch.append((sha256, size, source))
            places.append(index)
            batch_bytes += added
        if batch:
            send()
        return [answers[index] for index in sorted(answers)]

    def _post_batch(self, batch: list[tuple[str, int, BlobSource]], length: int) -> list[Json]:
        def pieces() -> Iterator[bytes]:
            for sha256, size, source in batch:
                yield frame_header(sha256, size)
                if isinstance(source, bytes):
                    yield source
                elif isinstance(source, Path):
                    yield from file_chunks(source)
                else:
                    yield from source

        def frames() -> Iterator[bytes]:  # pieces joined: one send per CHUNK, not per piece
            pending = bytearray()
            for piece in pieces():
                pending += piece
                if len(pending) >= CHUNK:
                    yield bytes(pending)
                    pending.clear()
            if pending:
                yield bytes(pending)

        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(length)}
        answer = self._json("POST", "/v1/blobs:batchUpdate", content=frames(), headers=headers)
        out: list[Json] = []
        for item in answer["responses"]:
            if item.get("code"):
                raise error_class(item["code"])(str(item.get("detail") or ""))
            out.append({k: item[k] for k in ("sha256", "bytes", "created")})
        return out

    def get_blob(self, sha256: str) -> bytes:
        return self._send("GET", f"/v1/blobs/sha256/{_segment(sha256)}").content

    # --- bundles --------------------------------------------------------------------------

    def submit_bundle(self, bundle: PatchBundleV1 | Mapping[str, Any]) -> Json:
        """``{bundle_id, bundle_sha256, verification_receipt}`` of a passed verification.

        A failed verification is raised as the code of its first failed check, with the
        failed receipt in the error's ``verification_receipt`` context member.
        """
        document = bundle.wire() if isinstance(bundle, PatchBundleV1) else dict(bundle)
        return self._json("POST", "/v1/bundles", json_body=document, idempotent=True)

    def get_bundle(self, bundle_id: str) -> PatchBundleV1:
        response = self._send("GET", f"/v1/bundles/{_segment(bundle_id)}")
        return PatchBundleV1.model_validate_json(response.content)

    def get_verification(self, bundle_id: str) -> PatchVerificationReceiptV1:
        response = self._send("GET", f"/v1/bundles/{_segment(bundle_id)}/verification")
        return PatchVerificationReceiptV1.model_validate_json(response.content)

    def bundle_diff(self, bundle_id: str, max_bytes: int | None = None) -> Json:
        """``{bundle_id, files, unified_diff, truncated, limit}`` (orchestrator/operator)."""
        params = None if max_bytes is None else {"max_bytes": str(max_bytes)}
        return self._json("GET", f"/v1/bundles/{_segment(bundle_id)}/diff", params=params)

    def bundle_operations(self, bundle_id: str) -> list[Json]:
        """The promotions of a bundle with their status (its own executor may ask)."""
        answer = self._json("GET", f"/v1/bundles/{_segment(bundle_id)}/operations")
        return list(answer["operations"])

    def preflight(self, bundle_id: str, fence: int | None = None) -> Json:
        body = None if fence is None else {"fence": fence}
        return self._json("POST", f"/v1/bundles/{_segment(bundle_id)}/preflight", json_body=body)

    # --- promotions and operations --------------------------------------------------------

    def promote(
        self, bundle_id: str, receipt_sha256: str, fence: int, *, wait: bool = False
    ) -> Json:
        """``{operation_id, status}`` (202), or the operation's final view when waited on."""
        body = {
            "bundle_id": bundle_id,
            "verification_receipt_sha256": receipt_sha256,
            "fence": fence,
            "wait": wait,
        }
        return self._json("POST", "/v1/promotions", json_body=body, idempotent=True)

    def operation(
        self, operation_id: str, *, wait: float | None = None, status: str | None = None
    ) -> OperationView:
        """The operation; with ``wait``, once its status differs from ``status`` (or now)."""
        params = _wait_params(wait, status)
        path = f"/v1/operations/{_segment(operation_id)}"
        response = self._send("GET", path, params=params, timeout=self._long(wait))
        return OperationView.model_validate_json(response.content)

    def events(
        self,
        after: str | None = None,
        *,
        wait: float | None = None,
        repository: str | None = None,
        status: str | None = None,
    ) -> EventFeed:
        """One page of the watch feed after the cursor ``after``."""
        params = _feed_params(after, wait, repository, status)
        response = self._send("GET", "/v1/events", params=params, timeout=self._long(wait))
        return EventFeed.model_validate_json(response.content)

    def watch(
        self,
        after: str | None = None,
        *,
        repository: str | None = None,
        status: str | None = None,
        wait: float = WATCH_WAIT,
    ) -> Iterator[FeedEvent]:
        """Every feed entry after ``after``, long-polling for more; never ends by itself.

        Each entry carries its ``cursor``: save the last one handled to resume there,
        also after a restart of either side.
        """
        while True:
            page = self.events(after, wait=wait, repository=repository, status=status)
            yield from page.events
            after = page.cursor

    def _long(self, wait: float | None) -> float:
        return self._timeout + (wait or 0.0)

    def get_operation(self, operation_id: str, *, current: bool = False) -> Json:
        params = {"current": "true"} if current else None
        return self._json("GET", f"/v1/operations/{_segment(operation_id)}", params=params)

    def list_operations(
        self, status: str | None = None, repository: str | None = None
    ) -> list[Json]:
        params = {k: v for k, v in (("status", status), ("repository", repository)) if v}
        return list(self._json("GET", "/v1/operations", params=params)["operations"])

    def get_receipt(self, operation_id: str) -> bytes:
        """The promotion receipt's exact stored canonical bytes."""
        return self._send("GET", f"/v1/operations/{_segment(operation_id)}/receipt").content

    def receipt_dsse(self, operation_id: str) -> DsseEnvelope:
        path = f"/v1/operations/{_segment(operation_id)}/receipt.dsse"
        return DsseEnvelope.model_validate_json(self._send("GET", path).content)

    def rollback_receipt_dsse(self, operation_id: str) -> DsseEnvelope:
        path = f"/v1/operations/{_segment(operation_id)}/rollback-receipt.dsse"
        return DsseEnvelope.model_validate_json(self._send("GET", path).content)

    def verification_dsse(self, bundle_id: str) -> DsseEnvelope:
        path = f"/v1/bundles/{_segment(bundle_id)}/verification.dsse"
        return DsseEnvelope.model_validate_json(self._send("GET", path).content)

    def approve(
        self, operation_id: str, note: str = "", by: str = "", *, wait: bool = False
    ) -> Json:
        """Approve a promotion held in ``awaiting_approval`` (operator); the operation view."""
        body = {"note": note, "by": by, "wait": wait}
        return self._json(
            "POST", f"/v1/operations/{_segment(operation_id)}/approve", json_body=body
        )

    def reject(self, operation_id: str, note: str = "", by: str = "") -> Json:
        """Reject a promotion held in ``awaiting_approval`` (operator); the operation view."""
        body = {"note": note, "by": by}
        return self._json("POST", f"/v1/operations/{_segment(operation_id)}/reject", json_body=body)

    def recover(self, operation_id: str, fence: int) -> Json:
        path = f"/v1/operations/{_segment(operation_id)}/recover"
        return self._json("POST", path, json_body={"fence": fence})

    def reconcile(self, operation_id: str, decision: str, note: str = "") -> Json:
        path = f"/v1/operations/{_segment(operation_id)}/reconcile"
        return self._json("POST", path, json_body={"decision": decision, "note": note})

    def rollback(self, operation_id: str, note: str = "") -> Json:
        """The RollbackReceiptV1 of an operator's rollback."""
        body = {"note": note} if note else None
        path = f"/v1/operations/{_segment(operation_id)}/rollback"
        return self._json("POST", path, json_body=body)

    # --- snapshots ------------------------------------------------------------------------

    def snapshots(self, repository: str) -> list[Json]:
        """``[{tree, label, captured_at}, ...]`` (a bare list or ``{"snapshots": [...]}``)."""
        path = f"/v1/repositories/{_segment(repository)}/snapshots"
        answer = self._send("GET", path).json()
        items = answer.get("snapshots") if isinstance(answer, dict) else answer
        if not isinstance(items, list):
            raise PromoterError(f"GET {path} answered with no list of snapshots")
        return items

    def capture_snapshot(self, repository: str, label: str = "") -> Json:
        path = f"/v1/repositories/{_segment(repository)}/snapshots"
        return self._json("POST", path, json_body={"label": label})

    def snapshot_diff(self, repository: str, from_tree: str, to_tree: str) -> Json:
        path = f"/v1/repositories/{_segment(repository)}/snapshots/diff"
        return self._json("GET", path, params={"from": from_tree, "to": to_tree})

    def restore_snapshot(self, repository: str, tree: str, expected_current_tree: str) -> Json:
        path = f"/v1/repositories/{_segment(repository)}/snapshots/{_segment(tree)}/restore"
        body = {"expected_current_tree": expected_current_tree}
        return self._json("POST", path, json_body=body)


class AsyncPromoterClient:
    """The orchestrator's calls over httpx's async client, answering the API's models.

    The same retries as ``PromoterClient`` (``Backoff.async_sleep``), the same problem to
    ``PromoterError`` translation; ``watch`` is an async iterator over the feed.
    """

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._backoff = backoff
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            verify=tls_context(self.url),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncPromoterClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        delays = _retry_delays(self._backoff, method, content, idempotent)
        limit = timeout or self._timeout
        while True:
            try:
                response = await self._http.request(
                    method,
                    path,
                    json=json_body,
                    content=content,
                    params=params,
                    headers=headers,
                    timeout=limit,
                )
            except httpx.TransportError as exc:
                delay = next(delays, None)
                if delay is None or isinstance(exc, httpx.TimeoutException):
                    raise _unreachable(self.url, method, path, limit, exc) from exc
                await self._backoff.async_sleep(delay)
                continue
            if response.status_code == 503:
                delay = next(delays, None)
                if delay is not None:
                    await self._backoff.async_sleep(delay)
                    continue
            _raise_for(response)
            return response

    async def mint_executor_token(
        self, executor_run_id: str, ttl_seconds: int = 3600
    ) -> ExecutorToken:
        body = {"executor_run_id": executor_run_id, "ttl_seconds": ttl_seconds}
        return _model(
            ExecutorToken, await self._send("POST", "/v1/executor-tokens", json_body=body)
        )

    async def register_grant(self, grant: GrantV1 | Mapping[str, Any]) -> GrantRegistered:
        document = grant.wire() if isinstance(grant, GrantV1) else dict(grant)
        response = await self._send("POST", "/v1/grants", json_body=document, idempotent=True)
        return _model(GrantRegistered, response)

    async def set_lease(
        self, workflow_id: str, stage: str, lease: LeaseV1 | Mapping[str, Any]
    ) -> LeaseSet:
        document = lease.wire() if isinstance(lease, LeaseV1) else dict(lease)
        path = f"/v1/leases/{_segment(workflow_id)}/{_segment(stage)}"
        return _model(LeaseSet, await self._send("PUT", path, json_body=document))

    async def blobs_missing(self, digests: Iterable[str]) -> list[str]:
        wanted = list(dict.fromkeys(digests))
        missing: list[str] = []
        for start in range(0, len(wanted), MISSING_BATCH):
            body = {"sha256": wanted[start : start + MISSING_BATCH]}
            response = await self._send(
                "POST", "/v1/blobs:missing", json_body=body, idempotent=True
            )
            missing.extend(_model(MissingBlobs, response).missing)
        return missing

    async def put_blob(self, sha256: str, data: bytes) -> BlobStored:
        headers = {"Content-Type": "application/octet-stream"}
        path = f"/v1/blobs/sha256/{_segment(sha256)}"
        return _model(BlobStored, await self._send("PUT", path, content=data, headers=headers))

    async def submit_bundle(self, bundle: PatchBundleV1 | Mapping[str, Any]) -> BundleSubmitted:
        document = bundle.wire() if isinstance(bundle, PatchBundleV1) else dict(bundle)
        response = await self._send("POST", "/v1/bundles", json_body=document, idempotent=True)
        return _model(BundleSubmitted, response)

    async def promote(
        self, bundle_id: str, receipt_sha256: str, fence: int, *, wait: bool = False
    ) -> OperationAccepted | OperationView:
        """202's ``OperationAccepted``, or (with ``wait``) the ended ``OperationView``."""
        body = {
            "bundle_id": bundle_id,
            "verification_receipt_sha256": receipt_sha256,
            "fence": fence,
            "wait": wait,
        }
        response = await self._send("POST", "/v1/promotions", json_body=body, idempotent=True)
        if response.status_code == 202:
            return _model(OperationAccepted, response)
        return _model(OperationView, response)

    async def operation(
        self, operation_id: str, *, wait: float | None = None, status: str | None = None
    ) -> OperationView:
        path = f"/v1/operations/{_segment(operation_id)}"
        params = _wait_params(wait, status)
        response = await self._send("GET", path, params=params, timeout=self._long(wait))
        return _model(OperationView, response)

    async def receipt(self, operation_id: str) -> bytes:
        """The promotion receipt's exact stored canonical bytes."""
        path = f"/v1/operations/{_segment(operation_id)}/receipt"
        return (await self._send("GET", path)).content

    async def recover(self, operation_id: str, fence: int) -> OperationView:
        path = f"/v1/operations/{_segment(operation_id)}/recover"
        return _model(OperationView, await self._send("POST", path, json_body={"fence": fence}))

    async def events(
        self,
        after: str | None = None,
        *,
        wait: float | None = None,
        repository: str | None = None,
        status: str | None = None,
    ) -> EventFeed:
        params = _feed_params(after, wait, repository, status)
        response = await self._send("GET", "/v1/events", params=params, timeout=self._long(wait))
        return _model(EventFeed, response)

    async def watch(
        self,
        after: str | None = None,
        *,
        repository: str | None = None,
        status: str | None = None,
        wait: float = WATCH_WAIT,
    ) -> AsyncIterator[FeedEvent]:
        """Every feed entry after ``after``, long-polling for more; never ends by itself."""
        while True:
            page = await self.events(after, wait=wait, repository=repository, status=status)
            for entry in page.events:
                yield entry
            after = page.cursor

    def _long(self, wait: float | None) -> float:
        return self._timeout + (wait or 0.0)


def _retry_delays(
    backoff: Backoff,
    method: str,
    content: bytes | Iterable[bytes] | None,
    idempotent: bool | None,
    ok_statuses: tuple[int, ...] = (),
) -> Iterator[float]:
    """The delays of the retries a call may make (none for a call that is not idempotent)."""
    if idempotent is None:
        idempotent = method in IDEMPOTENT_METHODS
    replayable = content is None or isinstance(content, bytes)
    return backoff.delays() if idempotent and replayable else iter(())


def _unreachable(
    url: str, method: str, path: str, timeout: float, exc: httpx.TransportError
) -> ConfigError:
    if isinstance(exc, httpx.TimeoutException):
        return ConfigError(
            f"the promoter server at {url} did not answer {method} {path} within {timeout:g} s",
            url=url,
        )
    return ConfigError(f"cannot reach the promoter server at {url}: {exc}", url=url)


def _wait_params(wait: float | None, status: str | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if wait:
        params["wait"] = f"{wait:g}"
    if status:
        params["status"] = status
    return params


def _feed_params(
    after: str | None, wait: float | None, repository: str | None, status: str | None
) -> dict[str, str]:
    pairs = (("after", after), ("repository", repository), ("status", status))
    return {**{k: v for k, v in pairs if v}, **_wait_params(wait, None)}


def _model(model: type[M], response: httpx.Response) -> M:
    return model.model_validate_json(response.content)


def _segment(value: str) -> str:
    """A value placed in a URL path: one segment, never a way to reach another route."""
    if not value or value in (".", "..") or any(ord(c) < 0x21 or c == "/" for c in value):
        raise BadRequest(f"{value!r} cannot be used as one segment of a URL path")
    return quote(value, safe="")
