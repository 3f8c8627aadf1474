"""Refusals before any write: target drift (protocol: promotion#step-read-back) and authority (step
1)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.daemon import Daemon
from tests.support.flows import git, sha, ts
from tests.support.promotion import git_dir_digest, promote, set_lease, submit, tree_bytes

V1 = b"print('v1')\n"
V2 = b"print('v2')\n"
CHANGES = [("src/app.py", V1, V2), ("src/added.py", None, b"new\n")]


def _head_moved(repo: Path) -> None:
    (repo / "other.txt").write_bytes(b"x\n")
    git(repo, "add", "other.txt")
    git(repo, "commit", "-q", "-m", "moved on")


def _branch_switched(repo: Path) -> None:
    git(repo, "switch", "-q", "-c", "feature")


def _detached(repo: Path) -> None:
    git(repo, "switch", "-q", "--detach")


def _path_staged(repo: Path) -> None:
    (repo / "src" / "app.py").write_bytes(b"staged\n")
    git(repo, "add", "src/app.py")
    (repo / "src" / "app.py").write_bytes(V1)


def _new_path_staged(repo: Path) -> None:
    (repo / "src" / "added.py").write_bytes(b"new\n")
    git(repo, "add", "src/added.py")


def _target_edited(repo: Path) -> None:
    (repo / "src" / "app.py").write_bytes(b"user edit\n")


def _target_deleted(repo: Path) -> None:
    (repo / "src" / "app.py").unlink()


def _directory_where_file_was(repo: Path) -> None:
    (repo / "src" / "app.py").unlink()
    (repo / "src" / "app.py").mkdir()
    (repo / "src" / "app.py" / "inner").write_bytes(b"x")


def _file_where_dir_needed(repo: Path) -> None:
    shutil.rmtree(repo / "src")
    (repo / "src").write_bytes(b"now a file\n")


def _symlink_target(repo: Path) -> None:
    (repo / "src" / "app.py").unlink()
    (repo / "src" / "app.py").symlink_to("../README.md")


def _mode_changed(repo: Path) -> None:
    (repo / "src" / "app.py").chmod(0o755)


def _conflict_stage(repo: Path) -> None:
    git(repo, "switch", "-q", "-c", "side")
    (repo / "src" / "app.py").write_bytes(b"side\n")
    git(repo, "commit", "-q", "-am", "side")
    git(repo, "switch", "-q", "main")
    (repo / "src" / "app.py").write_bytes(b"main\n")
    git(repo, "commit", "-q", "-am", "main")
    git(repo, "merge", "-q", "side", check=False)  # the conflict is the point
    (repo / "src" / "app.py").write_bytes(V1)


DRIFTS: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "head_moved": (_head_moved, []),
    "branch_switched": (_branch_switched, []),
    "detached_head": (_detached, []),
    "path_staged": (_path_staged, ["src/app.py"]),
    "new_path_staged": (_new_path_staged, ["src/added.py"]),
    "target_edited": (_target_edited, ["src/app.py"]),
    "target_deleted": (_target_deleted, ["src/app.py"]),
    "directory_where_file_was": (_directory_where_file_was, ["src/app.py"]),
    "file_where_directory_needed": (_file_where_dir_needed, ["src/added.py", "src/app.py"]),
    "symlink_at_target": (_symlink_target, ["src/app.py"]),
    "mode_changed": (_mode_changed, ["src/app.py"]),
    "conflict_stage": (_conflict_stage, ["src/app.py"]),
}


@pytest.mark.parametrize("case", sorted(DRIFTS))
def test_drift_is_refused_with_zero_writes(
    case: str, daemon: Daemon, repo: Path, identity: str
) -> None:
    grant, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    drift, paths = DRIFTS[case]
    drift(repo)
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    with daemon.orchestrator() as orch:
        pre = orch.post(f"/v1/bundles/{bundle['bundle_id']}/preflight", json={"fence": 7}).json()
    answer = promote(daemon, bundle, receipt)
    view = answer.json()
    assert (view["status"], view["code"]) == ("refused", "target_drift")
    assert (pre["status"], pre["code"]) == ("refused", "target_drift")
    report = view["report"]["drift_report"]
    assert report["drifted"] == paths
    assert pre["drifted"] == paths
    if not paths:
        assert not all(item["ok"] for item in report["repository"].values())
    assert tree_bytes(repo) == before
    assert git_dir_digest(repo) == git_before
    assert [e["kind"] for e in view["events"]] == ["decision", "outcome"]
    assert view["events"][0]["payload"]["allowed"] is False


def test_preflight_that_passes_agrees_with_the_promotion(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    before = tree_bytes(repo)
    with daemon.orchestrator() as orch:
        pre = orch.post(f"/v1/bundles/{bundle['bundle_id']}/preflight", json={"fence": 7}).json()
    assert pre["status"] == "passed"
    assert [p["verdict"] for p in pre["paths"]] == ["old", "old"]
    assert tree_bytes(repo) == before
    assert promote(daemon, bundle, receipt).json()["status"] == "completed"


def test_target_already_new_is_confirmed_not_rewritten(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    (repo / "src" / "app.py").write_bytes(V2)
    inode = (repo / "src" / "app.py").stat().st_ino
    assert promote(daemon, bundle, receipt).json()["status"] == "completed"
    assert (repo / "src" / "app.py").stat().st_ino == inode


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("no_lease", "lease_stale"),
        ("fence_mismatch", "lease_stale"),
        ("lease_other_run", "lease_stale"),
        ("lease_fence_below_grant", "lease_stale"),
        ("grant_not_yet_valid", "grant_expired"),
    ],
)
def test_stale_authority_is_refused(
    case: str, code: str, daemon: Daemon, repo: Path, identity: str
) -> None:
    extra = {"not_before": ts(timedelta(minutes=30))} if case == "grant_not_yet_valid" else {}
    grant, bundle, receipt = submit(daemon, repo, identity, CHANGES, lease=False, **extra)
    fence = 7
    if case == "fence_mismatch":
        set_lease(daemon, grant, fence=8)
    elif case == "lease_other_run":
        set_lease(daemon, {**grant, "executor_run_id": "run_other"})
    elif case == "lease_fence_below_grant":
        set_lease(daemon, grant, fence=6)
        fence = 6
    elif case == "grant_not_yet_valid":
        set_lease(daemon, grant)
    before = tree_bytes(repo)
    view = promote(daemon, bundle, receipt, fence=fence).json()
    assert (view["status"], view["code"]) == ("refused", code)
    assert tree_bytes(repo) == before


def test_refused_operation_gets_a_new_attempt_with_the_same_id(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant, bundle, receipt = submit(daemon, repo, identity, CHANGES, lease=False)
    first = promote(daemon, bundle, receipt).json()
    assert (first["status"], first["code"], first["attempt"]) == ("refused", "lease_stale", 1)
    set_lease(daemon, grant)
    second = promote(daemon, bundle, receipt).json()
    assert second["operation_id"] == first["operation_id"]
    assert (second["status"], second["attempt"]) == ("completed", 2)
    assert [a["status"] for a in second["attempts"]] == ["refused", "completed"]
    assert second["events_verified"] is True
    assert (repo / "src" / "app.py").read_bytes() == V2


def test_promotion_naming_another_receipt_is_refused_without_an_operation(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    with daemon.orchestrator() as orch:
        answer = orch.post(
            "/v1/promotions",
            json={
                "bundle_id": bundle["bundle_id"],
                "verification_receipt_sha256": "0" * 64,
                "fence": 7,
            },
        )
        assert (answer.status_code, answer.json()["code"]) == (409, "receipt_conflict")
        unknown = orch.post(
            "/v1/promotions",
            json={
                "bundle_id": "bnd_" + "0" * 32,
                "verification_receipt_sha256": "0" * 64,
                "fence": 7,
            },
        )
        assert (unknown.status_code, unknown.json()["code"]) == (404, "bundle_unknown")
        malformed = orch.post("/v1/promotions", json={"bundle_id": bundle["bundle_id"]})
        assert (malformed.status_code, malformed.json()["code"]) == (422, "validation_failed")
    with daemon.operator() as op:
        assert op.get("/v1/operations").json()["operations"] == []


def _corrupt_blob(daemon: Daemon, data: bytes) -> None:
    digest = sha(data)
    path = daemon.state_dir / "audit" / "blobs" / "sha256" / digest[:2] / digest
    path.chmod(0o644)
    path.write_bytes(b"tampered")
    path.chmod(0o444)


def test_authority_is_checked_before_evidence(daemon: Daemon, repo: Path, identity: str) -> None:
    grant, bundle, receipt = submit(daemon, repo, identity, CHANGES, lease=False)
    _corrupt_blob(daemon, V2)
    before = tree_bytes(repo)
    first = promote(daemon, bundle, receipt).json()
    assert (first["status"], first["code"]) == ("refused", "lease_stale")
    set_lease(daemon, grant)
    second = promote(daemon, bundle, receipt).json()
    assert (second["status"], second["code"]) == ("refused", "verification_failed")
    with daemon.orchestrator() as orch:
        pre = orch.post(f"/v1/bundles/{bundle['bundle_id']}/preflight", json={"fence": 7}).json()
    assert (pre["status"], pre["code"]) == ("refused", "verification_failed")
    assert pre["checks"] == {"authority": {"ok": True}, "evidence": {"ok": False}}
    assert tree_bytes(repo) == before
