"""``GET /v1/trace``: which promotion receipts wrote a commit's bytes (reads only).

A thin adapter over ``promoter.engine.trace``: the repository by name, one commit (or
``staged=true``: the index against HEAD) and optional paths; the answer lists each path
with its committed sha256 and mode, its verdict and the receipts that wrote exactly
those bytes. Nothing is written to the repository or the journal. The roles are those
that read receipts (orchestrator or operator). Deliberately not here: the matching
(``promoter.engine.trace``) and the CLI's rendering of trailers.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import StringConstraints

from promoter.api.deps import OrchestratorDep, Port
from promoter.api.openapi import Ok, operation
from promoter.api.responses import json_response
from promoter.api.routes.examples import BUNDLE_ID, OP_ID
from promoter.api.workers import run_in_threadpool
from promoter.domain.models import NAME_PATTERN
from promoter.domain.views import TraceReport
from promoter.engine import trace as tracing
from promoter.engine.ports import Provenance
from promoter.errors import ValidationFailed

router = APIRouter(prefix="/v1")
ORCHESTRATOR = ("orchestrator", "operator")
COMMIT = "9f1c2e7a" + "0" * 32
MAX_PATHS = 100  # a query string stays well inside what the HTTP server reads
TracedPath = Annotated[str, StringConstraints(min_length=1, max_length=1024)]


PROMOTION_EXAMPLE = {
    "operation_id": OP_ID,
    "status": "completed",
    "bundle_id": BUNDLE_ID,
    "grant_id": "grt_demo1",
    "executor_run_id": "run_demo1",
    "promoted_at": "2026-12-05T08:00:00Z",
    "receipt_sha256": "5539f0ee" + "0" * 56,
}
TRACE_EXAMPLE = {
    "repository": "demo",
    "commit": COMMIT,
    "parent": "1b2d4f60" + "0" * 32,
    "paths": [
        {
            "path": "src/app.py",
            "change": "M",
            "exists": True,
            "sha256": "a3f5" + "0" * 60,
            "mode": "100644",
            "verdict": "promoted",
            "promotions": [PROMOTION_EXAMPLE],
            "last_promotion": None,
        }
    ],
}


def _trace(
    services: Provenance, repository: str, commit: str | None, staged: bool, paths: list[str]
) -> tracing.Trace:
    repo = services.registry.by_name(repository)
    if staged:
        return tracing.trace_staged(services, repo, paths)
    assert commit is not None
    return tracing.trace_commit(services, repo, commit, paths)


@router.get(
    "/trace",
    response_model=TraceReport,
    **operation(
        "traceCommit",
        summary="Trace a commit to its promotion receipts",
        description="For each path a commit changed against its first parent (or, with "
        "`staged`, the index against HEAD): the committed bytes' sha256 and mode, and the "
        "promotion receipts that wrote exactly those bytes (`promoted`), the last promotion "
        "that wrote the path with other bytes (`changed_after_promotion`), `not_promoted`, "
        "or `untouched` for a `path` asked for that did not change. Reads only.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["repository_unknown", "commit_unknown", "validation_failed", "git_error"],
        ok={200: Ok("the trace", TraceReport, TRACE_EXAMPLE)},
    ),
)
async def get_trace(
    _: OrchestratorDep,
    services: Port[Provenance],
    repository: Annotated[str, Query(pattern=NAME_PATTERN, max_length=200)],
    commit: Annotated[str | None, Query(max_length=200)] = None,
    staged: Annotated[bool, Query()] = False,
    path: Annotated[list[TracedPath] | None, Query(max_length=MAX_PATHS)] = None,
) -> Response:
    if staged == (commit is not None):
        raise ValidationFailed("give either commit or staged=true")
    result = await run_in_threadpool(_trace, services, repository, commit, staged, list(path or []))
    return json_response(result.wire())
