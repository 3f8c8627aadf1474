"""Building grants and bundles for tests, from real repositories.

``make_grant`` and ``make_bundle`` produce wire documents the way an honest executor
would; tests then break them on purpose. Hashing uses promoter's own canonical functions
only where the spec defines the value (ids, projections); expected receipts are compared
by recomputing ``receipt_sha256`` independently with ``hashlib`` + ``rfc8785``.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import rfc8785

from tests.gitutil import git
from tests.support.repos import init_repo as init_repo


def head(repo: Path) -> tuple[str, str]:
    return git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD^{tree}")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ts(delta: timedelta = timedelta()) -> str:
    moment = datetime.now(UTC).replace(microsecond=0) + delta
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def jcs_sha(document: Any) -> str:
    return hashlib.sha256(rfc8785.dumps(document)).hexdigest()


def state(data: bytes | None, mode: str = "100644") -> dict[str, Any]:
    if data is None:
        return {"exists": False, "sha256": None, "mode": None, "bytes": None, "blob_ref": None}
    digest = sha(data)
    return {
        "exists": True,
        "sha256": digest,
        "mode": mode,
        "bytes": len(data),
        "blob_ref": {"path": f"blobs/sha256/{digest[:2]}/{digest}", "sha256": digest},
    }


def make_grant(
    repo: Path,
    repository_identity: str,
    *,
    grant_id: str = "grt_test1",
    run_id: str = "run_1",
    allow: list[dict[str, Any]] | None = None,
    preconditions: list[dict[str, Any]] | None = None,
    fence: int = 7,
    limits: dict[str, int] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    commit, tree = head(repo)
    grant = {
        "schema": "GrantV1",
        "grant_id": grant_id,
        "repository_identity": repository_identity,
        "branch": "refs/heads/main",
        "base_commit": commit,
        "base_tree": tree,
        "executor_run_id": run_id,
        "workflow_id": "wf_1",
        "stage": "implement",
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": fence,
        "not_before": ts(timedelta(minutes=-5)),
        "expires_at": ts(timedelta(hours=1)),
        "write_allowlist": allow
        if allow is not None
        else [{"pattern": "**", "operations": ["create", "modify", "delete"]}],
        "target_preconditions": preconditions or [],
        "limits": limits or {"max_changes": 1000, "max_total_bytes": 1 << 28},
    }
    grant.update(overrides)
    return grant


def make_lease(
    run_id: str = "run_1", *, fence: int = 7, expires_at: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """The lease an orchestrator puts for ``run_id`` (attempt 1, generation 1, resume epoch
    0), expiring in an hour unless ``expires_at`` says when."""
    lease = {
        "run_id": run_id,
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": fence,
        "expires_at": expires_at or ts(timedelta(hours=1)),
    }
    lease.update(overrides)
    return lease


def lease_of(grant: dict[str, Any], fence: int | None = None) -> dict[str, Any]:
    """The lease of ``grant``'s run (its fence unless ``fence``), expiring in an hour."""
    return make_lease(
        grant["executor_run_id"],
        fence=grant["fence"] if fence is None else fence,
        attempt=grant["attempt"],
        generation=grant["generation"],
        resume_epoch=grant["resume_epoch"],
    )


def grant_sha(grant: dict[str, Any]) -> str:
    return jcs_sha({k: v for k, v in grant.items() if k != "grant_sha256"})


