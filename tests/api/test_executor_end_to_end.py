"""Executor to source worktree through the real daemon: clone, edit, build, promote.

The oracle for "the source now holds the executor's tree" is plain git run by the test:
``git add -A`` into a throw-away index and object directory, then ``git write-tree``,
so it shares no code with the builder's shadow tree.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import rfc8785
import typer
from typer.testing import CliRunner

from promoter.cli import bundle_cmd, orchestrate_cmd
from promoter.client.sync import PromoterClient
from promoter.domain.models import GrantV1
from promoter.errors import (
    BadRequest,
    ConfigError,
    Forbidden,
    GrantUnknown,
    TargetDrift,
    Unauthenticated,
    VerificationFailed,
)
from promoter.executor import build_bundle, upload_and_submit
from tests.gitutil import commit_all, git, git_env
from tests.support import forkserver
from tests.support.daemon import Daemon
from tests.support.flows import lease_of, make_grant, sha
from tests.support.promotion import built_and_submitted, git_dir_digest, tree_bytes
from tests.support.repos import clone

BINARY = bytes(range(256)) * 8


def tree_of(worktree: Path, scratch: Path) -> str:
    """The tree ``git add -A`` makes of ``worktree``, written to ``scratch``'s objects only.

    Trees of several worktrees written with the same ``scratch`` can be compared with
    ``changed_paths``. The worktree's ``.gitignore`` and ``info/exclude`` apply.
    """
    if not (scratch / "git").is_dir():
        scratch.mkdir(parents=True, exist_ok=True)
        git(scratch, "init", "-q", "--bare", "git")
    objects = scratch / "git" / "objects"
    index = scratch / "index"
    env = {
        **git_env(),
        "GIT_DIR": str(worktree / ".git"),
        "GIT_WORK_TREE": str(worktree),
        "GIT_INDEX_FILE": str(index),
        "GIT_OBJECT_DIRECTORY": str(objects),
    }
    for args in (["add", "-A"], ["write-tree"]):
        done = subprocess.run(
            ["git", "-c", "core.autocrlf=false", *args],
            cwd=worktree,
            env=env,
            capture_output=True,
            check=True,
            timeout=60,
        )
    index.unlink()
    return done.stdout.decode().strip()


def changed_paths(scratch: Path, old: str, new: str) -> list[str]:
    env = {**git_env(), "GIT_DIR": str(scratch / "git")}
    done = subprocess.run(
        ["git", "diff-tree", "-r", "--name-only", "-z", "--no-renames", old, new],
        env=env,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return [p for p in done.stdout.decode().split("\0") if p]


def _prepare_source(repo: Path) -> None:
    files = {
        ".gitignore": (b"*.o\n", 0o644),
        "src/old.txt": (b"old\n", 0o644),
        "bin/tool": (b"#!/bin/sh\necho tool\n", 0o755),
        "bin/plain.sh": (b"#!/bin/sh\necho plain\n", 0o644),
        "data/crlf.txt": (b"a\r\nb\r\n", 0o644),
    }
    for rel, (data, mode) in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
        os.chmod(repo / rel, mode)
    commit_all(repo, "more files")


def _executor_edits(executor: Path) -> None:
    (executor / "src/app.py").write_bytes(b"print('v2')\n")
    (executor / "src/old.txt").unlink()
    (executor / "src/pkg/deep").mkdir(parents=True)
    (executor / "src/pkg/deep/mod.py").write_bytes(b"VALUE = 42\n")
    (executor / "src/pkg/data.bin").write_bytes(BINARY)
    (executor / "src/pkg/empty.txt").write_bytes(b"")
    (executor / "data/crlf.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    os.chmod(executor / "bin/tool", 0o644)  # exec bit cleared
    os.chmod(executor / "bin/plain.sh", 0o755)
    (executor / "scratch.o").write_bytes(b"ignored build output of the executor\n")


def _user_work(repo: Path) -> dict[str, tuple[bytes, int]]:
    """The user's own uncommitted work in the source worktree, which must stay as it is."""
    (repo / "README.md").write_bytes(b"# project\nthe user's uncommitted edit\n")
    os.chmod(repo / "README.md", 0o600)
    (repo / "notes.txt").write_bytes(b"the user's untracked notes\n")
    (repo / "local.o").write_bytes(b"the user's ignored file\n")
    return {p: tree_bytes(repo)[p] for p in ("README.md", "notes.txt", "local.o")}


