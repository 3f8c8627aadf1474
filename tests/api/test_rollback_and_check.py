"""Rollback of promoter's own bytes and the post-promotion check (protocol: recovery#rollback,
bundles#rollback-receipt).

The seed-001 laboratory paths: a two-file modify rolled back, create+delete rolled back,
a user edit after promotion kept as a conflict, BOM/CRLF/binary restored byte-exact,
modes restored, created directories removed while pre-existing ones stay, a file outside
the operation byte-identical, and the check command passing, failing with hold or
rollback, and timing out.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from promoter.engine.operation import rollback as rollback_module
from tests.support.daemon import Daemon, serve_lab
from tests.support.flows import git, init_repo, jcs_sha, sha
from tests.support.promotion import git_dir_digest, promote, submit, tree_bytes

BOM_CRLF = b"\xef\xbb\xbfline\r\nnext\r\n"
BINARY = bytes(range(255, -1, -1))
FILES = {
    "src/app.py": b"print('v1')\n",
    "src/bom.txt": BOM_CRLF,
    "data/blob.bin": BINARY,
    "keep/existing.txt": b"kept\n",
    "outside.txt": b"not in the bundle\n",
}


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    repo = init_repo(tmp_path / "lab", FILES)
    os.chmod(repo / "src" / "app.py", 0o600)
    return repo


def _identity(daemon: Daemon) -> str:
    return daemon.services.registry.by_name("lab").identity


CHANGES = [
    ("src/app.py", FILES["src/app.py"], b"print('v2')\n"),
    ("src/bom.txt", BOM_CRLF, b"plain\n"),
    ("data/blob.bin", BINARY, None),
    ("keep/new/deep/created.txt", None, b"created\n"),
    ("fresh/new.txt", None, b"new dir\n"),
]


def _rollback(daemon: Daemon, op_id: str) -> Any:
    with daemon.operator() as op:
        return op.post(f"/v1/operations/{op_id}/rollback")


def test_rollback_restores_every_byte_mode_and_removes_created_directories(
    tmp_path: Path, lab: Path
) -> None:
    for daemon in serve_lab(tmp_path, lab):
        before, git_before = tree_bytes(lab), git_dir_digest(lab)
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES)
        view = promote(daemon, bundle, receipt).json()
        assert view["status"] == "completed"
        assert (lab / "keep" / "new" / "deep" / "created.txt").exists()
        answer = _rollback(daemon, view["operation_id"])
        assert answer.status_code == 200, answer.text
        receipt_doc = json.loads(answer.content)
        assert answer.content == rfc8785.dumps(receipt_doc)
        assert receipt_doc["status"] == "rolled_back"
        assert receipt_doc["receipt_sha256"] == jcs_sha(
            {k: v for k, v in receipt_doc.items() if k != "receipt_sha256"}
        )
        ordered = sorted((c[0] for c in CHANGES), key=str.encode, reverse=True)
        assert [t["path"] for t in receipt_doc["targets"]] == ordered
        assert {t["result"] for t in receipt_doc["targets"]} == {"restored"}
        assert receipt_doc["removed_directories"] == ["keep/new/deep", "keep/new", "fresh"]
        assert tree_bytes(lab) == before
        assert git_dir_digest(lab) == git_before
        with daemon.orchestrator() as orch:
            assert (
                orch.get(f"/v1/operations/{view['operation_id']}").json()["status"] == "rolled_back"
            )
        assert _rollback(daemon, view["operation_id"]).content == answer.content


def test_a_rolled_back_promotions_receipt_and_envelope_are_served_as_stored(
    tmp_path: Path, lab: Path
) -> None:
    """A promotion receipt is made once and every later request returns its bytes: a
    rollback adds a rollback receipt, it does not withdraw the promotion's (the row still
    holds it), nor its signed envelope."""
    for daemon in serve_lab(tmp_path, lab):
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES[:1])
        op_id = promote(daemon, bundle, receipt).json()["operation_id"]
        with daemon.orchestrator() as orch:
            before = orch.get(f"/v1/operations/{op_id}/receipt")
            envelope = orch.get(f"/v1/operations/{op_id}/receipt.dsse")
        assert (before.status_code, envelope.status_code) == (200, 200), before.text
        assert _rollback(daemon, op_id).status_code == 200
        with daemon.orchestrator() as orch:
            assert orch.get(f"/v1/operations/{op_id}").json()["status"] == "rolled_back"
            after = orch.get(f"/v1/operations/{op_id}/receipt")
            envelope_after = orch.get(f"/v1/operations/{op_id}/receipt.dsse")
        assert after.status_code == 200, after.text
        assert after.content == before.content
        assert envelope_after.status_code == 200, envelope_after.text
        assert envelope_after.content == envelope.content


def test_user_edit_after_promotion_is_a_conflict_and_keeps_the_users_bytes(
    tmp_path: Path, lab: Path
) -> None:
    for daemon in serve_lab(tmp_path, lab):
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES)
        view = promote(daemon, bundle, receipt).json()
        (lab / "src" / "app.py").write_bytes(b"the user's own edit\n")
        doc = json.loads(_rollback(daemon, view["operation_id"]).content)
        assert doc["status"] == "rollback_partial"
        results = {t["path"]: t for t in doc["targets"]}
        assert results["src/app.py"]["result"] == "conflict"
        assert (results["src/app.py"]["reason"], results["src/app.py"]["error"]) == (
            "conflict",
            None,
        )
        assert results["src/app.py"]["actual"] == {
            "kind": "file",
            "exists": True,
            "sha256": sha(b"the user's own edit\n"),
            "mode": "100644",
            "bytes": 20,
        }
        assert (lab / "src" / "app.py").read_bytes() == b"the user's own edit\n"
        assert (lab / "src" / "bom.txt").read_bytes() == BOM_CRLF
        assert (lab / "data" / "blob.bin").read_bytes() == BINARY
        assert (lab / "outside.txt").read_bytes() == FILES["outside.txt"]


def test_target_already_old_is_left_alone(tmp_path: Path, lab: Path) -> None:
    for daemon in serve_lab(tmp_path, lab):
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES[:1])
        view = promote(daemon, bundle, receipt).json()
        (lab / "src" / "app.py").write_bytes(FILES["src/app.py"])
        doc = json.loads(_rollback(daemon, view["operation_id"]).content)
        assert (doc["status"], doc["targets"][0]["result"]) == ("rolled_back", "already_old")


def test_passing_check_completes(tmp_path: Path, lab: Path) -> None:
    check = ["sh", "-c", 'test "$(cat src/app.py)" = "print(\'v2\')" && echo checked']
    for daemon in serve_lab(tmp_path, lab, check_command=check, check_timeout=60):
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES)
        view = promote(daemon, bundle, receipt).json()
        assert view["status"] == "completed", view
        assert view["report"]["check"]["exit_code"] == 0
        assert view["report"]["check"]["output_tail"] == "checked\n"


def test_failing_check_with_hold_needs_reconciliation(tmp_path: Path, lab: Path) -> None:
    for daemon in serve_lab(tmp_path, lab, check_command=["sh", "-c", "echo broken; exit 3"]):
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES)
        view = promote(daemon, bundle, receipt).json()
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_failed")
        assert view["report"]["check"] == {
            "argv": ["sh", "-c", "echo broken; exit 3"],
            "exit_code": 3,
            "timed_out": False,
            "output_tail": "broken\n",
            "seconds": view["report"]["check"]["seconds"],
            "passed": False,
        }
        assert (lab / "src" / "app.py").read_bytes() == b"print('v2')\n"
        with daemon.orchestrator() as orch:
            assert orch.get(f"/v1/operations/{view['operation_id']}/receipt").status_code == 404
        with daemon.operator() as op:
            answer = op.post(
                f"/v1/operations/{view['operation_id']}/reconcile",
                json={"decision": "rollback", "note": "check failed"},
            )
        assert answer.json()["status"] == "rolled_back"
        assert (lab / "src" / "app.py").read_bytes() == FILES["src/app.py"]


def test_failing_check_with_rollback_restores_every_byte(tmp_path: Path, lab: Path) -> None:
    before = tree_bytes(lab)
    for daemon in serve_lab(tmp_path, lab, check_command=["false"], on_check_failure="rollback"):
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES)
        view = promote(daemon, bundle, receipt).json()
        assert view["status"] == "rolled_back", view
        assert tree_bytes(lab) == before
        rollback_file = (
            daemon.state_dir / "audit" / "receipts" / "rollback" / f"{view['operation_id']}.json"
        )
        assert json.loads(rollback_file.read_bytes())["status"] == "rolled_back"


def test_check_timeout_is_a_failure(tmp_path: Path, lab: Path) -> None:
    for daemon in serve_lab(tmp_path, lab, check_command=["sleep", "30"], check_timeout=0.5):
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES[:1])
        view = promote(daemon, bundle, receipt).json()
        assert view["status"] == "needs_reconciliation"
        assert view["report"]["check"]["timed_out"] is True


def test_reconcile_abandon_closes_and_continue_needs_a_fix(tmp_path: Path, lab: Path) -> None:
    for daemon in serve_lab(tmp_path, lab, check_command=["false"]):
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES[:1])
        view = promote(daemon, bundle, receipt).json()
        with daemon.operator() as op:
            bad = op.post(
                f"/v1/operations/{view['operation_id']}/reconcile", json={"decision": "merge"}
            )
            assert (bad.status_code, bad.json()["code"]) == (422, "validation_failed")
            done = op.post(
                f"/v1/operations/{view['operation_id']}/reconcile",
                json={"decision": "abandon", "note": "kept by hand"},
            )
            assert done.json()["status"] == "abandoned"
            again = op.post(
                f"/v1/operations/{view['operation_id']}/reconcile", json={"decision": "abandon"}
            )
            assert (again.status_code, again.json()["code"]) == (409, "operation_conflict")
        assert (lab / "src" / "app.py").read_bytes() == b"print('v2')\n"


def test_rollback_of_refused_operation_is_a_conflict(tmp_path: Path, lab: Path) -> None:
    for daemon in serve_lab(tmp_path, lab):
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES[:1], lease=False)
        view = promote(daemon, bundle, receipt).json()
        answer = _rollback(daemon, view["operation_id"])
        assert (answer.status_code, answer.json()["code"]) == (409, "operation_conflict")
        git(lab, "status", "--porcelain")


def test_unexpected_fault_in_a_rollback_leaves_it_for_recovery_never_running(
    tmp_path: Path, lab: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Not an I/O error (those were caught already) but any exception: the rollback is
    ``needs_recovery`` with code ``internal``, not ``in_progress`` under a live owner,
    and recovering it finishes the rollback."""
    for daemon in serve_lab(tmp_path, lab):
        before = tree_bytes(lab)
        _, bundle, receipt = submit(daemon, lab, _identity(daemon), CHANGES)
        op_id = promote(daemon, bundle, receipt).json()["operation_id"]

        def broken(*args: object, **kwargs: object) -> object:
            raise RuntimeError("rollback broke")

        with monkeypatch.context() as patch:
            patch.setattr(rollback_module, "_rollback_locked", broken)
            answer = _rollback(daemon, op_id)
        assert (answer.status_code, answer.json()["code"]) == (500, "internal"), answer.text
        child = rollback_module.rollback_id(op_id)
        logged = [r for r in caplog.records if r.getMessage().endswith("stopped unexpectedly")]
        assert [(r.getMessage(), r.exc_info is not None) for r in logged] == [
            (f"rollback {child} stopped unexpectedly", True)
        ]
        with daemon.operator() as op:
            view = op.get(f"/v1/operations/{child}").json()
            assert (view["status"], view["code"], view["detail"]) == (
                "needs_recovery",
                "internal",
                "the rollback stopped: rollback broke",
            ), view
            done = op.post(f"/v1/operations/{child}/recover", json={"fence": 7})
            assert done.json()["status"] == "rolled_back", done.text
        assert tree_bytes(lab) == before
