"""Promoter made ready for a timed promotion, in this process.

``prepare_promoter`` gives a copy of the source repository a fresh state directory
(its blob store copied from a template, ``make_blob_template``), a grant, a lease and a
verified bundle, after the rehearsal ``promoter serve`` makes before it serves
(``promoter.engine.operation.rehearsal``); ``promote_once`` is the timed part
(``request_promotion`` until the attempt has ended) and ``finish_promoter`` checks that
it completed (``finish_with_rollback`` then times its rollback). With ``warm_copy`` the
same daemon first promotes the same workload into that second copy (untimed), as a
daemon in service has promoted before: what a daemon's first promotion still does once
(the statements the rehearsal does not make) is then not in the timed promotion.
``InlineRunner`` runs the attempt in the requesting thread, for a profiler there.

Deliberately not here: the workload and the bare variants (``bench.workload``), timing
(but for the rollback's seconds).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from bench.documents import (
    FENCE,
    REPO_NAME,
    STAGE,
    WARM_REPO_NAME,
    WORKFLOW,
    bundle_document,
    grant_document,
    lease_document,
    step_changes,
)
from bench.workload import Source, Workload, copy_repo
from promoter.config import RepositoryConfig, load_settings
from promoter.domain.canonical import sha256_hex
from promoter.domain.records import Ticket
from promoter.engine.intake import grants
from promoter.engine.intake.bundles import submit_bundle
from promoter.engine.operation import promote, requests, rollback, runner, views
from promoter.engine.operation.rehearsal import rehearse
from promoter.engine.services import Services, build_services
from promoter.errors import PromoterError
from promoter.store.blobs import BlobStore


class InlineRunner(runner.Runner):
    """Runs an attempt in the requesting thread, so a profiler there sees all of it.

    Set as ``services.runner``; ``runner.runner`` picks it up. It does what
    the worker pool's task does: ``promote.run``, a ``PromoterError`` closed as refused.
    """

    def __init__(self, services: Services) -> None:
        super().__init__(services, workers=1)
        self._bench_services = services
        self._done: dict[str, Future[None]] = {}

    def submit(self, ticket: Ticket) -> Future[None]:
        operation_id = ticket.operation_id
        future: Future[None] = Future()
        try:
            try:
                promote.run(self._bench_services, ticket)
            except PromoterError as exc:
                promote.refuse(self._bench_services.db, operation_id, exc)
        except Exception as exc:
            future.set_exception(exc)
        else:
            future.set_result(None)
        self._done[operation_id] = future
        return future

    def future(self, operation_id: str) -> Future[None] | None:
        return self._done.get(operation_id)


@dataclass
class Prepared:
    """A copy with a fresh state directory, grant, lease, blobs and a verified bundle."""

    services: Services
    bundle_id: str
    receipt_sha256: str
    verify_seconds: float


def blobs_of(workload: Workload) -> list[bytes]:
    unique = {s: None for step in workload.steps for s in (step.old, step.new) if s is not None}
    return list(unique)


def make_blob_template(work: Path, workload: Workload) -> tuple[Path, float, int]:
    """Upload every old and new blob once (timed); states copy the store from here."""
    audit = work / "blob-template" / "audit"
    audit.mkdir(parents=True)
    store = BlobStore(audit)
    blobs = blobs_of(workload)
    started = time.perf_counter()
    for data in blobs:
        store.put(sha256_hex(data), data)
    return audit / "blobs", time.perf_counter() - started, len(blobs)


def prepare_promoter(
    copy: Path,
    state_dir: Path,
    source: Source,
    workload: Workload,
    blob_template: Path,
    *,
    inline: bool = False,
    warm_copy: Path | None = None,
) -> Prepared:
    (state_dir / "audit").mkdir(parents=True)
    copy_repo(blob_template, state_dir / "audit" / "blobs")
    repositories = {REPO_NAME: RepositoryConfig(path=copy)}
    if warm_copy is not None:
        repositories[WARM_REPO_NAME] = RepositoryConfig(path=warm_copy)
    settings = load_settings(state_dir=state_dir, repositories=repositories)
    services = build_services(settings)
    if inline:
        services.runner = InlineRunner(services)
    rehearse(services)  # as ``promoter serve`` does before it serves
    grants.set_lease(services, WORKFLOW, STAGE, lease_document())
    for data in blobs_of(workload):
        digest = sha256_hex(data)
        if not services.blobs.has(digest):
            services.blobs.put(digest, data)
    if warm_copy is not None:
        operation_id = promote_once(
            _submit(services, WARM_REPO_NAME, "grt_bench_warm", source, workload)
        )
        view = views.operation_view(services.db, operation_id)
        if view.status != "completed":
            raise AssertionError(f"the warm-up promotion ended {view.status}")
    return _submit(services, REPO_NAME, "grt_bench", source, workload)


def _submit(
    services: Services, name: str, grant_id: str, source: Source, workload: Workload
) -> Prepared:
    """A grant on repository ``name`` and the workload's bundle under it, verified."""
    repository = services.registry.by_name(name)
    document = grant_document(
        repository.identity,
        source.base_commit,
        source.base_tree,
        max_changes=len(workload.steps) + 10,
        grant_id=grant_id,
    )
    grant, _ = grants.register_grant(services, document)
    assert grant.grant_sha256 is not None
    bundle = bundle_document(document, grant.grant_sha256, step_changes(workload.steps))
    started = time.perf_counter()
    submitted = submit_bundle(services, bundle, run_id=None)
    verified = time.perf_counter() - started
    return Prepared(
        services, submitted.bundle.bundle_id, submitted.receipt.receipt_sha256, verified
    )


def promote_once(prepared: Prepared) -> str:
    """The timed part: request the promotion and wait until its attempt has ended."""
    services = prepared.services
    requested = requests.request_promotion(
        services, prepared.bundle_id, prepared.receipt_sha256, FENCE
    )
    runner.wait_for(services, requested.operation_id, timeout=3600)
    return requested.operation_id


def finish_promoter(prepared: Prepared, operation_id: str) -> None:
    _completed(prepared, operation_id)
    _close(prepared)


def finish_with_rollback(prepared: Prepared, operation_id: str) -> float:
    """``finish_promoter``, the completed promotion first rolled back (timed, in seconds);
    every target must read back restored."""
    _completed(prepared, operation_id)
    try:
        started = time.perf_counter()
        receipt = rollback.rollback(prepared.services, operation_id).document
        seconds = time.perf_counter() - started
    finally:
        _close(prepared)
    reasons = {target["reason"] for target in receipt["targets"]}
    if receipt["status"] != "rolled_back" or reasons != {"restored"}:
        raise AssertionError(f"the rollback ended {receipt['status']}: {sorted(reasons)}")
    return seconds


def _completed(prepared: Prepared, operation_id: str) -> None:
    view = views.operation_view(prepared.services.db, operation_id)
    if view.status != "completed" or not view.events_verified:
        _close(prepared)
        raise AssertionError(
            f"promoter: operation {operation_id} ended {view.status} "
            f"({view.code}: {view.detail})"
        )


def _close(prepared: Prepared) -> None:
    runner.runner(prepared.services).shutdown()
    prepared.services.close()
