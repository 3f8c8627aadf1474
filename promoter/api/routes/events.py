"""The watch feed: ``GET /v1/events?after=<cursor>&wait=<seconds>`` (orchestrator).

Answers the ledger's events after the cursor in the feed's order
(``promoter.engine.queries.scan_feed``) as soon as there is at least one that passes the
filters (``repository``, ``status``), or an empty page with the cursor moved past what was
read once ``wait`` ends. The wait is a ``promoter.api.longpoll`` long-poll: bounded, and no
worker thread is held while it waits. Deliberately not here: webhooks, or the operation's own wait
(``GET /v1/operations/{id}?wait=``, in ``promoter.api.routes.operations``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from promoter.api.deps import OrchestratorDep, Port
from promoter.api.longpoll import MAX_WAIT_SECONDS, long_poll
from promoter.api.openapi import Ok, operation
from promoter.api.responses import model_response
from promoter.domain.views import EventFeed, FeedEvent
from promoter.engine import queries
from promoter.engine.ports import Observing

router = APIRouter(prefix="/v1")
PAGE = 500
SCAN_PAGES = 20  # pages of filtered-out events one read scans at most
EXAMPLE = {
    "events": [
        {
            "cursor": "evc_000000000000002a",
            "event_id": "evt_" + "3" * 32,
            "operation_id": "op_df01bd2f8d2ade055f2b18ab3e4824e0",
            "operation_kind": "promotion",
            "repository": "demo",
            "kind": "outcome",
            "status": "completed",
            "code": None,
            "at": "2026-11-30T21:05:12Z",
        }
    ],
    "cursor": "evc_000000000000002a",
}


@router.get(
    "/events",
    response_model=EventFeed,
    **operation(
        "watchEvents",
        summary="Watch the ledger's events",
        description="The events after `after` (an opaque cursor from an earlier answer; "
        "none is the start of the ledger) in the order they were committed, each with its "
        "operation's status and code as of that commit. With `wait`, the answer comes as "
        "soon as there is at least one event, or with none once the wait ends; `repository` "
        "and `status` filter. Save `cursor` to resume, also across restarts.",
        tags=["orchestrator"],
        roles=("orchestrator", "operator"),
        errors=["bad_request", "validation_failed"],
        ok={200: Ok("the events and the cursor to resume after them", EventFeed, EXAMPLE)},
    ),
)
async def get_events(
    _: OrchestratorDep,
    services: Port[Observing],
    after: Annotated[str | None, Query(max_length=40, description="a cursor")] = None,
    wait: Annotated[
        float, Query(ge=0, le=MAX_WAIT_SECONDS, description="seconds to wait for an event")
    ] = 0.0,
    repository: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE)] = 100,
) -> Response:
    read = {"position": queries.feed_position(after)}

    def probe() -> list[FeedEvent] | None:
        scan = queries.scan_feed(
            services.db,
            read["position"],
            limit,
            pages=SCAN_PAGES,
            repository=repository,
            status=status,
        )
        read["position"] = scan.position
        return scan.events  # empty: a long run of filtered-out events, the cursor moved

    events = await long_poll(services, probe, wait)
    cursor = queries.feed_cursor(read["position"])
    return model_response(EventFeed.model_construct(events=events or [], cursor=cursor))
