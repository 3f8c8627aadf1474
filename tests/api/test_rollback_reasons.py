"""Rollback failures say why (protocol: promotion#operation-states, bundles#rollback-receipt) and
``on_write_failure = "rollback"``.

Faults are injected at the fs layer's named points (``PROMOTER_FAULTS``) only while the
rollback runs, so the promotion before it is clean. A target that could not be restored
because of an I/O error is ``failed`` with reason ``io_error`` and its errno, never a
user ``conflict``; nothing restored at all is ``rollback_failed``; a path that exists is
never reported ``exists: false``.
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from promoter import faults
from promoter.engine.operation.rollback import rollback_id
from tests.support.daemon import Daemon, serve_lab
from tests.support.flows import jcs_sha, sha
from tests.support.promotion import completed, git_dir_digest, promote, submit, tree_bytes

FILES = {f"src/f{i}.txt": f"old {i}\n".encode() for i in range(3)}
FILES["docs/guide.md"] = b"# guide\n"
MODIFIES = [(p, d, d.replace(b"old", b"new") + b"!") for p, d in FILES.items()]
NEW = {p: n for p, _, n in MODIFIES}


pytestmark = pytest.mark.repo("lab", FILES)


def _promoted(daemon: Daemon, repo: Path, changes: list[Any]) -> str:
    return completed(daemon, repo, changes)


def _rollback_with(
    daemon: Daemon, op_id: str, monkeypatch: pytest.MonkeyPatch, spec: str | None
) -> dict[str, Any]:
    if spec:
        monkeypatch.setenv(faults.ENV, spec)
        faults.reset()
    try:
        with daemon.operator() as op:
            answer = op.post(f"/v1/operations/{op_id}/rollback")
    finally:
        monkeypatch.delenv(faults.ENV, raising=False)
    assert answer.status_code == 200, answer.text
    assert answer.content == rfc8785.dumps(json.loads(answer.content))
    document: dict[str, Any] = json.loads(answer.content)
    assert document["receipt_sha256"] == jcs_sha(
        {k: v for k, v in document.items() if k != "receipt_sha256"}
    )
    stored = daemon.state_dir / "audit" / "receipts" / "rollback" / f"{op_id}.json"
    assert stored.read_bytes() == answer.content
    return document


def _file(data: bytes) -> dict[str, Any]:
    return {
        "kind": "file",
        "exists": True,
        "sha256": sha(data),
        "mode": "100644",
        "bytes": len(data),
    }


def _status(daemon: Daemon, op_id: str) -> str:
    with daemon.orchestrator() as orch:
        return str(orch.get(f"/v1/operations/{op_id}").json()["status"])


def test_rollback_io_error_is_reported_as_io_error_not_conflict(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id = _promoted(daemon, repo, MODIFIES)
    # the first restore in reverse order (src/f2.txt) fails before its replace
    doc = _rollback_with(daemon, op_id, monkeypatch, "before_replace=EIO@1")
    targets = {t["path"]: t for t in doc["targets"]}
    assert [t["path"] for t in doc["targets"]] == sorted(FILES, key=str.encode, reverse=True)
    failed = targets["src/f2.txt"]
    assert (failed["result"], failed["reason"]) == ("failed", "io_error")
    assert failed["error"]["code"] == "write_failed"
    assert failed["error"]["errno"] == errno.EIO
    assert "Input/output error" in failed["error"]["detail"]
    assert failed["actual"] == _file(NEW["src/f2.txt"])
    for path in ("src/f0.txt", "src/f1.txt", "docs/guide.md"):
        assert targets[path] == {
            "path": path,
            "result": "restored",
            "reason": "restored",
            "error": None,
            "actual": _file(FILES[path]),
        }
    assert doc["status"] == "rollback_partial"
    assert _status(daemon, op_id) == "rollback_partial"
    assert (repo / "src" / "f2.txt").read_bytes() == NEW["src/f2.txt"]
    for path in ("src/f0.txt", "src/f1.txt", "docs/guide.md"):
        assert (repo / path).read_bytes() == FILES[path]
    assert not list(repo.rglob(".promoter-tmp-*"))


def test_rollback_where_nothing_could_be_restored_is_rollback_failed(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id = _promoted(daemon, repo, MODIFIES)
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    doc = _rollback_with(daemon, op_id, monkeypatch, "after_temp_write=ENOSPC@1+")
    assert doc["status"] == "rollback_failed"
    assert {(t["result"], t["reason"]) for t in doc["targets"]} == {("failed", "io_error")}
    assert {t["error"]["errno"] for t in doc["targets"]} == {errno.ENOSPC}
    assert {t["path"]: t["actual"] for t in doc["targets"]} == {p: _file(NEW[p]) for p in FILES}
    assert tree_bytes(repo) == before  # nothing was changed: every target still new
    assert git_dir_digest(repo) == git_before
    assert not list(repo.rglob(".promoter-tmp-*"))
    assert _status(daemon, op_id) == "rollback_failed"
    with daemon.operator() as op:  # final: the same receipt again, never a second run
        again = op.post(f"/v1/operations/{op_id}/rollback")
        assert json.loads(again.content) == doc
        recovered = op.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
        assert (recovered.status_code, recovered.json()["code"]) == (409, "not_recoverable")
    assert tree_bytes(repo) == before


def test_rollback_report_never_says_missing_for_an_existing_file(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id = _promoted(daemon, repo, MODIFIES)
    # the user moves docs/ aside and links it back: docs/guide.md exists through a symlink
    (repo / "docs").rename(repo / "docs-real")
    (repo / "docs").symlink_to("docs-real")
    # and puts a directory where src/f1.txt was
    (repo / "src" / "f1.txt").unlink()
    (repo / "src" / "f1.txt").mkdir()
    (repo / "src" / "f1.txt" / "inside.txt").write_bytes(b"the user's\n")
    doc = _rollback_with(daemon, op_id, monkeypatch, None)
    targets = {t["path"]: t for t in doc["targets"]}
    linked = targets["docs/guide.md"]
    assert (linked["result"], linked["reason"], linked["actual"]) == ("failed", "unsafe", None)
    assert linked["error"]["code"] == "path_unsafe"
    directory = targets["src/f1.txt"]
    assert (directory["result"], directory["reason"], directory["error"]) == (
        "conflict",
        "conflict",
        None,
    )
    assert directory["actual"] == {
        "kind": "directory",
        "exists": True,
        "sha256": None,
        "mode": None,
        "bytes": None,
    }
    for target in doc["targets"]:
        if target["actual"] is not None and not target["actual"]["exists"]:
            assert not (repo / target["path"]).exists() and not (repo / target["path"]).is_symlink()
    assert (repo / "docs-real" / "guide.md").read_bytes() == NEW["docs/guide.md"]
    assert (repo / "src" / "f1.txt" / "inside.txt").read_bytes() == b"the user's\n"
    assert (targets["src/f0.txt"]["result"], targets["src/f2.txt"]["result"]) == (
        "restored",
        "restored",
    )
    assert doc["status"] == "rollback_partial"
    (repo / "docs").unlink()
    shutil.rmtree(repo / "src" / "f1.txt")


def test_write_failure_with_rollback_policy_restores_what_was_written(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    changes = [*MODIFIES, ("src/new/made.txt", None, b"made\n")]
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    for daemon in serve_lab(tmp_path, repo, on_write_failure="rollback"):
        identity = daemon.services.registry.by_name("lab").identity
        _, bundle, receipt = submit(daemon, repo, identity, changes)
        monkeypatch.setenv(faults.ENV, "after_replace=EIO@3")  # the third replace fails
        faults.reset()
        view = promote(daemon, bundle, receipt).json()
        monkeypatch.delenv(faults.ENV)
        assert view["status"] == "rolled_back", view
        op_id = view["operation_id"]
        assert tree_bytes(repo) == before
        assert git_dir_digest(repo) == git_before
        assert not (repo / "src" / "new").exists()
        assert not list(repo.rglob(".promoter-tmp-*"))
        stored = daemon.state_dir / "audit" / "receipts" / "rollback" / f"{op_id}.json"
        doc = json.loads(stored.read_bytes())
        assert doc["status"] == "rolled_back"
        results = {t["path"]: t["result"] for t in doc["targets"]}
        # bundle order: docs/guide.md, src/f0.txt, src/f1.txt (failed after it landed), ...
        assert results == {
            "docs/guide.md": "restored",
            "src/f0.txt": "restored",
            "src/f1.txt": "restored",
            "src/f2.txt": "already_old",
            "src/new/made.txt": "already_old",
        }
        assert {t["path"]: t["actual"] for t in doc["targets"]}["src/new/made.txt"] == {
            "kind": "missing",
            "exists": False,
            "sha256": None,
            "mode": None,
            "bytes": None,
        }
        assert doc["removed_directories"] == ["src/new"]
        outcomes = [e["payload"] for e in view["events"] if e["kind"] == "outcome"]
        assert [o["status"] for o in outcomes] == ["needs_reconciliation", "rolled_back"]
        assert outcomes[0]["code"] == "write_failed"
        with daemon.orchestrator() as orch:
            receipt_answer = orch.get(f"/v1/operations/{op_id}/receipt")
        assert (receipt_answer.status_code, receipt_answer.json()["code"]) == (
            404,
            "receipt_unavailable",
        )


def test_write_failure_with_the_default_hold_policy_still_needs_reconciliation(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = daemon.services.registry.by_name("lab").identity
    _, bundle, receipt = submit(daemon, repo, identity, MODIFIES)
    monkeypatch.setenv(faults.ENV, "after_replace=EIO@3")
    faults.reset()
    view = promote(daemon, bundle, receipt).json()
    monkeypatch.delenv(faults.ENV)
    assert (view["status"], view["code"]) == ("needs_reconciliation", "write_failed")
    assert not (daemon.state_dir / "audit" / "receipts" / "rollback").exists()
    assert (repo / "src" / "f1.txt").read_bytes() == NEW["src/f1.txt"]


def test_rollback_stopped_by_an_io_error_is_left_for_recovery_then_finishes(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id = _promoted(daemon, repo, MODIFIES)
    child = rollback_id(op_id)
    monkeypatch.setenv(faults.ENV, "rollback_after_step=EIO@2")
    faults.reset()
    with daemon.operator() as op:
        stopped = op.post(f"/v1/operations/{op_id}/rollback")
    monkeypatch.delenv(faults.ENV)
    assert (stopped.status_code, stopped.json()["code"]) == (503, "write_failed")
    assert _status(daemon, child) == "needs_recovery"
    assert _status(daemon, op_id) == "completed"
    assert not (daemon.state_dir / "audit" / "receipts" / "rollback").exists()
    with daemon.orchestrator() as orch:  # a rollback is the operator's to recover
        forbidden = orch.post(f"/v1/operations/{child}/recover", json={"fence": 0})
    assert (forbidden.status_code, forbidden.json()["code"]) == (403, "forbidden")
    with daemon.operator() as op:
        done = op.post(f"/v1/operations/{child}/recover", json={"fence": 0})
        assert done.json()["status"] == "rolled_back", done.json()
        receipt = json.loads(op.post(f"/v1/operations/{op_id}/rollback").content)
    assert receipt["status"] == "rolled_back"
    assert [t["reason"] for t in receipt["targets"]] == ["restored"] * len(MODIFIES)
    assert tree_bytes(repo) == {p: (d, 0o644) for p, d in FILES.items()}
    assert _status(daemon, op_id) == "rolled_back"
