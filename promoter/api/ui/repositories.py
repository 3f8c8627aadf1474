"""The console's repositories and snapshots pages, and the snapshot capture and restore.

``/ui/repositories``: each guarded repository with its branch, HEAD, how many paths
``git status`` reports (read-only: ``--no-optional-locks``, so the index is never
refreshed on disk) and its last operations. ``/ui/repositories/{name}/snapshots``: the
timeline (newest first), a diff between any two trees, a capture form and a restore
form per snapshot whose ``expected_current_tree`` is the newest snapshot the page
showed, so a worktree that moved since is refused as ``snapshot_stale`` with a clear
message. Reads go through ``promoter.engine.queries``; the other engine calls are the API
routes' own (``promoter.engine.snapshots.capture``, ``promoter.engine.operation.restore``),
CSRF-checked and operator-only.

Deliberately not here: deciding whether a restore may run (the engine's, under the lock).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from promoter.api.deps import get_services
from promoter.api.ui.diffview import file_blocks
from promoter.api.ui.refusals import Page, shown
from promoter.api.ui.web import answering, form_of, render, secure, session_of
from promoter.api.workers import run_in_threadpool
from promoter.engine import queries
from promoter.engine.operation import restore as snapshot_restore
from promoter.engine.ports import Catalogue, Guarding
from promoter.engine.snapshots import capture as snapshots
from promoter.errors import PromoterError, SnapshotStale

router = APIRouter(prefix="/ui/repositories", include_in_schema=False)
LAST_OPERATIONS = 5
STALE = (
    "The worktree changed since this page was shown: nothing was restored. "
    "Capture a snapshot, review the diff again, then restore."
)


def _overview(services: Catalogue) -> list[dict[str, Any]]:
    found = []
    for repo in services.registry.all():
        rows = queries.list_operations(services.db, repository=repo.identity, limit=LAST_OPERATIONS)
        now = queries.repository_head(repo)
        found.append(
            {
                "name": now.name,
                "identity": now.identity,
                "worktree": now.worktree,
                "branch": now.branch,
                "head": now.head,
                "dirty": queries.dirty_paths(repo),
                "last": [(r.operation_id, r.kind, r.status) for r in rows],
            }
        )
    return found


@router.get("")
@shown()
async def get_repositories(request: Request) -> Response:
    session = await session_of(request)
    if session is None:
        return secure(RedirectResponse("/ui/login", status_code=303))
    repos = await run_in_threadpool(_overview, get_services(request))
    return render("repositories.html", 200, session, repos=repos)


def _timeline(
    services: Guarding, name: str, from_tree: str | None, to_tree: str | None
) -> dict[str, Any]:
    repo = services.registry.by_name(name)
    timeline = list(reversed(snapshots.list_snapshots(services, repo)))
    found: dict[str, Any] = {"name": repo.name, "timeline": timeline, "diff": None}
    if from_tree and to_tree:
        diff = snapshots.diff(services, repo, from_tree, to_tree)
        found["diff"] = {**diff, "blocks": file_blocks(diff["unified_diff"])}
    return found


@router.get("/{name}/snapshots")
@shown()
async def get_snapshots(
    request: Request,
    name: str,
    from_tree: str | None = Query(default=None, alias="from", max_length=64),
    to_tree: str | None = Query(default=None, alias="to", max_length=64),
    message: str | None = Query(default=None, max_length=40),
) -> Response:
    session = await session_of(request)
    if session is None:
        return secure(RedirectResponse("/ui/login", status_code=303))
    services = get_services(request)
    found = await run_in_threadpool(_timeline, services, name, from_tree, to_tree)
    return render(
        "snapshots.html",
        200,
        session,
        from_tree=from_tree or "",
        to_tree=to_tree or "",
        **found,
    )


@router.post("/{name}/snapshots")
@shown()
async def post_capture(request: Request, name: str) -> Response:
    _, form = await form_of(request)
    services = get_services(request)
    label = form.get("label", "")[:200]
    repo = services.registry.by_name(name)
    await run_in_threadpool(snapshots.capture, services, repo, label)
    return secure(RedirectResponse(f"/ui/repositories/{repo.name}/snapshots", status_code=303))


def _stale(request: Request, exc: PromoterError) -> Response:
    """A restore whose page showed an older worktree: what to do next, not the engine's words."""
    return render("error.html", exc.http_status, answering(request), code=exc.code, detail=STALE)


@router.post("/{name}/snapshots/{tree}/restore")
@shown(Page(SnapshotStale, _stale))
async def post_restore(request: Request, name: str, tree: str) -> Response:
    _, form = await form_of(request)
    services = get_services(request)
    repo = services.registry.by_name(name)
    expected = form.get("expected_current_tree", "")
    result = await run_in_threadpool(snapshot_restore.restore, services, repo, tree, expected)
    return secure(RedirectResponse(f"/ui/operations/{result['operation_id']}", status_code=303))
