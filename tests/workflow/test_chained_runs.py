"""Chained runs from one sandbox: each grant continues from the last completed promotion.

A sandbox clone keeps its edits across three steps; each step's bundle holds only the
edits made since the previous promotion, and the source worktree, with the user's own
uncommitted edits elsewhere, ends exactly as the sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from promoter.client.sync import PromoterClient
from promoter.errors import GrantInvalid, VerificationFailed
from promoter.executor import build_bundle, upload_and_submit
from tests.gitutil import commit_all, git
from tests.support.daemon import Daemon
from tests.support.flows import make_grant
from tests.support.promotion import set_lease, tree_bytes

USER_README = b"# project\nthe user's own uncommitted line\n"


class Sandbox:
    """An executor's clone of the source repository and its clients."""

    def __init__(self, daemon: Daemon, source: Path, path: Path, identity: str) -> None:
        git(path.parent, "clone", "-q", str(source), str(path))
        self.path, self.source, self.identity, self.daemon = path, source, identity, daemon
        self.orch = PromoterClient(daemon.url, daemon.orchestrator_token)
        self.executor = self.orch.with_token(self.orch.mint_executor_token("run_1")["token"])
        self.leased = False

    def grant(self, grant_id: str, base: str | None = None) -> dict[str, Any]:
        extra: dict[str, Any] = {} if base is None else {"base_operation": base}
        grant = make_grant(self.source, self.identity, grant_id=grant_id, **extra)
        self.orch.register_grant(grant)
        if not self.leased:  # one lease for the workflow stage; every grant matches it
            set_lease(self.daemon, grant)
            self.leased = True
        return grant

    def step(self, grant_id: str, base: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Build, submit and promote; returns (bundle, operation view)."""
        self.grant(grant_id, base)
        grant = self.executor.get_grant(grant_id)
        since = self.executor.grant_base(grant_id) if base else None
        with build_bundle(self.path, grant, since=since) as built:
            receipt = upload_and_submit(self.executor, built)
            bundle = built.bundle
        view = self.orch.promote(bundle["bundle_id"], receipt.receipt_sha256, 7, wait=True)
        return bundle, view

    def receipt(self, operation_id: str) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.orch.get_receipt(operation_id))
        return loaded


def _ops(bundle: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["path"], c["operation"]) for c in bundle["changes"]]


@pytest.fixture
def sandbox(tmp_path: Path, daemon: Daemon, repo: Path, identity: str) -> Sandbox:
    return Sandbox(daemon, repo, tmp_path / "sandbox", identity)


def test_three_chained_steps_each_promote_only_their_own_edits(
    sandbox: Sandbox, repo: Path
) -> None:
    (repo / "README.md").write_bytes(USER_README)
    (repo / "notes.txt").write_bytes(b"the user's untracked notes\n")
    box = sandbox.path

    (box / "src" / "app.py").write_bytes(b"print('step 1')\n")
    (box / "src" / "a.py").write_bytes(b"a = 1\n")
    first, op1 = sandbox.step("grt_s1", None)
    assert op1["status"] == "completed", op1
    assert _ops(first) == [("src/a.py", "create"), ("src/app.py", "modify")]
    assert "base_operation" not in sandbox.receipt(op1["operation_id"])

    (box / "src" / "a.py").write_bytes(b"a = 2\n")
    (box / "src" / "b.py").write_bytes(b"b = 1\n")
    second, op2 = sandbox.step("grt_s2", op1["operation_id"])
    assert op2["status"] == "completed", op2
    assert _ops(second) == [("src/a.py", "modify"), ("src/b.py", "create")]
    assert second["changes"][0]["old"] == first["changes"][0]["new"]
    assert sandbox.receipt(op2["operation_id"])["base_operation"] == op1["operation_id"]

    (box / "src" / "app.py").write_bytes(b"print('v1')\n")  # back to the base tree's
    (box / "src" / "b.py").unlink()
    third, op3 = sandbox.step("grt_s3", op2["operation_id"])
    assert op3["status"] == "completed", op3
    assert _ops(third) == [("src/app.py", "modify"), ("src/b.py", "delete")]
    assert third["changes"][0]["old"] == first["changes"][1]["new"]
    assert sandbox.receipt(op3["operation_id"])["base_operation"] == op2["operation_id"]

    source = tree_bytes(repo)
    assert source.pop("README.md")[0] == USER_README
    assert source.pop("notes.txt")[0] == b"the user's untracked notes\n"
    mirror = tree_bytes(box)
    mirror.pop("README.md")
    assert source == mirror
    assert git(repo, "status", "--porcelain") == " M README.md\n?? notes.txt\n?? src/a.py"


def test_a_chained_grant_needs_a_completed_base_at_the_same_head(
    sandbox: Sandbox, repo: Path
) -> None:
    with pytest.raises(GrantInvalid, match="unknown"):
        sandbox.grant("grt_x", "op_" + "0" * 32)
    (sandbox.path / "src" / "app.py").write_bytes(b"print('step 1')\n")
    _, op1 = sandbox.step("grt_s1", None)
    commit_all(repo, "the user commits")
    with pytest.raises(GrantInvalid, match="another HEAD"):
        sandbox.grant("grt_y", op1["operation_id"])


def test_a_rolled_back_base_refuses_the_chained_bundle(sandbox: Sandbox, repo: Path) -> None:
    (sandbox.path / "src" / "app.py").write_bytes(b"print('step 1')\n")
    _, op1 = sandbox.step("grt_s1", None)
    sandbox.grant("grt_s2", op1["operation_id"])
    since = sandbox.executor.grant_base("grt_s2")
    (sandbox.path / "src" / "c.py").write_bytes(b"c = 1\n")
    with sandbox.daemon.operator() as operator:
        rolled = operator.post(f"/v1/operations/{op1['operation_id']}/rollback", json={})
        assert rolled.status_code == 200, rolled.text
    grant = sandbox.executor.get_grant("grt_s2")
    with (
        build_bundle(sandbox.path, grant, since=since) as built,
        pytest.raises(VerificationFailed, match="rolled_back"),
    ):
        upload_and_submit(sandbox.executor, built)
    assert (repo / "src" / "app.py").read_bytes() == b"print('v1')\n"
    assert not (repo / "src" / "c.py").exists()


def test_drift_from_the_base_operation_refuses_the_chained_promotion(
    sandbox: Sandbox, repo: Path
) -> None:
    (sandbox.path / "src" / "app.py").write_bytes(b"print('step 1')\n")
    _, op1 = sandbox.step("grt_s1", None)
    (repo / "src" / "app.py").write_bytes(b"the user's edit after the promotion\n")
    (sandbox.path / "src" / "app.py").write_bytes(b"print('step 2')\n")
    _, op2 = sandbox.step("grt_s2", op1["operation_id"])
    assert op2["status"] == "refused"
    assert op2["code"] == "target_drift"
    assert (repo / "src" / "app.py").read_bytes() == b"the user's edit after the promotion\n"


def test_bundle_build_since_must_name_the_grants_base(sandbox: Sandbox) -> None:
    from promoter.cli.bundle_cmd import chained_base
    from promoter.domain.models import GrantV1

    grant = GrantV1.model_validate(sandbox.grant("grt_plain"))
    with pytest.raises(GrantInvalid, match="chains on no operation"):
        chained_base(grant, "op_" + "1" * 32, sandbox.daemon.url, None)


def test_another_runs_executor_cannot_read_a_grants_base(sandbox: Sandbox) -> None:
    (sandbox.path / "src" / "app.py").write_bytes(b"print('step 1')\n")
    _, op1 = sandbox.step("grt_s1", None)
    sandbox.grant("grt_s2", op1["operation_id"])
    with sandbox.daemon.executor("run_other") as other:
        answer = other.get("/v1/grants/grt_s2/base")
    assert answer.status_code == 403
    assert answer.json()["code"] == "forbidden"
    with sandbox.daemon.orchestrator() as orch:
        base = orch.get("/v1/grants/grt_s2/base").json()
    assert base["base_operation"] == op1["operation_id"]
    assert [s["path"] for s in base["states"]] == ["src/app.py"]
    assert base["states"][0]["state"]["bytes"] == len(b"print('step 1')\n")


def test_a_bundle_built_against_the_base_tree_instead_of_the_chain_is_refused(
    sandbox: Sandbox, repo: Path
) -> None:
    (sandbox.path / "src" / "app.py").write_bytes(b"print('step 1')\n")
    _, op1 = sandbox.step("grt_s1", None)
    sandbox.grant("grt_s2", op1["operation_id"])
    (sandbox.path / "src" / "app.py").write_bytes(b"print('step 2')\n")
    grant = sandbox.executor.get_grant("grt_s2")
    # the old state claims the base tree's content, which the chain already replaced
    with (
        build_bundle(sandbox.path, grant) as built,
        pytest.raises(VerificationFailed, match="base_operation precondition"),
    ):
        upload_and_submit(sandbox.executor, built)
    assert (repo / "src" / "app.py").read_bytes() == b"print('step 1')\n"


@pytest.mark.parametrize("damage", ["deleted", "forged"])
def test_a_chain_reads_its_base_receipt_from_the_row_not_the_audit_copy(
    sandbox: Sandbox, daemon: Daemon, damage: str
) -> None:
    """protocol: storage#receipt-in-outcome-commit: the ledger's row is the receipt's record; the
    audit file is a copy. A base whose copy was deleted or forged (naming no target) still chains, on the row."""
    box = sandbox.path
    (box / "src" / "a.py").write_bytes(b"a = 1\n")
    first, op1 = sandbox.step("grt_s1", None)
    assert op1["status"] == "completed", op1
    copy = daemon.state_dir / "audit" / "receipts" / "promotion" / f"{op1['operation_id']}.json"
    copy.chmod(0o644)
    if damage == "deleted":
        copy.unlink()
    else:
        forged = json.loads(copy.read_bytes())
        forged["targets"] = []
        copy.write_text(json.dumps(forged))
    (box / "src" / "a.py").write_bytes(b"a = 2\n")
    second, op2 = sandbox.step("grt_s2", op1["operation_id"])
    assert op2["status"] == "completed", op2
    assert _ops(second) == [("src/a.py", "modify")]
    assert second["changes"][0]["old"] == first["changes"][0]["new"]
