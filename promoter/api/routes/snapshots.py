"""Shadow snapshots of a repository's worktree, for the operator (SPEC §7, §8).

Thin adapters over ``promoter.engine.snapshots`` and ``promoter.engine.snapshot_restore``:
parse and check the request (repository names, 40-hex tree ids, bodies with no unknown
fields), run the blocking engine call in a worker thread, answer JSON. Errors are the
engine's ``PromoterError`` codes: ``validation_failed`` (422) for malformed input,
``repository_unknown`` and ``not_found`` (404) for unknown repositories and trees,
``snapshot_stale`` (409) when the worktree is not at ``expected_current_tree``,
``path_unsafe`` (409) when the change holds a symlink or gitlink, ``lock_unavailable``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from promoter.api.deps import SMALL_BODY, OperatorDep, ServicesDep, read_json_body
from promoter.api.responses import json_response
from promoter.domain.models import NAME_PATTERN
from promoter.engine import snapshot_restore, snapshots
from promoter.engine.services import Services
from promoter.errors import ValidationFailed

router = APIRouter(prefix="/v1")

TREE_PATTERN = "^[0-9a-f]{40}$"
NameParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=200)]
TreeParam = Annotated[str, Path(pattern=TREE_PATTERN)]


def _body(raw: Any, allowed: dict[str, bool]) -> dict[str, Any]:
    """A JSON object holding only ``allowed`` string fields (``True``: required)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValidationFailed("the body must be a JSON object")
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ValidationFailed(f"unknown fields: {unknown}")
    for name, required in allowed.items():
        if required and name not in raw:
            raise ValidationFailed(f"{name} is required", field=name)
        if name in raw and not isinstance(raw[name], str):
            raise ValidationFailed(f"{name} must be a string", field=name)
    return raw


async def _optional_json(request: Request, services: Services) -> Any:
    """The JSON body (bounded), or ``None`` when the request has an empty body."""
    return await read_json_body(request, services, SMALL_BODY, empty=None)


@router.get("/repositories/{name}/snapshots")
async def list_snapshots(name: NameParam, _: OperatorDep, services: ServicesDep) -> Response:
    items = await run_in_threadpool(
        snapshots.list_snapshots, services, services.registry.by_name(name)
    )
    return json_response({"snapshots": items})


@router.post("/repositories/{name}/snapshots")
async def capture_snapshot(
    name: NameParam, request: Request, _: OperatorDep, services: ServicesDep
) -> Response:
    repository = services.registry.by_name(name)
    body = _body(await _optional_json(request, services), {"label": False})
    result = await run_in_threadpool(snapshots.capture, services, repository, body.get("label", ""))
    return json_response(result, 201)


@router.get("/repositories/{name}/snapshots/diff")
async def diff_snapshots(
    name: NameParam,
    _: OperatorDep,
    services: ServicesDep,
    from_tree: Annotated[str, Query(alias="from", pattern=TREE_PATTERN)],
    to_tree: Annotated[str, Query(alias="to", pattern=TREE_PATTERN)],
) -> Response:
    repository = services.registry.by_name(name)
    result = await run_in_threadpool(snapshots.diff, services, repository, from_tree, to_tree)
    return json_response(result)


@router.post("/repositories/{name}/snapshots/{tree}/restore")
async def restore_snapshot(
    name: NameParam, tree: TreeParam, request: Request, _: OperatorDep, services: ServicesDep
) -> Response:
    repository = services.registry.by_name(name)
    body = _body(await _optional_json(request, services), {"expected_current_tree": True})
    expected = snapshots.tree_id(body["expected_current_tree"], "expected_current_tree")
    result = await run_in_threadpool(snapshot_restore.restore, services, repository, tree, expected)
    return json_response(result)
