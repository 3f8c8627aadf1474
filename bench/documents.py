"""The documents every benchmark hands promoter: a grant, a lease, a bundle, a file state.

One grant shape (every field the benchmarks share; the allowlist's operations, the limits,
the grant id and the workflow chosen per row), the stage's lease, a bundle sealed over
its changes, and ``state_of`` (a file's state from its bytes, ``None`` for missing).
The names every row shares (``REPO_NAME``, ``WARM_REPO_NAME``, ``RUN_ID``, ``WORKFLOW``,
``STAGE``, ``FENCE``) are here. Deliberately not here: registering or submitting them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from bench.workload import Step
from promoter.domain.canonical import rfc3339, sha256_hex, utcnow
from promoter.domain.documents import seal_bundle
from promoter.domain.models import blob_path

REPO_NAME = "bench"
WARM_REPO_NAME = "bench-warm"  # a daemon's earlier promotion, untimed (``prepared``)
FENCE = 7
WORKFLOW, STAGE, RUN_ID = "wf_bench", "implement", "run_bench"
EVERY_OPERATION = ("create", "modify", "delete")


def grant_document(
    identity: str,
    base_commit: str,
    base_tree: str,
    *,
    max_changes: int,
    max_total_bytes: int = 1 << 40,
    operations: Sequence[str] = EVERY_OPERATION,
    grant_id: str = "grt_bench",
    workflow: str = WORKFLOW,
) -> dict[str, Any]:
    """A grant on ``main`` at the base, valid from five minutes ago for two hours."""
    now = utcnow()
    return {
        "schema": "GrantV1",
        "grant_id": grant_id,
        "repository_identity": identity,
        "branch": "refs/heads/main",
        "base_commit": base_commit,
        "base_tree": base_tree,
        "executor_run_id": RUN_ID,
        "workflow_id": workflow,
        "stage": STAGE,
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": FENCE,
        "not_before": rfc3339(now - timedelta(minutes=5)),
        "expires_at": rfc3339(now + timedelta(hours=2)),
        "write_allowlist": [{"pattern": "**", "operations": list(operations)}],
        "target_preconditions": [],
        "limits": {"max_changes": max_changes, "max_total_bytes": max_total_bytes},
    }


def lease_document() -> dict[str, Any]:
    """The stage's lease for the grants above, two hours long."""
    return {
        "run_id": RUN_ID,
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": FENCE,
        "expires_at": rfc3339(utcnow() + timedelta(hours=2)),
    }


def state_of(data: bytes | None) -> dict[str, Any]:
    """The state of a regular file holding ``data`` (``None``: no file)."""
    if data is None:
        return {"exists": False, "sha256": None, "mode": None, "bytes": None, "blob_ref": None}
    return stored_state(sha256_hex(data), len(data))


def stored_state(digest: str, size: int) -> dict[str, Any]:
    """The state of a regular file whose bytes are the stored blob ``digest``."""
    ref = {"path": blob_path(digest), "sha256": digest}
    return {"exists": True, "sha256": digest, "mode": "100644", "bytes": size, "blob_ref": ref}


def bundle_document(
    grant: dict[str, Any], grant_sha256: str, changes: list[dict[str, Any]]
) -> dict[str, Any]:
    """The sealed bundle of ``changes`` (each ``{path, operation, old, new}``) under
    ``grant`` (the document as registered)."""
    return seal_bundle(
        {
            "schema": "PatchBundleV1",
            "bundle_id": "",
            "bundle_sha256": "",
            "grant_id": grant["grant_id"],
            "grant_sha256": grant_sha256,
            "executor_run_id": RUN_ID,
            "repository_identity": grant["repository_identity"],
            "base_commit": grant["base_commit"],
            "base_tree": grant["base_tree"],
            "changes": changes,
            "change_count": len(changes),
            "total_bytes": sum(c["new"]["bytes"] or 0 for c in changes),
            "created_at": rfc3339(utcnow()),
        }
    )


def step_changes(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """The bundle changes of a workload's steps."""
    return [
        {"path": s.path, "operation": s.operation, "old": state_of(s.old), "new": state_of(s.new)}
        for s in steps
    ]
