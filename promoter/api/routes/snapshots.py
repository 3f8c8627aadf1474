"""Shadow snapshots of a repository's worktree, for the operator (protocol: api#routes-and-roles,
snapshots#shadow-repository).

Thin adapters over ``promoter.engine.snapshots.capture`` and ``promoter.engine.operation.restore``:
parse and check the request (repository names, 40-hex tree ids, bodies with no unknown
fields), run the blocking engine call in a worker thread, answer JSON. Errors are the
engine's ``PromoterError`` codes: ``validation_failed`` (422) for malformed input,
``repository_unknown`` and ``not_found`` (404) for unknown repositories and trees,
``snapshot_stale`` (409) when the worktree is not at ``expected_current_tree``,
``path_unsafe`` (409) when the change holds a symlink or gitlink, ``lock_unavailable``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from promoter.api.deps import SMALL_BODY, OperatorDep, OrchestratorDep, Port, read_json_body
from promoter.api.models import TREE_ID, ChangesRequest, RestoreRequest, SnapshotRequest, parse
from promoter.api.openapi import Ok, operation
from promoter.api.params import NameParam, TreeParam
from promoter.api.responses import json_response
from promoter.api.workers import run_in_threadpool
from promoter.domain.views import (
    OperationAccepted,
    Snapshot,
    SnapshotDiff,
    SnapshotList,
    WorktreeChanges,
)
from promoter.engine.operation import restore as snapshot_restore
from promoter.engine.ports import Capturing, Catalogue, Configured, Guarding, StartWatching
from promoter.engine.snapshots import capture as snapshots
from promoter.engine.snapshots import start_watch

router = APIRouter(prefix="/v1")
OPERATOR = ("operator",)
ORCHESTRATOR = ("orchestrator", "operator")
TREE = "6a9fde31bac7" + "0" * 28
SNAPSHOT_EXAMPLE = {"tree": TREE, "label": "before lunch", "captured_at": "2026-11-30T21:05:09Z"}


async def _optional_json(request: Request, services: Configured) -> Any:
    """The JSON body (bounded), or ``None`` when the request has an empty body."""
    return await read_json_body(request, services, SMALL_BODY, empty=None)


@router.get(
    "/repositories/{name}/snapshots",
    response_model=SnapshotList,
    **operation(
        "listSnapshots",
        summary="List shadow snapshots",
        description="Every recorded shadow snapshot of the repository's worktree, oldest first.",
        tags=["operator"],
        roles=OPERATOR,
        errors=["repository_unknown", "git_error"],
        ok={200: Ok("the snapshots", SnapshotList, {"snapshots": [SNAPSHOT_EXAMPLE]})},
    ),
)
async def list_snapshots(name: NameParam, _: OperatorDep, services: Port[Catalogue]) -> Response:
    items = await run_in_threadpool(
        snapshots.list_snapshots, services, services.registry.by_name(name)
    )
    return json_response({"snapshots": items})


@router.post(
    "/repositories/{name}/snapshots",
    response_model=Snapshot,
    **operation(
        "captureSnapshot",
        summary="Capture a shadow snapshot",
        description="Record the worktree as it is now (tracked and untracked files) as a "
        "tree in the shadow repository. The body is optional.",
        tags=["operator"],
        roles=OPERATOR,
        errors=["repository_unknown", "git_error", "path_unsafe", "lock_unavailable"],
        body=SnapshotRequest,
        body_required=False,
        body_example={"label": "before lunch"},
        ok={201: Ok("captured", Snapshot, SNAPSHOT_EXAMPLE)},
    ),
)
async def capture_snapshot(
    name: NameParam, request: Request, _: OperatorDep, services: Port[Capturing]
) -> Response:
    repository = services.registry.by_name(name)
    raw = await _optional_json(request, services)
    body = parse(SnapshotRequest, {} if raw is None else raw)
    result = await run_in_threadpool(snapshots.capture, services, repository, body.label)
    return json_response(result, 201)


@router.get(
    "/repositories/{name}/snapshots/diff",
    response_model=SnapshotDiff,
    **operation(
        "diffSnapshots",
        summary="Compare two snapshot trees",
        description="Added, modified and deleted paths and a unified diff from one tree to "
        "another.",
        tags=["operator"],
        roles=OPERATOR,
        errors=["repository_unknown", "not_found", "git_error"],
        ok={
            200: Ok(
                "the differences",
                SnapshotDiff,
                {
                    "added": [],
                    "modified": ["src/app.py"],
                    "deleted": [],
                    "unified_diff": "--- a/src/app.py\n+++ b/src/app.py\n",
                    "truncated": False,
                },
            )
        },
    ),
)
async def diff_snapshots(
    name: NameParam,
    _: OperatorDep,
    services: Port[Guarding],
    from_tree: Annotated[str, Query(alias="from", pattern=TREE_ID)],
    to_tree: Annotated[str, Query(alias="to", pattern=TREE_ID)],
) -> Response:
    repository = services.registry.by_name(name)
    result = await run_in_threadpool(snapshots.diff, services, repository, from_tree, to_tree)
    return json_response(result)


@router.post(
    "/repositories/{name}/snapshots/{tree}/restore",
    response_model=OperationAccepted,
    **operation(
        "restoreSnapshot",
        summary="Restore the worktree to a snapshot",
        description="Write the snapshot's tree into the worktree as an operation, only while "
        "the worktree is at `expected_current_tree` (else `snapshot_stale`).",
        tags=["operator"],
        roles=OPERATOR,
        errors=[
            "repository_unknown",
            "not_found",
            "snapshot_stale",
            "path_unsafe",
            "lock_unavailable",
            "operation_conflict",
            "not_recoverable",
            "git_error",
            "write_failed",
            "stopped",
            "host_fenced",
            "database_busy",
        ],
        body=RestoreRequest,
        body_example={"expected_current_tree": TREE},
        ok={
            200: Ok(
                "the restore operation",
                OperationAccepted,
                {"operation_id": "op_" + "0" * 32, "status": "completed"},
            )
        },
    ),
)
async def restore_snapshot(
    name: NameParam, tree: TreeParam, request: Request, _: OperatorDep, services: Port[Guarding]
) -> Response:
    repository = services.registry.by_name(name)
    raw = await _optional_json(request, services)
    body = parse(RestoreRequest, {} if raw is None else raw)
    expected = snapshots.tree_id(body.expected_current_tree, "expected_current_tree")
    result = await run_in_threadpool(snapshot_restore.restore, services, repository, tree, expected)
    return json_response(result)


@router.post(
    "/repositories/{name}/changes",
    response_model=WorktreeChanges,
    **operation(
        "worktreeChanges",
        summary="The worktree paths changed since an earlier answer",
        description="What `promoter run` asks before it reads the person's worktree for a "
        "sandbox's start: the daemon syncs with its watch of the worktree (every write "
        "finished before the request is counted), then answers the paths changed since "
        "the position (`generation`, `clock`) of an earlier answer, and the position now. "
        "Each worker process of the daemon has its own watch and generation: `positions` "
        "names every position the asker holds (at most 8, a generation once), and the "
        "worker answers for the one of its generation. `paths` is null (read everything) "
        "on a first ask, no position of the worker's generation (the watch started again: "
        "overflow, a renamed directory, a changed `.gitignore`, a restart), a repository "
        "not watched, or too many paths. Nothing is written in the worktree.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["repository_unknown"],
        body=ChangesRequest,
        body_required=False,
        body_example={
            "positions": [
                {"generation": "9f86d081884c7d65", "clock": 3},
                {"generation": "2c26b46b68ffc68f", "clock": 7},
            ]
        },
        ok={
            200: Ok(
                "the changed paths, or unknown",
                WorktreeChanges,
                {
                    "generation": "9f86d081884c7d65",
                    "clock": 4,
                    "paths": ["src/app.py"],
                    "reason": "",
                },
            )
        },
    ),
)
async def worktree_changes(
    name: NameParam, request: Request, _: OrchestratorDep, services: Port[StartWatching]
) -> Response:
    repository = services.registry.by_name(name)
    raw = await _optional_json(request, services)
    body = parse(ChangesRequest, {} if raw is None else raw)
    answer = await run_in_threadpool(start_watch.changed_since, services, repository, body.held())
    return json_response(answer.wire())
