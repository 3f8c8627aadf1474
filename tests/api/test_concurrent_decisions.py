"""Two decisions on one operation at once: the later one never overwrites the earlier.

An ``abandon`` reads ``needs_reconciliation`` and pauses at ``abandon_decided`` while a
``continue`` claims the operation and completes it; when the abandon goes on, its write
is checked against the status it decided on (the row, read once, is held for the
transaction: ``promoter.store.journal``), finds the row moved and is refused
(``operation_conflict``: changed by another request while this one was deciding),
nothing of it recorded, on SQLite and on PostgreSQL. The write carries ``WHERE status =
<the status read>`` (the row's status is its version), so even a status read a moment
before the write cannot be overwritten in between: ``tests/contract/test_stale_rows.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from promoter import faults
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo
from tests.support.pause import Pause
from tests.support.promotion import operation_view, promote, submit, tree_bytes

FILES = {f"src/f{i}.txt": f"old {i}\n".encode() for i in range(3)}
CHANGES = [(p, d, d.replace(b"old", b"new")) for p, d in FILES.items()]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[Daemon, Path]]:
    repo = init_repo(tmp_path / "lab", FILES)
    with running_daemon(tmp_path / "state", {"lab": repo}) as daemon:
        yield daemon, repo


def _reconcile(daemon: Daemon, op_id: str, decision: str) -> httpx.Response:
    with daemon.operator() as op:
        return op.post(f"/v1/operations/{op_id}/reconcile", json={"decision": decision})


def test_abandon_racing_a_continue_never_overwrites_its_completion(
    lab: tuple[Daemon, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, repo = lab
    identity = daemon.services.registry.by_name("lab").identity
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    monkeypatch.setenv(faults.ENV, "after_replace=EIO@2")
    faults.reset()
    op_id = promote(daemon, bundle, receipt).json()["operation_id"]
    assert operation_view(daemon, op_id)["status"] == "needs_reconciliation"
    pause = Pause(tmp_path, "abandon_decided")
    monkeypatch.setenv(faults.ENV, pause.spec)
    faults.reset()
    abandoned: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: abandoned.append(_reconcile(daemon, op_id, "abandon")))
    worker.start()
    try:
        pause.reached()  # the abandon has read needs_reconciliation, written nothing
        monkeypatch.delenv(faults.ENV)
        done = _reconcile(daemon, op_id, "continue")
        assert (done.status_code, done.json()["status"]) == (200, "completed"), done.text
    finally:
        pause.release()
        worker.join(60)
    [answer] = abandoned
    problem = answer.json()
    assert (answer.status_code, problem["code"], problem["detail"]) == (
        409,
        "operation_conflict",
        "the operation was changed by another request or host while this one was "
        "deciding; nothing of this request was recorded; look at it again",
    ), answer.text
    view = operation_view(daemon, op_id)
    assert (view["status"], view["code"]) == ("completed", None), view
    assert [e for e in view["events"] if e["kind"] == "outcome"][-1]["payload"]["status"] == (
        "completed"
    )
    assert all(e["payload"].get("status") != "abandoned" for e in view["events"])
    with daemon.operator() as op:
        served = op.get(f"/v1/operations/{op_id}/receipt")
    assert served.status_code == 200
    assert {p: tree_bytes(repo)[p][0] for p, _, _ in CHANGES} == {p: n for p, _, n in CHANGES}
