"""The orchestrator's calls to the daemon over httpx's async client, answering API models.

``AsyncPromoterClient`` makes the same retries as ``PromoterClient``
(``Backoff.async_sleep``) and the same problem to ``PromoterError`` translation;
``watch`` is an async iterator over the event feed; ``merge`` (the operator's) answers
its ``MergeResult``; ``with_token`` makes a second client of the same caller (an
executor's token) that follows a 421 within the cluster this one read. Deliberately not here: blob
streaming from files, the operator's other calls (``promoter.client.sync``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any

import httpx
from tenacity import AsyncRetrying

from promoter.client.evidence import PATH as EVIDENCE_PATH
from promoter.client.evidence import bundle_frame, request_parts, split_blobs
from promoter.client.follow import Origin, cluster_origins, location, owner, replayable, within
from promoter.client.wire import (
    DEFAULT_BACKOFF,
    MISSING_BATCH,
    WATCH_WAIT,
    Backoff,
    feed_params,
    model_of,
    pool_options,
    raise_for,
    retry_policy,
    segment,
    unreachable,
    wait_params,
)
from promoter.domain.blob_frames import frame_header
from promoter.domain.models import GrantV1, LeaseV1, PatchBundleV1
from promoter.domain.views import (
    BlobStored,
    BundleSubmitted,
    EventFeed,
    ExecutorToken,
    FeedEvent,
    GrantRegistered,
    LeaseSet,
    MergeResult,
    MissingBlobs,
    OperationAccepted,
    OperationView,
    PromotedWithEvidence,
    RunOpened,
)


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
        cluster: frozenset[Origin] | None = None,
    ) -> None:
        """``cluster``: the origins of the cluster's hosts as another client of the same
        caller read them, for a credential that may not read the hosts list itself."""
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._transport = transport
        self._backoff = backoff
        self._cluster = cluster
        self._http = httpx.AsyncClient(**pool_options(self.url, token, timeout, transport))

    def with_token(self, token: str | None, url: str | None = None) -> AsyncPromoterClient:
        """A second client for the same server (or ``url``, another host of its cluster)
        with another token (e.g. an executor's), which follows a 421 within the cluster
        this client read."""
        return AsyncPromoterClient(
            url or self.url,
            token,
            timeout=self._timeout,
            transport=self._transport,
            backoff=self._backoff,
            cluster=self._cluster,
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
        limit = timeout or self._timeout
        policy = retry_policy(self._backoff, method, content, idempotent)
        send = AsyncRetrying(sleep=self._backoff.async_sleep, **policy)
        try:
            response: httpx.Response = await send(
                self._http.request,
                method,
                path,
                json=json_body,
                content=content,
                params=params,
                headers=headers,
                timeout=limit,
            )
        except httpx.TransportError as exc:
            raise unreachable(self.url, method, path, limit, exc) from exc
        target = location(response) if replayable(content) else None
        if target is not None and await self._in_cluster(target):
            try:  # once: the owner's answer is the answer (protocol: hosts#answers-that-route)
                response = await send(
                    self._http.request,
                    method,
                    target,
                    json=json_body,
                    content=content,
                    headers=headers,
                    timeout=limit,
                )
            except httpx.TransportError as exc:
                where = owner(response, target)
                raise unreachable(where, method, path, limit, exc, sent_by=self.url) from exc
        raise_for(response)
        return response

    async def _in_cluster(self, target: str) -> bool:
        """Whether ``target`` is another host the ledger lists (asked of this daemon; for
        a credential that may not ask, the list given at construction)."""
        try:
            answer = await self._http.get("/v1/hosts", timeout=self._timeout)
        except httpx.TransportError:
            return False
        if answer.status_code == 200:
            self._cluster = cluster_origins(answer.json())
        elif answer.status_code != 403 or self._cluster is None:
            return False
        return within(target, self.url, self._cluster)

    async def mint_executor_token(
        self, executor_run_id: str, ttl_seconds: int = 3600
    ) -> ExecutorToken:
        body = {"executor_run_id": executor_run_id, "ttl_seconds": ttl_seconds}
        return model_of(
            ExecutorToken, await self._send("POST", "/v1/executor-tokens", json_body=body)
        )

    async def register_grant(self, grant: GrantV1 | Mapping[str, Any]) -> GrantRegistered:
        document = grant.wire() if isinstance(grant, GrantV1) else dict(grant)
        response = await self._send("POST", "/v1/grants", json_body=document, idempotent=True)
        return model_of(GrantRegistered, response)

    async def set_lease(
        self, workflow_id: str, stage: str, lease: LeaseV1 | Mapping[str, Any]
    ) -> LeaseSet:
        document = lease.wire() if isinstance(lease, LeaseV1) else dict(lease)
        path = f"/v1/leases/{segment(workflow_id)}/{segment(stage)}"
        return model_of(LeaseSet, await self._send("PUT", path, json_body=document))

    async def open_run(
        self,
        grant: GrantV1 | Mapping[str, Any],
        lease: LeaseV1 | Mapping[str, Any],
        token_ttl_seconds: int = 3600,
    ) -> RunOpened:
        """``PromoterClient.open_run``: the grant, its lease and the run's token at once."""
        document = grant.wire() if isinstance(grant, GrantV1) else dict(grant)
        lease_doc = lease.wire() if isinstance(lease, LeaseV1) else dict(lease)
        stage = {"workflow_id": document["workflow_id"], "stage": document["stage"]}
        body = {
            "grant": document,
            "lease": {**stage, **lease_doc},
            "token_ttl_seconds": token_ttl_seconds,
        }
        return model_of(RunOpened, await self._send("POST", "/v1/runs", json_body=body))

    async def blobs_missing(self, digests: Iterable[str]) -> list[str]:
        wanted = list(dict.fromkeys(digests))
        missing: list[str] = []
        for start in range(0, len(wanted), MISSING_BATCH):
            body = {"sha256": wanted[start : start + MISSING_BATCH]}
            response = await self._send(
                "POST", "/v1/blobs:missing", json_body=body, idempotent=True
            )
            missing.extend(model_of(MissingBlobs, response).missing)
        return missing

    async def put_blob(self, sha256: str, data: bytes) -> BlobStored:
        headers = {"Content-Type": "application/octet-stream"}
        path = f"/v1/blobs/sha256/{segment(sha256)}"
        return model_of(BlobStored, await self._send("PUT", path, content=data, headers=headers))

    async def submit_bundle(self, bundle: PatchBundleV1 | Mapping[str, Any]) -> BundleSubmitted:
        document = bundle.wire() if isinstance(bundle, PatchBundleV1) else dict(bundle)
        response = await self._send("POST", "/v1/bundles", json_body=document, idempotent=True)
        return model_of(BundleSubmitted, response)

    async def promote_with_evidence(
        self,
        bundle: PatchBundleV1 | Mapping[str, Any],
        blobs: Iterable[tuple[str, bytes]],
        fence: int,
        *,
        executor_token: str,
        wait: bool = False,
        with_review: bool = False,
    ) -> PromotedWithEvidence:
        """Blobs ``(sha256, bytes)``, bundle and promotion in one request, for a caller
        with both authorities (this client's token, and the run's ``executor_token``).

        Blobs a request cannot carry are stored first by ``PUT`` with the run's token;
        the rest ride in the body. The answer's ``operation`` is the ended view with
        ``wait`` (200), else the accepted id and status (202); ``with_review``, ``diff``
        and ``receipt`` as the sync client's. Asking again answers the same operation, so
        the request is retried as the promote route's is.
        """
        items = [(sha256, len(data), data) for sha256, data in blobs]
        framed, apart = split_blobs(items)
        for sha256, _, data in apart:
            headers = {"Content-Type": "application/octet-stream"}
            headers["Authorization"] = f"Bearer {executor_token}"
            path = f"/v1/blobs/sha256/{segment(sha256)}"
            await self._send("PUT", path, content=data, headers=headers)
        document = bundle.wire() if isinstance(bundle, PatchBundleV1) else dict(bundle)
        body = bundle_frame(document) + b"".join(
            frame_header(sha256, size) + data for sha256, size, data in framed
        )
        params, headers = request_parts(
            fence, wait, executor_token, len(body), with_review=with_review
        )
        response = await self._send(
            "POST", EVIDENCE_PATH, content=body, params=params, headers=headers, idempotent=True
        )
        return model_of(PromotedWithEvidence, response)

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
            return model_of(OperationAccepted, response)
        return model_of(OperationView, response)

    async def operation(
        self, operation_id: str, *, wait: float | None = None, status: str | None = None
    ) -> OperationView:
        path = f"/v1/operations/{segment(operation_id)}"
        params = wait_params(wait, status)
        response = await self._send("GET", path, params=params, timeout=self._long(wait))
        return model_of(OperationView, response)

    async def receipt(self, operation_id: str) -> bytes:
        """The promotion receipt's exact stored canonical bytes."""
        path = f"/v1/operations/{segment(operation_id)}/receipt"
        return (await self._send("GET", path)).content

    async def recover(self, operation_id: str, fence: int) -> OperationView:
        path = f"/v1/operations/{segment(operation_id)}/recover"
        return model_of(OperationView, await self._send("POST", path, json_body={"fence": fence}))

    async def merge(self, operation_id: str) -> MergeResult:
        """Merge a promotion refused with ``target_drift`` into a new bundle held for
        approval (operator); ``MergeConflict``/``MergeUnsupported`` carry ``paths``."""
        path = f"/v1/operations/{segment(operation_id)}/merge"
        return model_of(MergeResult, await self._send("POST", path))

    async def events(
        self,
        after: str | None = None,
        *,
        wait: float | None = None,
        repository: str | None = None,
        status: str | None = None,
    ) -> EventFeed:
        params = feed_params(after, wait, repository, status)
        response = await self._send("GET", "/v1/events", params=params, timeout=self._long(wait))
        return model_of(EventFeed, response)

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
