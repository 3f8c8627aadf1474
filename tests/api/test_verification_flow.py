"""The executor's verification flow through a real server (protocol: bundles#verification-receipt,
api#http-errors)."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest

from promoter.engine.intake import bundles
from tests.support.daemon import Daemon
from tests.support.flows import grant_sha, jcs_sha, make_bundle, make_grant, sha, upload

CHECKS = [
    "manifest_integrity",
    "blob_integrity",
    "grant_binding",
    "path_policy",
    "limits",
    "allowlist",
    "preconditions",
]


def test_executor_flow_gives_a_passed_receipt_that_recomputes(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = make_grant(repo, identity)
    with daemon.orchestrator() as orch:
        answer = orch.post("/v1/grants", json=grant)
        assert answer.status_code == 201, answer.text
        assert answer.json() == {"grant_id": "grt_test1", "grant_sha256": grant_sha(grant)}
        assert orch.post("/v1/grants", json=grant).status_code == 200

    new_app = b"print('v2')\r\n"
    new_file = b"\x00\x01binary\xff"
    bundle = make_bundle(
        grant,
        [("src/app.py", b"print('v1')\n", new_app), ("src/new/data.bin", None, new_file)],
    )
    with daemon.executor("run_1") as ex:
        missing = ex.post("/v1/blobs:missing", json={"sha256": [sha(new_app), sha(new_file)]})
        assert missing.json() == {"missing": [sha(new_app), sha(new_file)]}
        upload(ex, new_app, new_file, b"print('v1')\n")
        missing = ex.post("/v1/blobs:missing", json={"sha256": [sha(new_app), sha(new_file)]})
        assert missing.json() == {"missing": []}

        answer = ex.post("/v1/bundles", json=bundle)
        assert answer.status_code == 201, answer.text
        body = answer.json()
        receipt = body["verification_receipt"]
        assert body["bundle_id"] == bundle["bundle_id"]
        assert receipt["status"] == "passed"
        assert [c["name"] for c in receipt["checks"]] == CHECKS
        assert all(c["status"] == "passed" and c["detail"] == "" for c in receipt["checks"])
        projection = {k: v for k, v in receipt.items() if k != "receipt_sha256"}
        assert receipt["receipt_sha256"] == jcs_sha(projection)
        assert receipt["grant_sha256"] == grant_sha(grant)

        again = ex.post("/v1/bundles", json=bundle)
        assert again.status_code == 200
        assert again.json()["verification_receipt"] == receipt

        stored = ex.get(f"/v1/bundles/{bundle['bundle_id']}/verification")
        assert stored.status_code == 200
        assert (
            stored.content
            == json.dumps(
                receipt, separators=(",", ":"), sort_keys=True, ensure_ascii=False
            ).encode()
        )
        fetched = ex.get(f"/v1/bundles/{bundle['bundle_id']}")
        assert json.loads(fetched.content) == bundle

    audit = daemon.state_dir / "audit"
    stored_blob = audit / "blobs" / "sha256" / sha(new_file)[:2] / sha(new_file)
    assert stored_blob.read_bytes() == new_file
    assert stored_blob.stat().st_mode & 0o777 == 0o444
    assert (audit / "grants" / "grt_test1.json").read_bytes() == _jcs(
        {**grant, "grant_sha256": grant_sha(grant)}
    )


def _jcs(document: object) -> bytes:
    import rfc8785

    return rfc8785.dumps(document)


def test_failed_receipt_lists_every_failed_check_then_passes_after_upload(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = make_grant(repo, identity, allow=[{"pattern": "src/**", "operations": ["modify"]}])
    with daemon.orchestrator() as orch:
        assert orch.post("/v1/grants", json=grant).status_code == 201
    new = b"new contents\n"
    bundle = make_bundle(grant, [("README.md", b"# project\n", new)])
    with daemon.executor("run_1") as ex:
        answer = ex.post("/v1/bundles", json=bundle)
        assert answer.status_code == 422
        problem = answer.json()
        assert answer.headers["content-type"] == "application/problem+json"
        assert problem["code"] == "blob_missing"
        assert problem["failed_checks"] == ["blob_integrity", "allowlist"]
        receipt = problem["verification_receipt"]
        assert receipt["status"] == "failed"
        assert [c["status"] for c in receipt["checks"]] == [
            "passed",
            "failed",
            "passed",
            "passed",
            "passed",
            "failed",
            "passed",
        ]
        assert ex.get(f"/v1/bundles/{bundle['bundle_id']}").status_code == 404
        assert ex.get(f"/v1/bundles/{bundle['bundle_id']}/verification").json() == receipt
    assert not (daemon.state_dir / "audit" / "bundles" / f"{bundle['bundle_id']}.json").exists()


def test_a_submission_is_verified_with_the_collector_paused_and_resumes_it(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    verify_bundle = bundles.verify_bundle

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return verify_bundle(*args, **kwargs)

    monkeypatch.setattr(bundles, "verify_bundle", watched)
    grant = make_grant(repo, identity)
    with daemon.orchestrator() as orch:
        assert orch.post("/v1/grants", json=grant).status_code == 201
    new = b"paused\n"
    bundle = make_bundle(grant, [("src/app.py", b"print('v1')\n", new)])
    with daemon.executor("run_1") as ex:
        failed = ex.post("/v1/bundles", json=bundle)
        assert (failed.status_code, failed.json()["code"]) == (422, "blob_missing")
        assert gc.isenabled()  # a refused submission resumes collection too
        upload(ex, new, b"print('v1')\n")
        passed = ex.post("/v1/bundles", json=bundle)
        assert passed.status_code == 201, passed.text
        assert passed.json()["verification_receipt"]["status"] == "passed"
    assert seen == [False, False]
    assert gc.isenabled()
