"""The statements a 1-file flow in one request runs through a session, and the ORM's part in them.

A statement on a mapped class's attributes goes through the ORM's execution (its compile
state, its row loading) even where it selects plain columns; the same statement on the
table's own columns is the same SQL without that part (about half of a hot read's cost).
Through the real server (the daemon in this process), a one-request flow is watched from
the request's worker threads and the promotion's own: every statement the ORM takes part
in would be a load of a row the journal holds (the operation, its attempt: ``Session.get``),
and since a new promotion's rows, its plan and its completion are plain statements, the
ORM takes part in none: every read is plain Core, seen by the engine, not the session.
So a hot read or write on the mapped class again says so here.

The same flow's statements are counted by the promotion's phase (``bench.statements``
lists them: ``python -m bench.statements``) and pinned, so a statement added to the hot
path, or one cut, says so here; the counts are of statements, never of time.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session
from starlette.routing import Match

from bench.statements import OUTSIDE, watch
from promoter.api import phases
from promoter.api.app import create_app
from promoter.config import load_settings
from tests.api.test_promotion_with_evidence import _executor_token, _grant, _post, body
from tests.support.daemon import running_daemon
from tests.support.flows import make_bundle

ONE, TWO = b"one\n", b"two\n"
Changes = list[tuple[str, bytes | None, bytes | None]]
# a 1-file flow in one request, by the phase each statement is sent in (the phases as
# ``promoter.api.phases`` closes them: the plan's journal is in ``writes``). SQLite:
# verification: the token, the blobs' row (one insert skipping a recorded digest, after
# the pragma of an unflushed commit), the bundle's row (one insert skipping a recorded
# id), its pins, the verification, its envelope; lock_wait: the approval setting, the
# epoch, the operation looked for, its row and attempt, the lease, the feed row;
# writes: the pragma of a durable commit, the epoch, the lease, the operation, the
# steps cleared and added, the chain's end, two events, the plan's events on the row
# (returning what the feed copies), the feed row, the epoch twice more; receipt: the
# outcome made on what the plan recorded (no read), its commit (the epoch, the operation
# and the chain's end, checked, the event, the steps, the envelope, the row, the attempt,
# the bundle, the feed row); answer: the view (operation, steps, events, folders,
# attempts). PostgreSQL: no pragma; the feed's advisory lock in each of the three
# commits with feed rows, and the epoch's shared advisory lock before each of its five reads
STATEMENTS = {"verification": 7, "lock_wait": 7, "writes": 13, "receipt": 10, "answer": 5}
STATEMENTS_POSTGRESQL = {
    "verification": 6,
    "lock_wait": 9,
    "writes": 16,
    "receipt": 12,
    "answer": 5,
}


def _create(path: str, data: bytes) -> Changes:
    return [(path, None, data)]


def _flow_thread() -> bool:
    name = threading.current_thread().name
    return name.startswith(("AnyIO worker", "promoter-op"))


def test_a_one_request_flow_reads_on_core_the_orm_loads_only_held_rows(
    tmp_path: Path, repo: Path
) -> None:
    seen: list[tuple[str, Any, bool]] = []
    sent: list[str] = []
    watching = threading.Event()

    def sending(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if watching.is_set() and _flow_thread():
            sent.append(statement.lstrip().split(" ", 1)[0].upper())

    def executed(state: ORMExecuteState) -> None:
        if not watching.is_set() or not _flow_thread():
            return
        entity = None
        if state.is_select and state.is_orm_statement:
            entity = state.statement.column_descriptions[0].get("entity")  # type: ignore[attr-defined]
        kind = "select" if state.is_select else "write"
        seen.append((kind, entity, state.is_orm_statement))

    with running_daemon(tmp_path / "state", {"demo": repo}) as daemon:
        with daemon.orchestrator() as orch:
            identity = orch.get("/v1/repositories").json()["repositories"][0]["repository_identity"]
        grant = _grant(daemon, repo, identity)
        executor = _executor_token(daemon, "run_1")
        first = _post(daemon, body(make_bundle(grant, _create("one.txt", ONE)), ONE), executor)
        assert first.json()["operation"]["status"] == "completed", first.text
        engine = daemon.services.db.engine
        event.listen(Session, "do_orm_execute", executed)
        event.listen(engine, "before_cursor_execute", sending)
        try:
            watching.set()
            second = make_bundle(grant, _create("two.txt", TWO))
            answer = _post(daemon, body(second, TWO), executor)
            watching.clear()
        finally:
            event.remove(engine, "before_cursor_execute", sending)
            event.remove(Session, "do_orm_execute", executed)
        assert answer.json()["operation"]["status"] == "completed", answer.text
    orm = [(kind, entity) for kind, entity, is_orm in seen if is_orm]
    # the engine saw the hot reads (the lease, the chain, ...), the ORM none of them
    assert sent.count("SELECT") >= 10, sent
    assert orm == []  # a new promotion's rows, plan and completion are plain statements too


def test_the_one_request_route_is_matched_first_and_by_nothing_else(tmp_path: Path) -> None:
    """The app's router walks its routes in order: the hot route comes before the other
    routers, so it is found without walking them, and no other route matches its path."""
    app = create_app(load_settings(None, state_dir=tmp_path / "state", repositories={}))
    scope = {"type": "http", "path": "/v1/promotions:withEvidence", "root_path": ""}
    scope.update(method="POST", headers=[], query_string=b"", app=app)
    matched = [
        index
        for index, route in enumerate(app.router.routes)
        if route.matches(dict(scope))[0] is not Match.NONE
    ]
    assert len(matched) == 1 and matched[0] <= 2, matched  # after the documentation's two


def test_a_one_request_flow_runs_a_pinned_number_of_statements_by_phase(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(phases.ENV, "1")  # the phases' clock, read when the app is made
    with running_daemon(tmp_path / "state", {"demo": repo}) as daemon:
        with daemon.orchestrator() as orch:
            identity = orch.get("/v1/repositories").json()["repositories"][0]["repository_identity"]
        grant = _grant(daemon, repo, identity)
        executor = _executor_token(daemon, "run_1")
        first = _post(daemon, body(make_bundle(grant, _create("one.txt", ONE)), ONE), executor)
        assert first.json()["operation"]["status"] == "completed", first.text
        engine = daemon.services.db.engine
        second = make_bundle(grant, _create("two.txt", TWO))
        with watch(engine) as seen:
            answer = _post(daemon, body(second, TWO), executor)
        sqlite = engine.dialect.name == "sqlite"
    assert answer.json()["operation"]["status"] == "completed", answer.text
    mine = [(phase, statement) for phase, _point, statement in seen if phase != OUTSIDE]
    counted = Counter(phase for phase, _ in mine)
    expected = STATEMENTS if sqlite else STATEMENTS_POSTGRESQL
    assert dict(counted) == expected, "\n".join(f"{p}: {s[:120]}" for p, s in mine)
