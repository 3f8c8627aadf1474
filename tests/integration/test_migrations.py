"""Migration 0003 moves the event ids a receipt names from the report JSON into columns."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa
from alembic import command

from promoter.store.db import alembic_config, make_engine, upgrade


def test_event_ids_move_from_the_report_into_columns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url), "0002")
    engine = make_engine(url)
    events = {"decision": "evt_" + "1" * 32, "action": "evt_" + "2" * 32}
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO operations (operation_id, kind, repository_identity, "
                "repository_name, status, attempt, report, created_at, updated_at) VALUES "
                "(:id, 'promotion', :repo, 'demo', 'needs_recovery', 1, :report, 'now', 'now')"
            ),
            {"id": "op_" + "a" * 32, "repo": "repo_" + "0" * 32, "report": None},
        )
        connection.execute(
            sa.text(
                "INSERT INTO operations (operation_id, kind, repository_identity, "
                "repository_name, status, attempt, report, created_at, updated_at) VALUES "
                "(:id, 'promotion', :repo, 'demo', 'needs_recovery', 1, :report, 'now', 'now')"
            ),
            {
                "id": "op_" + "b" * 32,
                "repo": "repo_" + "0" * 32,
                "report": json.dumps({"events": events}),
            },
        )
    engine.dispose()
    upgrade(url)
    engine = make_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text(
                "SELECT operation_id, decision_event_id, action_event_id, outcome_event_id "
                "FROM operations ORDER BY operation_id"
            )
        ).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [
        ("op_" + "a" * 32, None, None, None),
        ("op_" + "b" * 32, events["decision"], events["action"], None),
    ]
