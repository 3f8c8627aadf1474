"""Promotion through the real server (protocol: promotion#operation-identity,
promotion#operation-states, promotion#host-protocol, promotion#preflight, promotion#safety-rules)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import rfc8785

from promoter import faults
from tests.support.daemon import Daemon
from tests.support.flows import git, jcs_sha, sha
from tests.support.promotion import git_dir_digest, promote, submit, tree_bytes

V1 = b"print('v1')\n"


def test_promotion_writes_exact_bytes_and_touches_nothing_else(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    (repo / "notes.txt").write_bytes(b"user's untracked work\n")
    (repo / "README.md").write_bytes(b"# project\nuser's uncommitted edit\n")
    os.chmod(repo / "README.md", 0o600)
    git_before = git_dir_digest(repo)
    crlf, binary, empty = b"line one\r\nline two\r\n", bytes(range(256)), b""
    changes = [
        ("src/app.py", V1, b"print('v2')\n"),
        ("src/new/deep/data.bin", None, binary),
        ("src/crlf.txt", None, crlf),
        ("src/empty.txt", None, empty),
    ]
    grant, bundle, receipt = submit(daemon, repo, identity, changes)
    before = tree_bytes(repo)

    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert view["status"] == "completed", view
    assert [s["status"] for s in view["steps"]] == ["completed"] * 4
    assert [e["kind"] for e in view["events"]] == ["decision", "action", "outcome"]
    assert view["events_verified"] is True
    assert view["created_directories"] == ["src/new", "src/new/deep"]

    after = tree_bytes(repo)
    assert after["src/app.py"][0] == b"print('v2')\n"
    assert after["src/new/deep/data.bin"][0] == binary
    assert after["src/crlf.txt"][0] == crlf
    assert after["src/empty.txt"][0] == b""
    untouched = {k: v for k, v in before.items() if k not in {c[0] for c in changes}}
    assert {k: after[k] for k in untouched} == untouched
    assert after["README.md"] == (b"# project\nuser's uncommitted edit\n", 0o600)
    assert git_dir_digest(repo) == git_before
    assert not list(repo.rglob(".promoter-tmp-*"))

    expected_id = (
        "op_"
        + jcs_sha(
            {
                "grant_sha256": bundle["grant_sha256"],
                "bundle_sha256": bundle["bundle_sha256"],
                "verification_receipt_sha256": receipt["receipt_sha256"],
                "repository_identity": identity,
            }
        )[:32]
    )
    assert view["operation_id"] == expected_id
    with daemon.orchestrator() as orch:
        raw = orch.get(f"/v1/operations/{expected_id}/receipt")
    assert raw.status_code == 200
    promotion = json.loads(raw.content)
    assert raw.content == rfc8785.dumps(promotion)
    assert promotion["receipt_sha256"] == jcs_sha(
        {k: v for k, v in promotion.items() if k != "receipt_sha256"}
    )
    assert promotion["targets"] == sorted(
        [
            {"path": p, "exists": True, "sha256": sha(new), "mode": "100644"}
            for p, _, new in changes
        ],
        key=lambda t: t["path"].encode(),
    )
    assert promotion["events"] == {e["kind"]: e["event_id"] for e in view["events"]}
    stored = daemon.state_dir / "audit" / "receipts" / "promotion" / f"{expected_id}.json"
    assert stored.read_bytes() == raw.content


def test_same_promotion_again_is_one_operation_and_one_receipt(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, b"v2\n")])
    first = promote(daemon, bundle, receipt).json()
    with daemon.orchestrator() as orch:
        receipt_bytes = orch.get(f"/v1/operations/{first['operation_id']}/receipt").content
    (repo / "src" / "app.py").write_bytes(b"user edits after promotion\n")
    again = promote(daemon, bundle, receipt)
    assert again.status_code == 200
    assert again.json()["operation_id"] == first["operation_id"]
    assert again.json()["status"] == "completed"
    assert again.json()["attempt"] == 1
    assert (repo / "src" / "app.py").read_bytes() == b"user edits after promotion\n"
    with daemon.orchestrator() as orch:
        assert orch.get(f"/v1/operations/{first['operation_id']}/receipt").content == receipt_bytes


def test_delete_and_executable_bit_changes(daemon: Daemon, tmp_path: Path) -> None:
    del tmp_path
    repo = Path(daemon.services.registry.by_name("work").worktree)
    identity = daemon.services.registry.by_name("work").identity
    (repo / "tool.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(repo / "tool.sh", 0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tool")
    os.chmod(repo / "src" / "app.py", 0o640)
    from tests.support.flows import make_bundle, make_grant, state, upload
    from tests.support.promotion import set_lease

    grant = make_grant(repo, identity)
    tool = b"#!/bin/sh\necho hi\n"
    changes = [
        {
            "path": "README.md",
            "operation": "delete",
            "old": state(b"# project\n"),
            "new": state(None),
        },
        {"path": "src/app.py", "operation": "modify", "old": state(V1), "new": state(V1, "100755")},
        {
            "path": "tool.sh",
            "operation": "modify",
            "old": state(tool, "100755"),
            "new": state(tool),
        },
    ]
    with daemon.orchestrator() as orch:
        assert orch.post("/v1/grants", json=grant).status_code == 201
    bundle = make_bundle(grant, changes)
    with daemon.executor("run_1") as ex:
        upload(ex, V1, tool, b"# project\n")
        receipt = ex.post("/v1/bundles", json=bundle).json()["verification_receipt"]
    set_lease(daemon, grant)
    assert promote(daemon, bundle, receipt).json()["status"] == "completed"
    assert not (repo / "README.md").exists()
    assert (repo / "src" / "app.py").stat().st_mode & 0o777 == 0o750
    assert (repo / "tool.sh").stat().st_mode & 0o777 == 0o644
    assert (repo / "src" / "app.py").read_bytes() == V1


def test_an_operation_views_steps_are_the_journal_rows_exactly(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    """The steps are read as plain rows: every column of every row, in seq order, and a
    change made in the same session (not yet flushed) is read as changed."""
    from sqlalchemy import select

    from promoter.store import step_rows
    from promoter.store.tables import StepRow

    changes = [
        ("src/app.py", V1, b"print('v2')\n"),
        ("src/b.txt", None, b"b\n"),
        ("src/a.txt", None, b"a\n"),
    ]
    _, bundle, receipt = submit(daemon, repo, identity, changes)
    view = promote(daemon, bundle, receipt).json()
    assert view["status"] == "completed", view
    operation_id = view["operation_id"]
    with daemon.services.db.session() as session:
        rows = list(
            session.scalars(
                select(StepRow).where(StepRow.operation_id == operation_id).order_by(StepRow.seq)
            )
        )
        expected = [
            (r.seq, r.path, r.operation, r.old_state, r.new_state, r.status, r.temp_name, r.detail)
            for r in rows
        ]
        read = [
            (
                s.seq,
                s.path,
                s.operation,
                s.old_state,
                s.new_state,
                s.status.value,
                s.temp_name,
                s.detail,
            )
            for s in step_rows.steps(session, operation_id)
        ]
        assert read == expected
        assert [r[0] for r in read] == [0, 1, 2]
        assert [r[1] for r in read] == [s["path"] for s in view["steps"]]
        rows[1].status, rows[1].detail = "failed", "changed in this session"
        again = step_rows.steps(session, operation_id)
        assert (again[1].status.value, again[1].detail) == ("failed", "changed in this session")
        session.rollback()
    with daemon.services.db.session() as session:
        assert [s.status.value for s in step_rows.steps(session, operation_id)] == ["completed"] * 3


def test_a_refused_attempt_with_a_journaled_plan_is_replanned_exactly(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 1 journals its plan (steps, a directory) and is refused while staging (an
    injected ENOSPC); attempt 2 replaces the plan: one step per change under attempt 2's
    temp names, the directory once, the event chain continued and verified, the bundle
    promoted."""
    from promoter import faults
    from promoter.domain.paths import temp_name
    from promoter.store import ledger, step_rows
    from promoter.store import repo as store_repo

    changes = [
        ("src/app.py", V1, b"print('v2')\n"),
        ("src/made/one.txt", None, b"one\n"),
        ("src/two.txt", None, b"two\n"),
    ]
    _, bundle, receipt = submit(daemon, repo, identity, changes)
    before = tree_bytes(repo)
    faults.reset()
    monkeypatch.setenv(faults.ENV, "after_temp_write=ENOSPC@1")
    try:
        first = promote(daemon, bundle, receipt).json()
    finally:
        monkeypatch.delenv(faults.ENV)
        faults.reset()
    assert (first["status"], first["code"], first["attempt"]) == ("refused", "write_failed", 1)
    assert tree_bytes(repo) == before
    assert not (repo / "src" / "made").exists()  # the directory made for the plan is gone
    assert not list(repo.rglob(".promoter-tmp-*"))
    operation_id = first["operation_id"]

    def plan(attempt: int, status: str) -> list[tuple[int, str, str, str, str]]:
        operations = ["modify", "create", "create"]
        return [
            (seq, path, operations[seq], temp_name(operation_id, attempt, seq), status)
            for seq, (path, _, _) in enumerate(changes)
        ]

    with daemon.services.db.session() as session:  # the refused attempt's plan, journaled
        steps = step_rows.steps(session, operation_id)
        assert [(s.seq, s.path, s.operation, s.temp_name, s.status.value) for s in steps] == plan(
            1, "pending"
        )
        assert step_rows.created_dirs(session, operation_id) == []

    second = promote(daemon, bundle, receipt).json()
    assert (second["status"], second["code"], second["attempt"]) == ("completed", None, 2)
    assert [a["status"] for a in second["attempts"]] == ["refused", "completed"]
    assert second["created_directories"] == ["src/made"]
    assert [e["kind"] for e in second["events"]] == [
        *("decision", "action", "decision", "outcome"),  # attempt 1: the plan, its refusal
        *("decision", "action", "outcome"),  # attempt 2
    ]
    assert second["events_verified"] is True
    with daemon.services.db.session() as session:
        steps = step_rows.steps(session, operation_id)
        assert [(s.seq, s.path, s.operation, s.temp_name, s.status.value) for s in steps] == plan(
            2, "completed"
        )
        assert step_rows.created_dirs(session, operation_id) == ["src/made"]
        events = ledger.events(session, operation_id)
        assert [e.seq for e in events] == list(range(7))
        assert ledger.verify_chain(events)
        row = store_repo.bundle_row(session, bundle["bundle_id"])
        assert row is not None and row.state == "promoted"
    after = tree_bytes(repo)
    assert [after[p][0] for p, _, _ in changes] == [new for _, _, new in changes]
    assert not list(repo.rglob(".promoter-tmp-*"))