def _cloned_and_edited(repo: Path, tmp_path: Path) -> Path:
    """The source prepared, cloned at ``executor`` and edited there; the clone."""
    _prepare_source(repo)
    executor = clone(repo, tmp_path / "executor")
    _executor_edits(executor)
    return executor


def test_clone_edit_build_submit_promote_lands_the_executor_tree(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    executor = _cloned_and_edited(repo, tmp_path)
    user = _user_work(repo)
    source_git = git_dir_digest(repo)
    grant = make_grant(repo, identity)
    orchestrator = PromoterClient(daemon.url, daemon.orchestrator_token)
    assert orchestrator.register_grant(grant)["created"] is True
    client = orchestrator.with_token(orchestrator.mint_executor_token("run_1")["token"])

    with build_bundle(executor, GrantV1.model_validate(grant)) as built:
        receipt = upload_and_submit(client, built)
    orchestrator.set_lease("wf_1", "implement", lease_of(grant))
    view = orchestrator.promote(built.bundle_id, receipt.receipt_sha256, 7, wait=True)

    assert view["status"] == "completed", view
    assert [s["path"] for s in view["steps"]] == [c["path"] for c in built.bundle["changes"]]
    scratch = tmp_path / "scratch"
    promoted, wanted = tree_of(repo, scratch), tree_of(executor, scratch)
    assert changed_paths(scratch, wanted, promoted) == ["README.md", "notes.txt"]
    now = tree_bytes(repo)
    assert {p: now[p] for p in user} == user
    assert now["bin/tool"][1] & 0o111 == 0 and now["bin/plain.sh"][1] & 0o100
    assert now["src/pkg/data.bin"][0] == BINARY and now["src/pkg/empty.txt"][0] == b""
    assert "src/old.txt" not in now and "scratch.o" not in now
    assert git_dir_digest(repo) == source_git
    targets = {t["path"]: t for t in _receipt(orchestrator, view["operation_id"])["targets"]}
    assert targets["src/pkg/data.bin"]["sha256"] == sha(BINARY)


def _receipt(client: PromoterClient, operation_id: str) -> dict[str, Any]:
    return dict(json.loads(client.get_receipt(operation_id)))


def test_user_edit_after_build_is_drift_and_nothing_is_written(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    executor = clone(repo, tmp_path / "executor")
    (executor / "src/app.py").write_bytes(b"print('executor')\n")
    (executor / "src/added.py").write_bytes(b"added\n")
    orchestrator, built, receipt = built_and_submitted(daemon, repo, identity, executor)
    (repo / "src/app.py").write_bytes(b"print('the user got there first')\n")
    before = tree_bytes(repo)

    view = orchestrator.promote(built.bundle_id, receipt.receipt_sha256, 7, wait=True)

    assert (view["status"], view["code"]) == ("refused", TargetDrift.code)
    assert tree_bytes(repo) == before


# --- the command line ----------------------------------------------------------------------


def _cli_app() -> typer.Typer:
    app = typer.Typer()
    bundle_cmd.register(app)
    orchestrate_cmd.register(app)
    return app


def test_command_line_flow_from_grant_to_promotion(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    executor = _cloned_and_edited(repo, tmp_path)
    (repo / "notes.txt").write_bytes(b"the user's untracked notes\n")
    app, runner = _cli_app(), CliRunner()
    orch = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.orchestrator_token}
    grant_file, bundle_file = tmp_path / "grant.json", tmp_path / "bundle.json"

    minted = runner.invoke(app, ["token", "mint", "run_cli", "--ttl", "600"], env=orch)
    assert minted.exit_code == 0, minted.output
    token = minted.stdout.splitlines()[0]
    created = runner.invoke(
        app,
        [
            *"grant create --repo work --grant-id grt_cli --run run_cli --workflow wf_cli"
            " --stage build --fence 3 --allow src/**:create,modify,delete --allow bin/*:modify"
            " --allow data/crlf.txt:modify --precondition src/app.py"
            " --precondition src/pkg/deep/mod.py".split(),
            *["--out", str(grant_file)],
        ],
        env=orch,
    )
    assert created.exit_code == 0, created.output
    assert "grant grt_cli registered" in created.stdout
    grant = GrantV1.model_validate_json(grant_file.read_bytes())
    assert [p.path for p in grant.target_preconditions] == ["src/app.py", "src/pkg/deep/mod.py"]
    assert grant.target_preconditions[0].index is not None
    assert grant.target_preconditions[1].old.exists is False
    assert grant.target_preconditions[1].index is None

    executor_env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": token}
    built = runner.invoke(
        app,
        [
            *f"bundle build --worktree {executor} --grant {grant_file} --submit".split(),
            *["--out", str(bundle_file)],
        ],
        env=executor_env,
    )
    assert built.exit_code == 0, built.output
    assert "verification passed" in built.stdout
    assert built.stdout.count("passed") >= 8
    bundle = json.loads(bundle_file.read_bytes())
    assert bundle_file.read_bytes() == rfc8785.dumps(bundle)
    bundle_id = bundle["bundle_id"]
    assert f"bundle {bundle_id}: 8 change(s)" in built.stdout

    leased = runner.invoke(
        app, ["lease", "set", "wf_cli", "build", "--run", "run_cli", "--fence", "3"], env=orch
    )
    assert leased.exit_code == 0, leased.output
    promoted = runner.invoke(app, ["promote", bundle_id, "--wait"], env=orch)
    assert promoted.exit_code == 0, promoted.output
    assert "completed" in promoted.stdout

    scratch = tmp_path / "scratch"
    assert changed_paths(scratch, tree_of(executor, scratch), tree_of(repo, scratch)) == [
        "notes.txt"
    ]


def test_command_line_refuses_outside_the_allowlist_before_uploading(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    executor = clone(repo, tmp_path / "executor")
    (executor / "README.md").write_bytes(b"# not allowed\n")
    grant = make_grant(repo, identity, allow=[{"pattern": "src/**", "operations": ["modify"]}])
    orchestrator = PromoterClient(daemon.url, daemon.orchestrator_token)
    orchestrator.register_grant(grant)
    token = orchestrator.mint_executor_token("run_1")["token"]
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": token}

    result = CliRunner().invoke(
        _cli_app(),
        ["bundle", "build", "--worktree", str(executor), "--grant", "grt_test1", "--submit"],
        env=env,
    )

    assert isinstance(result.exception, VerificationFailed), result.output
    assert "README.md" in result.exception.detail
    assert not [p for p in (daemon.state_dir / "audit" / "blobs").rglob("*") if p.is_file()]


# --- through the installed entry point (needs the lead's wiring in cli/main.py) ----------


def _promoter(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home()), **env}
    return forkserver.run_text(
        [sys.executable, "-m", "promoter.cli.main", *args], env=full_env, timeout=120
    )


@pytest.mark.parametrize("allowed", [True, False], ids=["promoted", "refused_exit_65"])
def test_entry_point_builds_submits_and_promotes(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str, allowed: bool
) -> None:
    executor = clone(repo, tmp_path / "executor")
    (executor / "src/app.py").write_bytes(b"print('from the entry point')\n")
    orch = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.orchestrator_token}
    pattern = "src/*" if allowed else "docs/*"
    token = _promoter("token", "mint", "run_ep", env=orch)
    assert token.returncode == 0, token.stderr
    created = _promoter(
        *"grant create --repo work --grant-id grt_ep --run run_ep --workflow wf_ep --stage s"
        " --allow".split(),
        f"{pattern}:modify",
        env=orch,
    )
    assert created.returncode == 0, created.stderr
    executor_env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": token.stdout.strip()}

    built = _promoter(
        *f"bundle build --worktree {executor} --grant grt_ep --submit --json".split(),
        env=executor_env,
    )

    if not allowed:
        assert built.returncode == VerificationFailed.exit_code, built.stderr
        message = " ".join(built.stderr.split())  # the console wraps long lines
        assert "src/app.py: modify is not allowed by the grant's allowlist" in message
        assert not [p for p in (daemon.state_dir / "audit/blobs").rglob("*") if p.is_file()]
        return
    assert built.returncode == 0, built.stderr
    bundle_id = json.loads(built.stdout)["bundle"]["bundle_id"]
    leased = _promoter(*"lease set wf_ep s --run run_ep --fence 1".split(), env=orch)
    assert leased.returncode == 0, leased.stderr
    promoted = _promoter("promote", bundle_id, "--wait", "--json", env=orch)
    assert promoted.returncode == 0, promoted.stderr
    assert json.loads(promoted.stdout)["status"] == "completed"
    assert (repo / "src/app.py").read_bytes() == b"print('from the entry point')\n"


# --- the client's translation of answers --------------------------------------------------


def test_client_raises_the_error_class_named_by_the_problem_code(daemon: Daemon) -> None:
    with PromoterClient(daemon.url, daemon.orchestrator_token) as client:
        with pytest.raises(GrantUnknown) as caught:
            client.get_grant("grt_nope")
        token = client.mint_executor_token("run_1")["token"]
    assert caught.value.context["grant_id"] == "grt_nope"
    assert caught.value.context["instance"] == "/v1/grants/grt_nope"
    with PromoterClient(daemon.url, "not-a-token") as client, pytest.raises(Unauthenticated):
        client.repositories()
    with PromoterClient(daemon.url, token) as client, pytest.raises(Forbidden):
        client.repositories()
    with PromoterClient(daemon.url, None) as client:
        assert client.healthz() == {"status": "ok"}
        assert client.readyz()["status"] == "ready"


def test_client_names_the_server_it_cannot_reach() -> None:
    with socket.socket() as held:  # bound, never listening: refused, and no one else's
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}"
        with PromoterClient(url, None, timeout=5) as client, pytest.raises(ConfigError) as caught:
            client.healthz()
    assert url in caught.value.detail  # a ConfigError still, for callers that catch one
    assert (caught.value.code, caught.value.exit_code) == ("server_unavailable", 69)


