"""Driving a whole promotion through the API in tests."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from promoter.client.sync import PromoterClient
from promoter.domain.models import GrantV1, PatchVerificationReceiptV1
from promoter.executor import build_bundle, upload_and_submit
from promoter.executor.builder import BuiltBundle
from tests.support.daemon import Daemon
from tests.support.flows import lease_of, make_bundle, make_grant, make_lease, upload


def tree_bytes(root: Path, *, skip_git: bool = True) -> dict[str, tuple[bytes, int]]:
    """Every file below ``root`` with its bytes and permission bits (links as targets)."""
    out: dict[str, tuple[bytes, int]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if skip_git and (rel == ".git" or rel.startswith(".git/")):
            continue
        if path.is_symlink():
            out[rel] = (str(path.readlink()).encode(), -1)
        elif path.is_file():
            out[rel] = (path.read_bytes(), path.stat().st_mode & 0o7777)
    return out


def git_dir_digest(repo: Path) -> dict[str, str]:
    """sha256 of every file under ``.git`` except promoter's own lock file."""
    git_dir = repo / ".git"
    return {
        p.relative_to(git_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(git_dir.rglob("*"))
        if p.is_file() and p.name != "promoter.lock"
    }


def set_lease(daemon: Daemon, grant: dict[str, Any], fence: int | None = None) -> None:
    lease = lease_of(grant, fence)
    with daemon.orchestrator() as orch:
        answer = orch.put(f"/v1/leases/{grant['workflow_id']}/{grant['stage']}", json=lease)
        assert answer.status_code == 200, answer.text


def register_grant(daemon: Daemon, repo: Path, identity: str, **fields: Any) -> dict[str, Any]:
    """A grant for ``repo`` (``make_grant`` with ``fields``) registered; the grant."""
    grant = make_grant(repo, identity, **fields)
    with daemon.orchestrator() as orch:
        answer = orch.post("/v1/grants", json=grant)
        assert answer.status_code in (200, 201), answer.text
    return grant


def built_and_submitted(
    daemon: Daemon, repo: Path, identity: str, executor: Path
) -> tuple[PromoterClient, BuiltBundle, PatchVerificationReceiptV1]:
    """The tree at ``executor`` built into a bundle for a new grant on ``repo`` and
    submitted with promoter's own client library, the grant's lease set; the
    orchestrator's client, the built bundle and its verification receipt."""
    grant = make_grant(repo, identity)
    orchestrator = PromoterClient(daemon.url, daemon.orchestrator_token)
    orchestrator.register_grant(grant)
    client = orchestrator.with_token(orchestrator.mint_executor_token("run_1")["token"])
    with build_bundle(executor, GrantV1.model_validate(grant)) as built:
        receipt = upload_and_submit(client, built)
    set_lease(daemon, grant)
    return orchestrator, built, receipt


def leased_clients(
    daemon: Daemon, run_id: str, fence: int = 7
) -> tuple[PromoterClient, PromoterClient]:
    """promoter's client library for ``daemon``: the orchestrator's, having put the lease
    of ``run_id`` (``wf_1``/``implement`` at ``fence``), and an executor's for that run."""
    orchestrator = PromoterClient(daemon.url, daemon.orchestrator_token)
    orchestrator.set_lease("wf_1", "implement", make_lease(run_id, fence=fence))
    return orchestrator, orchestrator.with_token(orchestrator.mint_executor_token(run_id)["token"])


def submit(
    daemon: Daemon,
    repo: Path,
    identity: str,
    changes: list[Any],
    *,
    grant_id: str = "grt_test1",
    lease: bool = True,
    **grant_overrides: Any,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Register a grant, upload blobs, submit the bundle; returns (grant, bundle, receipt)."""
    grant = register_grant(daemon, repo, identity, grant_id=grant_id, **grant_overrides)
    bundle = make_bundle(grant, changes)
    blobs = [c[i] for c in changes if isinstance(c, tuple) for i in (1, 2) if c[i] is not None]
    with daemon.executor(grant["executor_run_id"]) as ex:
        upload(ex, *blobs)
        answer = ex.post("/v1/bundles", json=bundle)
        assert answer.status_code in (200, 201), answer.text
        receipt = answer.json()["verification_receipt"]
    if lease:
        set_lease(daemon, grant)
    return grant, bundle, receipt


def promote(
    daemon: Daemon,
    bundle: dict[str, Any],
    receipt: dict[str, Any],
    fence: int = 7,
    wait: bool = True,
) -> Any:
    with daemon.orchestrator() as orch:
        return orch.post(
            "/v1/promotions",
            json={
                "bundle_id": bundle["bundle_id"],
                "verification_receipt_sha256": receipt["receipt_sha256"],
                "fence": fence,
                "wait": wait,
            },
        )


def completed(
    daemon: Daemon, repo: Path, changes: list[Any], *, name: str | None = None, **grant: Any
) -> str:
    """``changes`` promoted through the API into ``repo`` (registered as ``name``, by
    default its directory's name), which must complete; the operation's id."""
    identity = daemon.services.registry.by_name(name or repo.name).identity
    _, bundle, receipt = submit(daemon, repo, identity, changes, **grant)
    view = promote(daemon, bundle, receipt).json()
    assert view["status"] == "completed", view
    return str(view["operation_id"])


def operation_view(daemon: Daemon, operation_id: str) -> dict[str, Any]:
    """``GET /v1/operations/{id}`` with the operator token, which must answer 200."""
    with daemon.operator() as op:
        answer = op.get(f"/v1/operations/{operation_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def operation_receipt(
    daemon: Daemon, operation_id: str, role: Literal["orchestrator", "operator"] = "orchestrator"
) -> dict[str, Any]:
    """``GET /v1/operations/{id}/receipt`` with ``role``'s token, which must answer 200."""
    with daemon.client(daemon.services.tokens[role]) as client:
        answer = client.get(f"/v1/operations/{operation_id}/receipt")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def unchanged(view: dict[str, Any]) -> tuple[Any, ...]:
    """What a refused request must leave as it was: status, attempts, steps, events."""
    return (view["status"], view["attempts"], view["steps"], view["events"])
