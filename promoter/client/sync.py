"""``PromoterClient``: the synchronous HTTP client of the daemon, used by the CLI and executors.

One method per endpoint, with the bearer token; a problem+json answer is raised as the
``PromoterError`` subclass its ``code`` names (protocol: api#http-errors), an unreachable
server as ``ServerUnavailable`` (a ``ConfigError``) naming the URL. Idempotent calls are
retried with backoff on connection errors and 503; a streamed body never is. Answers are
the ``TypedDict``s of ``promoter.domain.answers`` (typed member by member, no pydantic
loaded to read them), wire models (protocol: documents#strict-models), or for
``operation``, ``events`` and ``watch`` the response models of ``promoter.domain.views``.
The parts are its neighbours: ``promoter.client.wire`` (retries, problems, TLS),
``promoter.client.transport`` (the pool and the retrying send, following a 421 with
``promoter.client.follow``), ``promoter.client.blobs`` (the blob endpoints);
``promoter.client.aio`` is the asynchronous client. Not here: any policy (it neither
builds nor checks documents).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlencode

from promoter.client.blobs import BlobCalls, batch_frames
from promoter.client.evidence import PATH as EVIDENCE_PATH
from promoter.client.evidence import bundle_frame, request_parts, split_blobs
from promoter.client.wire import (
    MISSING_BATCH,
    WATCH_WAIT,
    Backoff,
    BlobSource,
    Json,
    feed_params,
    file_chunks,
    segment,
    tls_context,
    wait_params,
)
from promoter.domain.blob_frames import frame_bytes
from promoter.errors import PromoterError

if TYPE_CHECKING:
    import promoter.domain.answers as answers
    from promoter.client.aio import AsyncPromoterClient
    from promoter.domain.models import (
        DsseEnvelope,
        FileState,
        GrantV1,
        LeaseV1,
        PatchBundleV1,
        PatchVerificationReceiptV1,
    )
    from promoter.domain.views import EventFeed, FeedEvent, OperationView

    class Registered(answers.GrantRegistered):
        created: bool  # registered by this call (201), not already (200)


# the most bytes of a one-request body held whole, to be sent again if the first try is
# met by the close of an idle connection (a larger body is streamed once)
REPLAYED_BYTES = 1 << 20

__all__ = [
    "MISSING_BATCH",
    "AsyncPromoterClient",
    "Backoff",
    "PromoterClient",
    "file_chunks",
    "tls_context",
]


def __getattr__(name: str) -> Any:
    """``AsyncPromoterClient``, still importable from here, loaded only when asked for."""
    if name == "AsyncPromoterClient":
        from promoter.client.aio import AsyncPromoterClient

        return AsyncPromoterClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _document(value: Any) -> Json:
    """The wire document of a model (``.wire()``) or a mapping given as it is."""
    return dict(value) if isinstance(value, Mapping) else dict(value.wire())


def _envelope(content: bytes) -> DsseEnvelope:
    from promoter.domain.models import DsseEnvelope

    return DsseEnvelope.model_validate_json(content)


class PromoterClient(BlobCalls):
    """One connection pool to one daemon, with one bearer token (or none)."""

    def with_token(self, token: str | None, url: str | None = None) -> PromoterClient:
        """A second client for the same server (or ``url``, another host of its cluster)
        with another token (e.g. an executor's), which follows a 421 within the cluster
        this client read."""
        return PromoterClient(
            url or self.url,
            token,
            timeout=self._timeout,
            transport=self._transport,
            backoff=self._backoff,
            cluster=self._cluster,
            max_body=self._max_body,
        )

    # --- health ---------------------------------------------------------------------------

    def healthz(self) -> answers.Health:
        return cast("answers.Health", self._json("GET", "/healthz"))

    def readyz(self) -> answers.Readiness:
        """Readiness; a 503 ``not_ready`` answer is returned, not raised."""
        return cast("answers.Readiness", self._json("GET", "/readyz", ok_statuses=(503,)))

    def keys(self) -> answers.KeySet:
        return cast("answers.KeySet", self._json("GET", "/v1/keys"))

    # --- orchestrator: repositories, tokens, grants, leases -------------------------------

    def repositories(self) -> list[answers.RepositoryInfo]:
        return self._repositories()["repositories"]

    def _repositories(self) -> answers.RepositoryList:
        return cast("answers.RepositoryList", self._json("GET", "/v1/repositories"))

    def guardians(self) -> list[answers.GuardedRepository] | None:
        """Every repository of the cluster with the host guarding it and its ``address``
        (``GET /v1/repositories``' ``cluster``); None while the database does not answer."""
        return self._repositories().get("cluster")

    def whoami(self) -> answers.Caller:
        """``{role, name, run_id}`` of this client's credential."""
        return cast("answers.Caller", self._json("GET", "/v1/whoami"))

    def repository_approval(self, name: str) -> answers.RepositoryApproval:
        return cast(
            "answers.RepositoryApproval",
            self._json("GET", f"/v1/repositories/{segment(name)}/approval"),
        )

    def set_repository_approval(self, name: str, approval: str) -> answers.RepositoryApproval:
        """Turn the repository's approval gate on (``required``) or off (``none``); operator."""
        body = {"approval": approval}
        return cast(
            "answers.RepositoryApproval",
            self._json(
                "PUT", f"/v1/repositories/{segment(name)}/approval", json_body=body, idempotent=True
            ),
        )

    def mint_executor_token(
        self, executor_run_id: str, ttl_seconds: int = 3600
    ) -> answers.ExecutorToken:
        """``{token, executor_run_id, expires_at}`` for a new executor token."""
        body = {"executor_run_id": executor_run_id, "ttl_seconds": ttl_seconds}
        return cast(
            "answers.ExecutorToken", self._json("POST", "/v1/executor-tokens", json_body=body)
        )

    def register_grant(self, grant: GrantV1 | Mapping[str, Any]) -> Registered:
        """``{grant_id, grant_sha256, created}``; registering identical bytes again is a no-op."""
        document = _document(grant)
        response = self._send("POST", "/v1/grants", json_body=document, idempotent=True)
        answer = cast("answers.GrantRegistered", response.json())
        return {**answer, "created": response.status_code == 201}

    def get_grant(self, grant_id: str) -> GrantV1:
        from promoter.domain.models import GrantV1

        response = self._send("GET", f"/v1/grants/{segment(grant_id)}")
        return GrantV1.model_validate_json(response.content)

    def grant_document(self, grant_id: str) -> dict[str, Any]:
        """The grant as the daemon answers it, parsed by no model (``promoter run`` checks
        it with ``promoter.domain.wirecheck``)."""
        return dict(self._json("GET", f"/v1/grants/{segment(grant_id)}"))

    def grant_base_document(self, grant_id: str) -> dict[str, Any]:
        """A chained grant's base as the daemon answers it: ``{states: [{path, state}]}``."""
        return dict(self._json("GET", f"/v1/grants/{segment(grant_id)}/base"))

    def grant_base(self, grant_id: str) -> dict[str, FileState]:
        """A chained grant's base: per path the state its base operations left."""
        from promoter.domain.models import FileState

        answer = self.grant_base_document(grant_id)
        return {
            str(item["path"]): FileState.model_validate(item["state"]) for item in answer["states"]
        }

    def set_lease(
        self, workflow_id: str, stage: str, lease: LeaseV1 | Mapping[str, Any]
    ) -> answers.LeaseSet:
        document = _document(lease)
        path = f"/v1/leases/{segment(workflow_id)}/{segment(stage)}"
        return cast("answers.LeaseSet", self._json("PUT", path, json_body=document))

    def open_run(
        self,
        grant: GrantV1 | Mapping[str, Any],
        lease: LeaseV1 | Mapping[str, Any],
        token_ttl_seconds: int = 3600,
    ) -> answers.RunOpened:
        """Register ``grant``, set ``lease`` (for the grant's workflow stage) and mint the
        run's executor token in one request: ``{grant, grant_created, lease, token}``.
        A refusal of any part changes nothing. Not retried: each call mints a token."""
        document = _document(grant)
        lease_doc = _document(lease)
        body = {
            "grant": document,
            "lease": {
                "workflow_id": document["workflow_id"],
                "stage": document["stage"],
                **lease_doc,
            },
            "token_ttl_seconds": token_ttl_seconds,
        }
        return cast("answers.RunOpened", self._json("POST", "/v1/runs", json_body=body))

    # --- bundles --------------------------------------------------------------------------

    def submit_bundle(self, bundle: PatchBundleV1 | Mapping[str, Any]) -> answers.BundleSubmitted:
        """``{bundle_id, bundle_sha256, verification_receipt}`` of a passed verification.

        A failed verification is raised as the code of its first failed check, with the
        failed receipt in the error's ``verification_receipt`` context member.
        """
        document = _document(bundle)
        return cast(
            "answers.BundleSubmitted",
            self._json("POST", "/v1/bundles", json_body=document, idempotent=True),
        )

    def get_bundle(self, bundle_id: str) -> PatchBundleV1:
        from promoter.domain.models import PatchBundleV1

        response = self._send("GET", f"/v1/bundles/{segment(bundle_id)}")
        return PatchBundleV1.model_validate_json(response.content)

    def bundle_document(self, bundle_id: str) -> dict[str, Any]:
        """The bundle as the daemon answers it, parsed by no model (``promoter run`` reads
        whether a step's bundle is a merge)."""
        return dict(self._json("GET", f"/v1/bundles/{segment(bundle_id)}"))

    def get_verification(self, bundle_id: str) -> PatchVerificationReceiptV1:
        from promoter.domain.models import PatchVerificationReceiptV1

        response = self._send("GET", f"/v1/bundles/{segment(bundle_id)}/verification")
        return PatchVerificationReceiptV1.model_validate_json(response.content)

    def bundle_diff(
        self,
        bundle_id: str,
        max_bytes: int | None = None,
        *,
        path: str | None = None,
        cursor: str | None = None,
    ) -> answers.BundleDiffView:
        """A page of the bundle's diff (or of its one ``path``) from ``cursor``: ``{files,
        unified_diff, truncated, next_cursor, unseen, ...}`` (orchestrator/operator)."""
        params = {"max_bytes": max_bytes, "path": path, "cursor": cursor}
        given = {k: str(v) for k, v in params.items() if v is not None}
        return cast(
            "answers.BundleDiffView",
            self._json("GET", f"/v1/bundles/{segment(bundle_id)}/diff", params=given or None),
        )

    def bundle_diff_pages(
        self, bundle_id: str, max_bytes: int | None = None, *, path: str | None = None
    ) -> Iterator[answers.BundleDiffView]:
        """Every page of the bundle's diff (or of ``path``), one bounded request each."""
        cursor: str | None = None
        while True:
            page = self.bundle_diff(bundle_id, max_bytes, path=path, cursor=cursor)
            yield page
            following = page["next_cursor"]
            if following is None or following == page["cursor"]:
                return  # the end (or a page of 0 bytes, which never moves on)
            cursor = following

    def bundle_operations(self, bundle_id: str) -> list[answers.BundleOperation]:
        """The promotions of a bundle with their status (its own executor may ask)."""
        answer = self._json("GET", f"/v1/bundles/{segment(bundle_id)}/operations")
        return cast("answers.BundleOperations", answer)["operations"]

    def preflight(self, bundle_id: str, fence: int | None = None) -> answers.Preflight:
        body = None if fence is None else {"fence": fence}
        return cast(
            "answers.Preflight",
            self._json("POST", f"/v1/bundles/{segment(bundle_id)}/preflight", json_body=body),
        )

    # --- promotions and operations --------------------------------------------------------

    def promote(
        self, bundle_id: str, receipt_sha256: str, fence: int, *, wait: bool = False
    ) -> answers.OperationAccepted | answers.OperationView:
        """``{operation_id, status}`` (202), or the operation's final view when waited on."""
        body = {
            "bundle_id": bundle_id,
            "verification_receipt_sha256": receipt_sha256,
            "fence": fence,
            "wait": wait,
        }
        return cast(
            "answers.OperationAccepted | answers.OperationView",
            self._json("POST", "/v1/promotions", json_body=body, idempotent=True),
        )

    def promote_with_evidence(
        self,
        bundle: PatchBundleV1 | Mapping[str, Any],
        blobs: Iterable[tuple[str, int, BlobSource]],
        fence: int,
        *,
        executor_token: str,
        wait: bool = False,
        with_review: bool = False,
    ) -> answers.PromotedWithEvidence:
        """Blobs, bundle and promotion in one request, for a caller with both authorities.

        This client's token is the orchestrator's (or operator's), ``executor_token`` the
        run's. Blobs a request cannot carry (bigger than a batch's blob, or past its count
        or bytes) are stored first with the run's token. ``{bundle_id, bundle_sha256,
        verification_receipt, operation}``: ``operation`` the ended view with ``wait``
        (200), else ``{operation_id, status}`` (202); ``with_review``, also ``diff`` (the
        bundle's first diff page) and, once completed, ``receipt`` (the promotion
        receipt), each when the host could read it. Asking again answers the same
        operation (protocol: promotion#operation-identity), so a body of at most
        ``REPLAYED_BYTES`` is held whole and sent again as an idempotent call's (on the
        idle connection, met by its close, a second time on a new one); a larger one is
        streamed once, on a new connection, and not retried.
        """
        framed, apart = split_blobs(blobs)
        if apart:
            with self.with_token(executor_token) as executor:
                executor.put_blobs(apart)
        head = bundle_frame(_document(bundle))
        length = len(head) + sum(frame_bytes(s, n) for s, n, _ in framed)
        params, headers = request_parts(
            fence, wait, executor_token, length, with_review=with_review
        )
        frames = itertools.chain((head,), batch_frames(framed))
        content = b"".join(frames) if length <= REPLAYED_BYTES else frames
        answer = self._json(
            "POST", EVIDENCE_PATH, content=content, params=params, headers=headers,
            idempotent=True,  # the same operation, whatever the tries (replayed if bytes)
        )  # fmt: skip
        return cast("answers.PromotedWithEvidence", answer)

    def operation(
        self, operation_id: str, *, wait: float | None = None, status: str | None = None
    ) -> OperationView:
        """The operation; with ``wait``, once its status differs from ``status`` (or now)."""
        from promoter.domain.views import OperationView

        params = wait_params(wait, status)
        path = f"/v1/operations/{segment(operation_id)}"
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
        from promoter.domain.views import EventFeed

        params = feed_params(after, wait, repository, status)
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

    def get_operation(self, operation_id: str, *, current: bool = False) -> answers.OperationView:
        params = {"current": "true"} if current else None
        return cast(
            "answers.OperationView",
            self._json("GET", f"/v1/operations/{segment(operation_id)}", params=params),
        )

    def list_operations(
        self, status: str | None = None, repository: str | None = None
    ) -> list[answers.OperationSummary]:
        params = {k: v for k, v in (("status", status), ("repository", repository)) if v}
        answer = self._json("GET", "/v1/operations", params=params)
        return cast("answers.OperationList", answer)["operations"]

    def get_receipt(self, operation_id: str) -> bytes:
        """The promotion receipt's exact stored canonical bytes."""
        return self._send("GET", f"/v1/operations/{segment(operation_id)}/receipt").content

    def receipt_dsse(self, operation_id: str) -> DsseEnvelope:
        path = f"/v1/operations/{segment(operation_id)}/receipt.dsse"
        return _envelope(self._send("GET", path).content)

    def rollback_receipt_dsse(self, operation_id: str) -> DsseEnvelope:
        path = f"/v1/operations/{segment(operation_id)}/rollback-receipt.dsse"
        return _envelope(self._send("GET", path).content)

    def verification_dsse(self, bundle_id: str) -> DsseEnvelope:
        path = f"/v1/bundles/{segment(bundle_id)}/verification.dsse"
        return _envelope(self._send("GET", path).content)

    def approve(
        self,
        operation_id: str,
        note: str = "",
        *,
        wait: bool = False,
        only: list[str] | None = None,
        except_: list[str] | None = None,
        hunks: dict[str, list[int]] | None = None,
        seen: list[str] | None = None,
        all_seen: bool = False,
    ) -> answers.OperationView:
        """Approve a promotion held in ``awaiting_approval`` (operator); the operation view.

        The host records the token's credential as the approver; no name is sent.
        ``only``/``except_``/``hunks`` accept a part: the view answered is then the
        derived operation's. ``seen`` names the files the review's first page did not
        show in full that the person read or accepts; ``all_seen`` says it of all."""
        body: dict[str, Any] = {"note": note, "wait": wait}
        if seen:
            body["seen"] = seen
        if all_seen:
            body["all_seen"] = True
        if only is not None:
            body["only"] = only
        if except_ is not None:
            body["except"] = except_
        if hunks:
            body["hunks"] = hunks
        return cast(
            "answers.OperationView",
            self._json("POST", f"/v1/operations/{segment(operation_id)}/approve", json_body=body),
        )

    def reject(self, operation_id: str, note: str = "") -> answers.OperationView:
        """Reject a promotion held in ``awaiting_approval`` (operator); the operation view."""
        body = {"note": note}
        return cast(
            "answers.OperationView",
            self._json("POST", f"/v1/operations/{segment(operation_id)}/reject", json_body=body),
        )

    def reopen(self, operation_id: str, note: str = "") -> answers.OperationView:
        """Hold a rejected promotion for a decision again (operator); the operation view."""
        body = {"note": note}
        return cast(
            "answers.OperationView",
            self._json("POST", f"/v1/operations/{segment(operation_id)}/reopen", json_body=body),
        )

    def merge(self, operation_id: str) -> answers.MergeResult:
        """Merge a promotion refused with ``target_drift`` into a new bundle held for
        approval (operator); ``MergeConflict``/``MergeUnsupported`` carry ``paths``."""
        return cast(
            "answers.MergeResult",
            self._json("POST", f"/v1/operations/{segment(operation_id)}/merge"),
        )

    def recover(self, operation_id: str, fence: int) -> answers.OperationView:
        path = f"/v1/operations/{segment(operation_id)}/recover"
        return cast("answers.OperationView", self._json("POST", path, json_body={"fence": fence}))

    def reconcile(self, operation_id: str, decision: str, note: str = "") -> answers.OperationView:
        path = f"/v1/operations/{segment(operation_id)}/reconcile"
        return cast(
            "answers.OperationView",
            self._json("POST", path, json_body={"decision": decision, "note": note}),
        )

    def list_hosts(self) -> list[answers.HostEntry]:
        """Every host of the ledger with its epoch and leases (operator)."""
        return self.hosts_seen()["hosts"]

    def hosts_seen(self) -> answers.HostList:
        """``GET /v1/hosts`` whole: the hosts, and whether they are the ledger's
        (``source``) or, while the database does not answer, this daemon's own view."""
        return cast("answers.HostList", self._json("GET", "/v1/hosts"))

    def fence_host(self, host: str, to: str) -> answers.Fenced:
        """Fence ``host`` off and hand its operations to ``to`` (operator)."""
        return cast(
            "answers.Fenced",
            self._json("POST", f"/v1/hosts/{segment(host)}/fence", json_body={"to": to}),
        )

    def admit_host(self, host: str) -> answers.HostEntry:
        """Let a fenced host write again once its daemon restarts (operator)."""
        return cast("answers.HostEntry", self._json("POST", f"/v1/hosts/{segment(host)}/admit"))

    def rollback(self, operation_id: str, note: str = "") -> Json:
        """The RollbackReceiptV1 of an operator's rollback."""
        body = {"note": note} if note else None
        path = f"/v1/operations/{segment(operation_id)}/rollback"
        return self._json("POST", path, json_body=body)

    # --- trace ----------------------------------------------------------------------------

    def trace(
        self,
        repository: str,
        commit: str | None = None,
        paths: Sequence[str] = (),
        *,
        staged: bool = False,
    ) -> answers.TraceReport:
        """Which promotion receipts wrote a commit's (or, ``staged``, the index's) bytes."""
        pairs = [("repository", repository)]
        pairs += [("staged", "true")] if staged else [("commit", commit or "")]
        pairs += [("path", path) for path in paths]
        return cast("answers.TraceReport", self._json("GET", f"/v1/trace?{urlencode(pairs)}"))

    # --- snapshots ------------------------------------------------------------------------

    def snapshots(self, repository: str) -> list[answers.Snapshot]:
        """``[{tree, label, captured_at}, ...]`` (a bare list or ``{"snapshots": [...]}``)."""
        path = f"/v1/repositories/{segment(repository)}/snapshots"
        answer = self._send("GET", path).json()
        items = answer.get("snapshots") if isinstance(answer, dict) else answer
        if not isinstance(items, list):
            raise PromoterError(f"GET {path} answered with no list of snapshots")
        return items

    def capture_snapshot(self, repository: str, label: str = "") -> answers.Snapshot:
        path = f"/v1/repositories/{segment(repository)}/snapshots"
        return cast("answers.Snapshot", self._json("POST", path, json_body={"label": label}))

    def worktree_changes(
        self, repository: str, positions: Sequence[tuple[str, int]] = ()
    ) -> answers.WorktreeChanges:
        """The worktree paths changed since the position (generation, clock) of an earlier
        answer among ``positions`` that is of the answering worker's generation (``paths``
        null: not known), after the daemon synced with its watch."""
        path = f"/v1/repositories/{segment(repository)}/changes"
        body = {"positions": [{"generation": g, "clock": c} for g, c in positions]}
        return cast("answers.WorktreeChanges", self._json("POST", path, json_body=body))

    def snapshot_diff(self, repository: str, from_tree: str, to_tree: str) -> answers.SnapshotDiff:
        path = f"/v1/repositories/{segment(repository)}/snapshots/diff"
        return cast(
            "answers.SnapshotDiff",
            self._json("GET", path, params={"from": from_tree, "to": to_tree}),
        )

    def restore_snapshot(
        self, repository: str, tree: str, expected_current_tree: str
    ) -> answers.OperationAccepted:
        path = f"/v1/repositories/{segment(repository)}/snapshots/{segment(tree)}/restore"
        body = {"expected_current_tree": expected_current_tree}
        return cast("answers.OperationAccepted", self._json("POST", path, json_body=body))