def test_asking_again_for_a_completed_promotion_answers_its_stored_receipt(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    """An existing operation is answered, not accepted again: asked again (without
    waiting), a completed promotion answers 200 with its view and its stored receipt."""
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, b"v2\n")])
    first = promote(daemon, bundle, receipt).json()
    operation_id = first["operation_id"]
    with daemon.orchestrator() as orch:
        stored = orch.get(f"/v1/operations/{operation_id}/receipt").content
    again = promote(daemon, bundle, receipt, wait=False)
    assert again.status_code == 200, again.text
    answer = again.json()
    assert (answer["operation_id"], answer["status"], answer["attempt"]) == (
        operation_id,
        "completed",
        1,
    )
    assert rfc8785.dumps(answer["receipt"]) == stored
    assert "next" not in answer


def test_asking_again_for_a_promotion_that_needs_reconciliation_says_what_to_do(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A promotion that failed closed is not started again by the same request: the answer
    is its status and what to do (an operator reconciles it), and nothing is written."""
    changes = [("src/app.py", V1, b"v2\n"), ("src/b.txt", None, b"b\n")]
    _, bundle, receipt = submit(daemon, repo, identity, changes)
    monkeypatch.setenv(faults.ENV, "after_replace=EIO@2")  # the second replace fails
    faults.reset()
    first = promote(daemon, bundle, receipt).json()
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    assert (first["status"], first["code"]) == ("needs_reconciliation", "write_failed"), first
    operation_id = first["operation_id"]
    on_disk = tree_bytes(repo)
    for wait in (False, True):
        again = promote(daemon, bundle, receipt, wait=wait)
        assert again.status_code == 200, again.text
        answer = again.json()
        assert (answer["operation_id"], answer["status"], answer["attempt"]) == (
            operation_id,
            "needs_reconciliation",
            1,
        )
        assert answer["next"] == (
            f"an operator reconciles it: POST /v1/operations/{operation_id}/reconcile with "
            "continue (after mending the paths its report names), rollback or abandon "
            f"(promoter ops reconcile {operation_id} DECISION)"
        )
        assert "receipt" not in answer
    assert tree_bytes(repo) == on_disk
