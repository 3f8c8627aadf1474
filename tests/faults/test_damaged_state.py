"""A damaged state directory: a stored document that no longer parses.

A bundle, grant or receipt under ``<state>/audit/`` that was damaged (or edited by hand)
is refused as ``storage_error`` naming the file, before anything is written; it was an
unexpected error (500), and at start-up with ``auto_recover`` it kept the daemon from
starting at all. Automatic recovery logs what stopped one operation and goes on with
the next, whatever the error.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import httpx
import pytest

from promoter.engine.operation import recover as recover_module
from promoter.engine.operation.recover import auto_recover
from promoter.store import journal
from tests.support.daemon import running_daemon
from tests.support.flows import init_repo
from tests.support.process import DaemonProcess, prepare_promotion
from tests.support.promotion import tree_bytes

pytestmark = pytest.mark.slow

FILES = {"a.txt": b"old a\n", "b.txt": b"old b\n"}
CHANGES: list[tuple[str, bytes | None, bytes | None]] = [
    ("a.txt", b"old a\n", b"new a\n"),
    ("b.txt", b"old b\n", b"new b\n"),
]
DAMAGED = b'{"schema": "PatchBundleV1"}'


def _killed_mid_promotion(tmp_path: Path, repo: Path) -> str:
    """A promotion whose daemon died after its first replace; returns its bundle id."""
    first = DaemonProcess(tmp_path / "state", {"work": repo}, faults="after_replace=kill@1")
    try:
        request = prepare_promotion(first, repo, CHANGES)
        with first.client() as client, contextlib.suppress(httpx.HTTPError):
            client.post("/v1/promotions", json=request)
        assert first.wait_exit() == 137
    finally:
        first.kill()
    return str(request["bundle_id"])


def _messages(daemon: DaemonProcess) -> list[str]:
    """The messages of the daemon's log so far (one JSON object a line)."""
    return [json.loads(line)["message"] for line in daemon.log if line.startswith("{")]


def _overwrite(path: Path, data: bytes) -> None:
    path.chmod(0o644)
    path.write_bytes(data)
    path.chmod(0o444)


def test_a_damaged_stored_bundle_is_a_storage_error_and_the_daemon_still_starts(
    tmp_path: Path,
) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    bundle_id = _killed_mid_promotion(tmp_path, repo)
    stored = tmp_path / "state" / "audit" / "bundles" / f"{bundle_id}.json"
    original = stored.read_bytes()
    _overwrite(stored, DAMAGED)
    after_kill = tree_bytes(repo)
    assert after_kill["a.txt"][0] == b"new a\n" and after_kill["b.txt"][0] == b"old b\n"
    second = DaemonProcess(
        tmp_path / "state", {"work": repo}, extra_env={"PROMOTER_AUTO_RECOVER": "true"}
    )
    try:
        with second.client("operator") as operator:
            [view] = operator.get("/v1/operations").json()["operations"]
        op_id = view["operation_id"]
        assert view["status"] == "needs_recovery"
        detail = (
            f"the stored bundle {bundle_id} is damaged: {stored} no longer parses as a "
            "PatchBundleV1; nothing was changed"
        )
        assert f"automatic recovery of {op_id} failed: {detail}" in _messages(second)
        with second.client() as client:
            refused = client.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
        assert refused.status_code == 507, refused.text
        assert (refused.json()["code"], refused.json()["detail"]) == ("storage_error", detail)
        assert refused.json()["path"] == str(stored)
        assert tree_bytes(repo) == after_kill
        _overwrite(stored, original)
        with second.client() as client:
            done = client.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
        assert done.status_code == 200, done.text
        with second.client("operator") as operator:
            assert operator.get(f"/v1/operations/{op_id}").json()["status"] == "completed"
    finally:
        second.stop()
    assert {p: b for p, (b, _) in tree_bytes(repo).items()} == {
        "a.txt": b"new a\n",
        "b.txt": b"new b\n",
    }


def test_automatic_recovery_goes_on_after_an_unexpected_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    _killed_mid_promotion(tmp_path, repo)
    after_kill = tree_bytes(repo)
    state = tmp_path / "state"
    with running_daemon(state, {"work": repo}) as daemon:  # start-up marks it needs_recovery
        with daemon.services.db.session() as session:
            [row] = journal.operations_with_status(session, "needs_recovery")
        op_id = row.operation_id

        def broken(*_: object, **__: object) -> object:
            raise RuntimeError("a fault of promoter's own")

        with monkeypatch.context() as patched, caplog.at_level(logging.ERROR):
            patched.setattr(recover_module, "recheck_evidence", broken)
            auto_recover(daemon.services, ["op_unknown", op_id])  # neither stops the other
        [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert record.getMessage() == (
            f"automatic recovery of {op_id} stopped by an unexpected error"
        )
        assert record.exc_info is not None and record.exc_info[0] is RuntimeError
        assert tree_bytes(repo) == after_kill
        with daemon.services.db.session() as session:
            assert journal.require(session, op_id).status == "needs_recovery"
        auto_recover(daemon.services, [op_id])  # the fault gone: recovered
        with daemon.services.db.session() as session:
            assert journal.require(session, op_id).status == "completed"
    assert tree_bytes(repo)["b.txt"][0] == b"new b\n"
