"""``POST /v1/runs``: a run's grant, lease and executor token in one request.

The one request must refuse what the three separate requests refuse, and a refusal of
any part must leave everything as it was: no grant document, no grant row, no lease
change, no token row. Each refusal case is an attack on that: a lease for another
grant's workflow (or run), a grant that fails validation, a grant id already taken by
other content, a lease fence that moves backwards (refused after the grant's row was
added in the same transaction), a token that would outlive the daemon's bound.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from promoter.client.aio import AsyncPromoterClient
from promoter.client.sync import PromoterClient
from promoter.errors import LeaseFenceRegression
from promoter.store import repo as ledger
from promoter.store.tables import ExecutorTokenRow, GrantRow
from tests.support.daemon import Daemon
from tests.support.flows import grant_sha, make_bundle, make_grant, ts, upload
from tests.support.promotion import promote

V1 = b"print('v1')\n"
V2 = b"print('v2')\n"


def _lease(grant: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    lease = {
        "workflow_id": grant["workflow_id"],
        "stage": grant["stage"],
        "run_id": grant["executor_run_id"],
        "attempt": grant["attempt"],
        "generation": grant["generation"],
        "resume_epoch": grant["resume_epoch"],
        "fence": grant["fence"],
        "expires_at": grant["expires_at"],
    }
    lease.update(overrides)
    return lease


def _open(daemon: Daemon, grant: dict[str, Any], lease: dict[str, Any], ttl: int = 600) -> Any:
    with daemon.orchestrator() as orch:
        return orch.post(
            "/v1/runs", json={"grant": grant, "lease": lease, "token_ttl_seconds": ttl}
        )


def _ledger(daemon: Daemon, grant_id: str) -> tuple[bool, bool, int, Any]:
    """(grant document stored, grant row recorded, token rows, lease of wf_1/implement)."""
    services = daemon.services
    document = services.audit.get("grant", grant_id) is not None
    with services.db.session() as session:
        row = session.get(GrantRow, grant_id) is not None
        tokens = session.scalar(select(func.count()).select_from(ExecutorTokenRow))
        lease = ledger.get_lease(session, "wf_1", "implement")
    return document, row, int(tokens or 0), None if lease is None else lease.wire()


def test_one_request_registers_the_grant_sets_the_lease_and_mints_a_working_token(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = make_grant(repo, identity)
    lease = _lease(grant)
    answer = _open(daemon, grant, lease)
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["grant"] == {"grant_id": "grt_test1", "grant_sha256": grant_sha(grant)}
    assert body["grant_created"] is True
    assert body["lease"] == {**lease, "changed": True}
    token = body["token"]
    assert token["executor_run_id"] == "run_1" and token["token"].startswith("pex_")
    assert _ledger(daemon, "grt_test1") == (
        True,
        True,
        1,
        {k: v for k, v in lease.items() if k not in ("workflow_id", "stage")},
    )
    with daemon.client(token["token"]) as executor:  # the token is the grant's run's
        assert executor.get("/v1/grants/grt_test1").json()["grant_sha256"] == grant_sha(grant)
        upload(executor, V1, V2)
        change: list[tuple[str, bytes | None, bytes | None]] = [("src/app.py", V1, V2)]
        bundle = make_bundle(grant, change)
        submitted = executor.post("/v1/bundles", json=bundle)
        assert submitted.status_code == 201, submitted.text
    receipt = submitted.json()["verification_receipt"]
    done = promote(daemon, bundle, receipt, fence=grant["fence"]).json()
    assert done["status"] == "completed", done  # the lease set by the same request holds
    assert (repo / "src" / "app.py").read_bytes() == V2


def test_the_same_run_again_changes_nothing_but_mints_another_token(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = make_grant(repo, identity)
    first = _open(daemon, grant, _lease(grant)).json()
    again = _open(daemon, grant, _lease(grant))
    assert again.status_code == 201, again.text
    body = again.json()
    assert body["grant"] == first["grant"] and body["grant_created"] is False
    assert body["lease"]["changed"] is False
    assert body["token"]["token"] != first["token"]["token"]
    assert _ledger(daemon, "grt_test1")[:3] == (True, True, 2)


def _other_workflow(grant: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return grant, _lease(grant, workflow_id="wf_other")


def _other_stage(grant: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return grant, _lease(grant, stage="review")


def _other_run(grant: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return grant, _lease(grant, run_id="run_other")


def _wrong_base_tree(grant: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return {**grant, "base_tree": "0" * 40}, _lease(grant)


def _expired_grant(grant: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    bad = {**grant, "not_before": ts(timedelta(hours=-2)), "expires_at": ts(timedelta(hours=-1))}
    return bad, _lease(grant)


def _unknown_field(grant: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return {**grant, "role": "operator"}, _lease(grant)


def _lease_not_rfc3339(grant: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return grant, _lease(grant, expires_at="tomorrow")


REFUSALS = [
    (_other_workflow, 422, "validation_failed"),
    (_other_stage, 422, "validation_failed"),
    (_other_run, 422, "validation_failed"),
    (_wrong_base_tree, 422, "grant_invalid"),
    (_expired_grant, 422, "grant_invalid"),
    (_unknown_field, 422, "validation_failed"),
    (_lease_not_rfc3339, 422, "validation_failed"),
]


@pytest.mark.parametrize(
    ("make", "status", "code"), REFUSALS, ids=lambda v: getattr(v, "__name__", str(v))
)
def test_a_refused_part_registers_no_grant_sets_no_lease_and_mints_no_token(
    daemon: Daemon, repo: Path, identity: str, make: Any, status: int, code: str
) -> None:
    grant, lease = make(make_grant(repo, identity))
    answer = _open(daemon, grant, lease)
    assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text
    assert _ledger(daemon, "grt_test1") == (False, False, 0, None)
    with daemon.orchestrator() as orch:
        assert orch.get("/v1/grants/grt_test1").json()["code"] == "grant_unknown"


def test_a_lease_fence_moving_backwards_undoes_the_grant_row_added_before_it(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = make_grant(repo, identity, fence=3)
    current = _lease(grant, fence=9)
    with daemon.orchestrator() as orch:
        put = orch.put(
            "/v1/leases/wf_1/implement",
            json={k: v for k, v in current.items() if k not in ("workflow_id", "stage")},
        )
        assert put.status_code == 200, put.text
    before = _ledger(daemon, "grt_test1")
    answer = _open(daemon, grant, _lease(grant))
    assert (answer.status_code, answer.json()["code"]) == (409, "lease_fence_regression")
    assert answer.json()["current_fence"] == 9
    assert _ledger(daemon, "grt_test1") == before == (False, False, 0, before[3])
    assert before[3]["fence"] == 9


def test_a_grant_id_taken_by_other_content_sets_no_lease_and_mints_no_token(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    taken = make_grant(repo, identity, fence=1)
    with daemon.orchestrator() as orch:
        assert orch.post("/v1/grants", json=taken).status_code == 201
    grant = make_grant(repo, identity, fence=2)
    answer = _open(daemon, grant, _lease(grant))
    assert (answer.status_code, answer.json()["code"]) == (409, "grant_conflict")
    assert _ledger(daemon, "grt_test1") == (True, True, 0, None)
    assert daemon.services.audit.get("grant", "grt_test1") is not None
    with daemon.orchestrator() as orch:
        assert orch.get("/v1/grants/grt_test1").json()["fence"] == 1


def test_a_token_beyond_the_daemons_bound_is_refused_before_anything_is_written(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = make_grant(repo, identity)
    bound = daemon.services.settings.executor_token_max_ttl
    answer = _open(daemon, grant, _lease(grant), ttl=bound + 1)
    assert (answer.status_code, answer.json()["code"]) == (422, "validation_failed")
    assert _ledger(daemon, "grt_test1") == (False, False, 0, None)


def test_an_executor_cannot_open_a_run_for_itself(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = make_grant(repo, identity)
    with daemon.executor("run_1") as executor:
        answer = executor.post(
            "/v1/runs", json={"grant": grant, "lease": _lease(grant), "token_ttl_seconds": 60}
        )
    assert (answer.status_code, answer.json()["code"]) == (403, "forbidden")
    assert _ledger(daemon, "grt_test1") == (False, False, 1, None)  # the test's own token


def test_the_clients_open_a_run_and_raise_the_refusal_of_a_part(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = make_grant(repo, identity, fence=4)
    lease = {k: v for k, v in _lease(grant).items() if k not in ("workflow_id", "stage")}
    with PromoterClient(daemon.url, daemon.orchestrator_token) as client:
        opened = client.open_run(grant, lease, 120)
        assert opened["grant"]["grant_sha256"] == grant_sha(grant)
        assert opened["lease"]["fence"] == 4 and opened["token"]["executor_run_id"] == "run_1"
        with pytest.raises(LeaseFenceRegression):
            behind = make_grant(repo, identity, grant_id="grt_two", fence=2)
            client.open_run(behind, {**lease, "fence": 2})
    assert _ledger(daemon, "grt_two")[:3] == (False, False, 1)

    async def asynchronous() -> Any:
        async with AsyncPromoterClient(daemon.url, daemon.orchestrator_token) as client:
            return await client.open_run(grant, lease, 120)

    again = asyncio.run(asynchronous())
    assert again.grant.grant_sha256 == grant_sha(grant) and again.grant_created is False
    assert again.lease.changed is False and again.token.token.startswith("pex_")


def test_a_grant_registered_as_sent_is_known_without_reading_it_back(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    from promoter.executor.handover import fetched_grant
    from promoter.executor.run.flow import registered_grant

    grant = make_grant(repo, identity)
    lease = {k: v for k, v in _lease(grant).items() if k not in ("workflow_id", "stage")}
    with PromoterClient(daemon.url, daemon.orchestrator_token) as client:
        opened = client.open_run(grant, lease, 120)
        known = registered_grant(grant, opened["grant"])
        with client.with_token(opened["token"]["token"]) as executor:
            assert known is not None and known == fetched_grant(executor, grant["grant_id"])
    assert known.grant_sha256 == grant_sha(grant)


def test_a_grant_the_host_answers_for_other_bytes_or_the_validator_refuses_is_read_back(
    repo: Path, identity: str
) -> None:
    from promoter.executor.run.flow import registered_grant

    grant = make_grant(repo, identity)
    other = make_grant(repo, identity, fence=8)
    assert (
        registered_grant(grant, {"grant_id": "grt_test1", "grant_sha256": grant_sha(other)}) is None
    )
    refused = {**grant, "fence": -1}  # a negative fence: the validator refuses it
    registered = {"grant_id": "grt_test1", "grant_sha256": grant_sha(refused)}
    assert registered_grant(refused, registered) is None
    assert registered_grant(grant, {"grant_id": "grt_test1"}) is None