def make_bundle(
    grant: dict[str, Any],
    changes: list[tuple[str, bytes | None, bytes | None]] | list[dict[str, Any]],
    *,
    seal: bool = True,
    **overrides: Any,
) -> dict[str, Any]:
    """``changes`` as (path, old bytes or None, new bytes or None) or full Change dicts."""
    wire: list[dict[str, Any]] = []
    for change in changes:
        if isinstance(change, dict):
            wire.append(change)
            continue
        path, old, new = change
        operation = "create" if old is None else ("delete" if new is None else "modify")
        wire.append({"path": path, "operation": operation, "old": state(old), "new": state(new)})
    wire.sort(key=lambda c: wire_bytes(c["path"]))
    bundle: dict[str, Any] = {
        "schema": "PatchBundleV1",
        "bundle_id": "",
        "bundle_sha256": "",
        "grant_id": grant["grant_id"],
        "grant_sha256": grant_sha(grant),
        "executor_run_id": grant["executor_run_id"],
        "repository_identity": grant["repository_identity"],
        "base_commit": grant["base_commit"],
        "base_tree": grant["base_tree"],
        "changes": wire,
        "change_count": len(wire),
        "total_bytes": sum(c["new"]["bytes"] for c in wire if c["new"]["exists"]),
        # a function of the grant, not of the clock: the same call gives the same bundle id
        "created_at": _a_minute_after(grant["not_before"]),
    }
    bundle.update(overrides)
    return seal_bundle(bundle) if seal else bundle


def promotion_body(
    targets: list[dict[str, Any]] | None = None, promoted_at: str = "2026-11-30T21:05:09Z"
) -> dict[str, Any]:
    """An unsealed ``PatchPromotionReceiptV1`` of fixed ids, of ``targets`` (by default
    ``src/app.py`` of sha256 ``66…``), for tests of signing and statements: it names no
    operation a daemon made."""
    app = {"path": "src/app.py", "exists": True, "sha256": "6" * 64, "mode": "100644"}
    return {
        "schema": "PatchPromotionReceiptV1",
        "operation_id": "op_" + "1" * 32,
        "repository_identity": "repo_" + "2" * 32,
        "grant_id": "grt_test1",
        "grant_sha256": "3" * 64,
        "bundle_id": "bnd_" + "4" * 32,
        "bundle_sha256": "4" * 64,
        "verification_receipt_sha256": "5" * 64,
        "targets": [app] if targets is None else targets,
        "events": {
            "decision": "evt_" + "a" * 32,
            "action": "evt_" + "b" * 32,
            "outcome": "evt_" + "c" * 32,
        },
        "promoted_at": promoted_at,
    }


def wire_bytes(path: str) -> bytes:
    """The bytes a wire path names (protocol: documents#byte-paths), decoded independently of
    promoter."""
    return re.sub(
        rb"\\(\\|x[0-9a-f]{2})",
        lambda m: b"\\" if m.group(1) == b"\\" else bytes([int(m.group(1)[1:], 16)]),
        path.encode("utf-8", "surrogatepass"),
    )


def _a_minute_after(moment: str) -> str:
    parsed = datetime.strptime(moment, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (parsed + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def seal_bundle(bundle: dict[str, Any]) -> dict[str, Any]:
    digest = jcs_sha({k: v for k, v in bundle.items() if k not in ("bundle_id", "bundle_sha256")})
    return {**bundle, "bundle_sha256": digest, "bundle_id": "bnd_" + digest[:32]}


def sealed_document(
    changes: list[dict[str, Any]], total_bytes: int | None = None
) -> dict[str, Any]:
    """A sealed PatchBundleV1 document of ``changes`` under fixed grant fields (for parsing
    and encoding tests: it names no registered grant); ``total_bytes`` defaults to the sum
    of the new states' sizes."""
    if total_bytes is None:
        total_bytes = sum(c["new"]["bytes"] or 0 for c in changes)
    return seal_bundle(
        {
            "schema": "PatchBundleV1",
            "bundle_id": "",
            "bundle_sha256": "",
            "grant_id": "grt_1",
            "grant_sha256": "0" * 64,
            "executor_run_id": "run_1",
            "repository_identity": "repo_" + "0" * 32,
            "base_commit": "a" * 40,
            "base_tree": "b" * 40,
            "changes": changes,
            "change_count": len(changes),
            "total_bytes": total_bytes,
            "created_at": "2026-01-01T00:00:00Z",
        }
    )


def upload(client: httpx.Client, *blobs: bytes) -> None:
    for data in blobs:
        answer = client.put(f"/v1/blobs/sha256/{sha(data)}", content=data)
        assert answer.status_code in (200, 201), answer.text