def test_client_never_lets_a_value_reach_another_route() -> None:
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: seen.append(request) or httpx.Response(500))
    with PromoterClient("http://promoter.invalid", "t", transport=transport) as client:
        for bad in ("../keys", "a/b", "", "..", "x y"):
            with pytest.raises(BadRequest):
                client.get_grant(bad)
    assert seen == []


def test_client_calls_the_routes_of_the_spec() -> None:
    seen: list[tuple[str, str, Any]] = []
    envelope = {"payloadType": "t", "payload": "e30=", "signatures": []}

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        seen.append((request.method, str(request.url), body))
        if request.url.path.endswith(".dsse"):
            return httpx.Response(200, json=envelope)
        return httpx.Response(200, json={"snapshots": [], "operations": [], "keys": []})

    op, tree = "op_" + "1" * 32, "2" * 40
    with PromoterClient("http://h", "t", transport=httpx.MockTransport(answer)) as client:
        client.recover(op, 7)
        client.reconcile(op, "abandon", "by hand")
        client.rollback(op)
        client.list_operations(status="refused", repository="work")
        client.preflight("bnd_x", fence=3)
        client.snapshots("work")
        client.capture_snapshot("work", "before")
        client.snapshot_diff("work", tree, tree)
        client.restore_snapshot("work", tree, tree)
        client.keys()
        assert client.receipt_dsse(op).payload == "e30="
        client.rollback_receipt_dsse(op)
        client.verification_dsse("bnd_x")
    assert seen == [
        ("POST", f"http://h/v1/operations/{op}/recover", {"fence": 7}),
        (
            "POST",
            f"http://h/v1/operations/{op}/reconcile",
            {"decision": "abandon", "note": "by hand"},
        ),
        ("POST", f"http://h/v1/operations/{op}/rollback", None),
        ("GET", "http://h/v1/operations?status=refused&repository=work", None),
        ("POST", "http://h/v1/bundles/bnd_x/preflight", {"fence": 3}),
        ("GET", "http://h/v1/repositories/work/snapshots", None),
        ("POST", "http://h/v1/repositories/work/snapshots", {"label": "before"}),
        ("GET", f"http://h/v1/repositories/work/snapshots/diff?from={tree}&to={tree}", None),
        (
            "POST",
            f"http://h/v1/repositories/work/snapshots/{tree}/restore",
            {"expected_current_tree": tree},
        ),
        ("GET", "http://h/v1/keys", None),
        ("GET", f"http://h/v1/operations/{op}/receipt.dsse", None),
        ("GET", f"http://h/v1/operations/{op}/rollback-receipt.dsse", None),
        ("GET", "http://h/v1/bundles/bnd_x/verification.dsse", None),
    ]
