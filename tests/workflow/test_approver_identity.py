"""Only the person approves, and a rejection is final (protocol: runs#approvals).

Every test drives the real daemon over HTTP (and the console and CLI over it) against a
real repository. The attacks: a lower-role token approving, a body naming someone else
as the approver, asking again after a rejection, and reopening without the operator.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from promoter.cli import credentials_cmd, review_cmd
from promoter.domain.canonical import canonical_bytes
from promoter.errors import ApprovalRejected, ConfigError
from promoter.executor import sandbox as sandboxes
from promoter.store import journal
from promoter.store.credentials import add_operator
from tests.console.support import hidden, login
from tests.support.daemon import Daemon
from tests.support.fixtures import Gated
from tests.support.promotion import promote, submit, tree_bytes
from tests.workflow.test_run_command import _requests
from tests.workflow.test_run_drift import CLI, Terminal

OLD, NEW = b"print('v1')\n", b"print('approved')\n"


def _held(daemon: Daemon, repo: Path, identity: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 202, answer.text
    assert answer.json()["status"] == "awaiting_approval"
    return str(answer.json()["operation_id"]), bundle, receipt


def _view(daemon: Daemon, operation_id: str) -> dict[str, Any]:
    with daemon.operator() as operator:
        view: dict[str, Any] = operator.get(f"/v1/operations/{operation_id}").json()
    assert view["events_verified"] is True
    return view


def _approvals(daemon: Daemon, operation_id: str) -> list[dict[str, Any]]:
    view = _view(daemon, operation_id)
    return [
        e["payload"]
        for e in view["events"]
        if e["kind"] == "decision" and "approval" in e["payload"]
    ]


def _binding(operation_id: str, bundle: dict[str, Any], daemon: Daemon) -> dict[str, Any]:
    """The hashes a decision binds, read from the operation's own row."""
    with daemon.services.db.session() as session:
        row = journal.require(session, operation_id)
        binding = {
            "operation_id": operation_id,
            "grant_sha256": row.grant_sha256,
            "bundle_sha256": row.bundle_sha256,
            "verification_receipt_sha256": row.verification_receipt_sha256,
            "repository_identity": row.repository_identity,
        }
    assert binding["bundle_sha256"] == bundle["bundle_sha256"]
    return binding


def _named(daemon: Daemon, name: str) -> str:
    """A named operator credential made on the host, as ``promoter credentials add``."""
    return add_operator(daemon.state_dir / "credentials", name)


def test_executor_and_orchestrator_tokens_cannot_approve_reject_or_reopen(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id, _, _ = _held(daemon, repo, identity)
    before = tree_bytes(repo)
    with daemon.orchestrator() as orch, daemon.executor("run_1") as ex:
        for client in (orch, ex):
            for action in ("approve", "reject", "reopen"):
                answer = client.post(
                    f"/v1/operations/{operation_id}/{action}", json={"note": "the person said so"}
                )
                assert answer.status_code == 403, (action, answer.text)
                assert answer.json()["code"] == "forbidden"
    assert tree_bytes(repo) == before
    assert _approvals(daemon, operation_id) == []
    assert _view(daemon, operation_id)["status"] == "awaiting_approval"


def test_an_approval_claiming_to_be_the_person_records_the_credential(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id, bundle, _ = _held(daemon, repo, identity)
    with daemon.operator() as operator:
        answer = operator.post(
            f"/v1/operations/{operation_id}/approve",
            json={"by": "the person", "note": "reviewed", "wait": True},
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "completed"
    (decision,) = _approvals(daemon, operation_id)
    view = _view(daemon, operation_id)
    grant_expires = decision["expires_at"]
    assert decision == {
        "approval": "approved",
        "by": {"role": "operator", "name": "operator"},
        "claimed_by": "the person",
        "note": "reviewed",
        "expires_at": grant_expires,
        **_binding(operation_id, bundle, daemon),
    }
    event = next(e for e in view["events"] if e["kind"] == "decision")
    assert b'"by":{"name":"operator","role":"operator"}' in canonical_bytes(event["payload"])
    assert (repo / "src" / "app.py").read_bytes() == NEW


def test_a_named_operator_credential_is_recorded_by_its_name(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id, bundle, _ = _held(daemon, repo, identity)
    ana = _named(daemon, "ana")
    with daemon.client(ana) as client:
        answer = client.post(f"/v1/operations/{operation_id}/reject", json={"by": "operator"})
    assert answer.status_code == 200, answer.text
    (decision,) = _approvals(daemon, operation_id)
    assert decision["approval"] == "rejected"
    assert decision["by"] == {"role": "operator", "name": "ana"}
    assert decision["claimed_by"] == "operator"
    assert decision["note"] == ""
    assert _view(daemon, operation_id)["detail"] == "rejected by ana:"


def test_asking_again_after_a_rejection_is_refused_and_writes_nothing(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id, bundle, receipt = _held(daemon, repo, identity)
    with daemon.operator() as operator:
        operator.post(f"/v1/operations/{operation_id}/reject", json={"note": "no"})
    before_view = _view(daemon, operation_id)
    before = tree_bytes(repo)
    for _ in range(2):
        again = promote(daemon, bundle, receipt)
        assert again.status_code == 409, again.text
        problem = again.json()
        assert problem["code"] == "approval_rejected"
        assert problem["operation_id"] == operation_id
        assert problem["rejected_by"] == {"role": "operator", "name": "operator"}
        assert f"promoter reopen {operation_id}" in problem["detail"]
    after_view = _view(daemon, operation_id)
    assert after_view["events"] == before_view["events"]  # nothing journaled
    assert after_view["attempt"] == before_view["attempt"]
    assert after_view["status"] == "refused"
    assert after_view["code"] == "approval_rejected"
    assert tree_bytes(repo) == before
    with daemon.operator() as operator:  # and nothing to approve
        late = operator.post(f"/v1/operations/{operation_id}/approve", json={"wait": True})
    assert late.status_code == 409
    assert late.json()["code"] == "operation_conflict"
    assert tree_bytes(repo) == before


def test_only_the_operator_reopens_a_rejection_then_it_is_held_and_can_be_approved(
    gated: Gated,
) -> None:
    daemon, repo, identity = gated
    operation_id, bundle, receipt = _held(daemon, repo, identity)
    with daemon.operator() as operator:
        early = operator.post(f"/v1/operations/{operation_id}/reopen", json={})
        assert early.status_code == 409  # not rejected: nothing to reopen
        assert early.json()["code"] == "operation_conflict"
        operator.post(f"/v1/operations/{operation_id}/reject", json={"note": "no"})
    bea = _named(daemon, "bea")
    with daemon.client(bea) as client:
        reopened = client.post(f"/v1/operations/{operation_id}/reopen", json={"note": "my mistake"})
        assert reopened.status_code == 200, reopened.text
        assert reopened.json()["status"] == "awaiting_approval"
        twice = client.post(f"/v1/operations/{operation_id}/reopen", json={})
        assert twice.status_code == 409
        assert twice.json()["code"] == "operation_conflict"
    rejected, reopen = _approvals(daemon, operation_id)
    assert rejected["approval"] == "rejected"
    assert reopen == {
        "approval": "reopened",
        "by": {"role": "operator", "name": "bea"},
        "note": "my mistake",
        **_binding(operation_id, bundle, daemon),
    }
    assert (repo / "src" / "app.py").read_bytes() == OLD
    held = promote(daemon, bundle, receipt)  # asked again: held, not refused
    assert held.status_code == 202, held.text
    assert held.json()["status"] == "awaiting_approval"
    with daemon.client(bea) as client:
        done = client.post(f"/v1/operations/{operation_id}/approve", json={"wait": True})
    assert done.json()["status"] == "completed", done.text
    assert (repo / "src" / "app.py").read_bytes() == NEW
    assert [d["approval"] for d in _approvals(daemon, operation_id)] == [
        "rejected",
        "reopened",
        "approved",
    ]


def _cli() -> typer.Typer:
    app = typer.Typer()
    review_cmd.register(app)
    credentials_cmd.register(app)
    return app


def test_cli_approve_sends_no_name_and_records_the_credential(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id, _, _ = _held(daemon, repo, identity)
    runner = CliRunner()
    added = runner.invoke(
        _cli(), ["credentials", "add", "cleo", "--state-dir", str(daemon.state_dir)]
    )
    assert added.exit_code == 0, added.output
    token = added.stdout.strip()
    assert token.startswith("pop_")
    listed = runner.invoke(_cli(), ["credentials", "list", "--state-dir", str(daemon.state_dir)])
    assert listed.stdout == "operator\ncleo\n"
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": token}
    claimed = runner.invoke(_cli(), ["approve", operation_id, "--by", "the person"], env=env)
    assert claimed.exit_code == 2  # no such option any more
    assert _approvals(daemon, operation_id) == []
    rejected = runner.invoke(_cli(), ["reject", operation_id, "--note", "later"], env=env)
    assert rejected.exit_code == 0, rejected.output
    (decision,) = _approvals(daemon, operation_id)
    assert decision["by"] == {"role": "operator", "name": "cleo"}
    assert "claimed_by" not in decision
    reopened = runner.invoke(_cli(), ["reopen", operation_id, "--note", "now"], env=env)
    assert reopened.exit_code == 0, reopened.output
    assert f"operation {operation_id} awaiting_approval" in reopened.stdout
    approved = runner.invoke(_cli(), ["approve", operation_id, "--note", "ok"], env=env)
    assert approved.exit_code == 0, approved.output
    assert [(d["approval"], d["by"]["name"]) for d in _approvals(daemon, operation_id)] == [
        ("rejected", "cleo"),
        ("reopened", "cleo"),
        ("approved", "cleo"),
    ]
    removed = runner.invoke(
        _cli(), ["credentials", "remove", "cleo", "--state-dir", str(daemon.state_dir)]
    )
    assert removed.exit_code == 0, removed.output
    with daemon.client(token) as client:
        gone = client.get("/v1/operations")
    assert gone.status_code == 401
    assert gone.json()["code"] == "unauthenticated"


def test_cli_after_a_rejection_promote_again_exits_with_the_code(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id, bundle, receipt = _held(daemon, repo, identity)
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    runner = CliRunner()
    assert runner.invoke(_cli(), ["reject", operation_id], env=env).exit_code == 0
    from promoter.client.sync import PromoterClient

    with (
        PromoterClient(daemon.url, daemon.orchestrator_token) as orch,
        pytest.raises(ApprovalRejected) as refused,
    ):
        orch.promote(bundle["bundle_id"], receipt["receipt_sha256"], 7)
    assert refused.value.code == "approval_rejected"
    assert ApprovalRejected.exit_code == 75


def test_a_credential_name_cannot_pose_as_a_role_or_a_path(gated: Gated) -> None:
    daemon, _, _ = gated
    credentials = daemon.state_dir / "credentials"
    for name in ("operator", "orchestrator", "../x", "Ana", "", "a/b", ".hidden"):
        with pytest.raises(ConfigError):
            add_operator(credentials, name)
    add_operator(credentials, "dora")
    with pytest.raises(ConfigError):
        add_operator(credentials, "dora")
    assert sorted(p.name for p in (credentials / "operators").iterdir()) == ["dora.token"]
    assert (credentials / "operators" / "dora.token").stat().st_mode & 0o777 == 0o600


def test_the_console_asks_no_name_and_records_its_session_credential(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id, _, _ = _held(daemon, repo, identity)
    eve = _named(daemon, "eve")
    with login(daemon, eve) as client:
        page = client.get(f"/ui/operations/{operation_id}")
        assert 'name="by"' not in page.text
        assert "your name" not in page.text.lower()
        rejected = client.post(
            f"/ui/operations/{operation_id}/reject",
            data={"csrf": hidden(page.text), "note": "not yet", "by": "the person"},
        )
        assert rejected.status_code == 303
        refused = client.get(f"/ui/operations/{operation_id}")
        assert 'id="reopen"' in refused.text
        reopened = client.post(
            f"/ui/operations/{operation_id}/reopen",
            data={"csrf": hidden(refused.text), "note": "go on"},
        )
        assert reopened.status_code == 303
        held = client.get(f"/ui/operations/{operation_id}")
        approved = client.post(
            f"/ui/operations/{operation_id}/approve", data={"csrf": hidden(held.text)}
        )
        assert approved.status_code == 303
        shown = client.get(f"/ui/operations/{operation_id}")
    assert 'id="status">completed<' in shown.text
    assert "&#34;name&#34;: &#34;eve&#34;" in shown.text or '"name": "eve"' in shown.text
    assert [(d["approval"], d["by"]) for d in _approvals(daemon, operation_id)] == [
        ("rejected", {"role": "operator", "name": "eve"}),
        ("reopened", {"role": "operator", "name": "eve"}),
        ("approved", {"role": "operator", "name": "eve"}),
    ]
    assert (repo / "src" / "app.py").read_bytes() == NEW


def test_the_console_refuses_a_non_operator_token(gated: Gated) -> None:
    daemon, _, _ = gated
    with httpx.Client(base_url=daemon.url) as client:
        form = client.get("/ui/login")
        answer = client.post(
            "/ui/login", data={"csrf": hidden(form.text), "token": daemon.orchestrator_token}
        )
    assert answer.status_code == 403


def test_promoter_run_confirmed_at_the_terminal_records_the_credential_and_the_user_as_note(
    gated: Gated, monkeypatch: pytest.MonkeyPatch
) -> None:
    from promoter.cli import run_cmd, run_person

    daemon, repo, _ = gated
    monkeypatch.setattr(run_person, "_approve_here", lambda yes, unseen, gate="", **_: "asked")
    app = typer.Typer()
    run_cmd.register(app)
    app.command("noop")(lambda: None)
    argv = ["run", "--state-dir", str(daemon.state_dir), "--url", daemon.url, "--repo", "gated"]
    argv.append("--keep")  # the test reads the sandbox's record after the run
    result = CliRunner().invoke(
        app, [*argv, "--", "sh", "-c", "echo a > src/a.py"], env={"PROMOTER_TOKEN": ""}
    )
    assert result.exit_code == 0, result.output
    (record,) = sandboxes.list_runs(daemon.state_dir)
    operation_id = record.steps[0].operation_id
    assert operation_id is not None
    (decision,) = _approvals(daemon, operation_id)
    assert decision["by"] == {"role": "operator", "name": "operator"}
    assert decision["note"] == f"confirmed at the terminal by {getpass.getuser()}"
    assert (repo / "src" / "a.py").read_bytes() == b"a\n"


def test_ops_show_names_the_credential_that_decided(gated: Gated) -> None:
    from promoter.cli.main import app

    daemon, repo, identity = gated
    operation_id, _, _ = _held(daemon, repo, identity)
    fay = _named(daemon, "fay")
    with daemon.client(fay) as client:
        client.post(
            f"/v1/operations/{operation_id}/reject", json={"note": "no", "by": "the person"}
        )
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token, "COLUMNS": "200"}
    shown = CliRunner().invoke(app, ["ops", "show", operation_id], env=env)
    assert shown.exit_code == 0, shown.output
    assert "  rejected by fay (operator): no\n" in shown.stdout
    assert "the person" not in shown.stdout


def test_a_removed_credential_whose_file_is_left_behind_stays_removed(gated: Gated) -> None:
    """Removed through the ledger on another host, the credential's file stays here: its
    token is refused at once, and the folder read again (a changed mtime, the daemon
    started again) never publishes it anew (protocol: hosts#answers-that-route)."""
    import os

    from promoter.errors import Unauthenticated
    from promoter.store.credentials import remove_named

    daemon, _, _ = gated
    credentials = daemon.state_dir / "credentials"
    folder = credentials / "operators"
    auth = daemon.services.auth
    token = add_operator(credentials, "gus")  # the file only: published on the next request
    assert auth.authenticate(token).name == "gus"
    with daemon.services.db.session() as session:
        assert remove_named(session, "gus", "host-elsewhere") == 1
    assert (folder / "gus.token").read_text().strip() == token  # left behind, as it was
    with pytest.raises(Unauthenticated):
        auth.authenticate(token)
    os.utime(folder, ns=(folder.stat().st_atime_ns, folder.stat().st_mtime_ns + 10**10))
    auth.publish()
    with pytest.raises(Unauthenticated):
        auth.authenticate(token)


def test_the_review_names_the_credential_it_was_read_with_in_its_decide_commands(
    gated: Gated, tmp_path: Path
) -> None:
    daemon, repo, identity = gated
    operation_id, _, _ = _held(daemon, repo, identity)
    ana = tmp_path / "ana.token"
    ana.write_text(_named(daemon, "ana"))
    ana.chmod(0o600)
    env = {"PROMOTER_URL": daemon.url, "COLUMNS": "400"}
    shown = CliRunner().invoke(_cli(), ["review", "--token-file", str(ana)], env=env)
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.stdout.split())
    assert (
        f"approve: promoter approve {operation_id} --note '...' --token-file {ana}; "
        f"reject: promoter reject {operation_id} --note '...' --token-file {ana};"
    ) in said
    # the command as printed records the person who read the review
    argv = ["approve", operation_id, "--note", "ok", "--token-file", str(ana)]
    approved = CliRunner().invoke(_cli(), argv, env=env)
    assert approved.exit_code == 0, approved.output
    (decision,) = _approvals(daemon, operation_id)
    assert decision["by"] == {"role": "operator", "name": "ana"}


def _run_at_a_terminal(
    daemon: Daemon, repo: Path, token: str, *flags: str, script: str = "echo a > src/a.py"
) -> Terminal:
    (repo.parent / "person.token").write_text(token)
    (repo.parent / "person.token").chmod(0o600)
    argv = [*CLI, "run", "--state-dir", str(daemon.state_dir), "--url", daemon.url]
    argv += ["--token-file", str(repo.parent / "person.token"), "--repo", "gated", "--keep"]
    return Terminal([*argv, *flags, "--unconfined", "--", "sh", "-c", script], repo, {})


def test_the_question_under_the_gate_says_that_yes_is_the_approval(gated: Gated) -> None:
    daemon, repo, _ = gated
    term = _run_at_a_terminal(daemon, repo, daemon.operator_token)
    term.expect(
        b"gated requires approval: your yes is the approval, recorded for credential "
        b"operator, and promotes at once. Promote these changes into the worktree? [y/N]:"
    )
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / "src" / "a.py").read_bytes() == b"a\n"
    (record,) = sandboxes.list_runs(daemon.state_dir)
    assert record.steps[0].status == "completed" and record.steps[0].operation_id
    (decision,) = _approvals(daemon, record.steps[0].operation_id)
    assert decision["by"] == {"role": "operator", "name": "operator"}


def test_the_question_under_the_gate_says_that_yes_only_asks_without_an_operator(
    gated: Gated,
) -> None:
    daemon, repo, _ = gated
    term = _run_at_a_terminal(daemon, repo, daemon.orchestrator_token)
    term.expect(
        b"gated requires approval: your yes only asks for it; nothing is written until an "
        b"operator approves. Promote these changes into the worktree? [y/N]:"
    )
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert not (repo / "src" / "a.py").exists()
    (record,) = sandboxes.list_runs(daemon.state_dir)
    assert record.steps[0].status == "awaiting_approval"
    assert f"awaiting approval: promoter approve {record.steps[0].operation_id}".encode() in (
        term.plain
    )


def test_the_question_without_the_gate_says_nothing_of_approval(daemon: Daemon, repo: Path) -> None:
    argv = [*CLI, "run", "--state-dir", str(daemon.state_dir), "--url", daemon.url]
    argv += ["--repo", "work", "--unconfined", "--", "sh", "-c", "echo a > src/a.py"]
    term = Terminal(argv, repo, {})
    at = term.expect(b"Promote these changes into the worktree? [y/N]:")
    term.send(b"n\r")
    assert term.finish() == 75, term.text()
    assert b"approval" not in term.plain[:at]


ASKED_AND_APPROVED = {  # the interactive step under the gate, beyond --yes's one promotion
    ("POST", "/v1/blobs:missing"): 1,
    ("POST", "/v1/blobs:batchUpdate"): 1,
    ("POST", "/v1/bundles"): 1,
    ("GET", "/v1/bundles/{bundle_id}/diff"): 1,
    ("POST", "/v1/bundles/{bundle_id}/preflight"): 1,  # the drift, read before the question
    ("GET", "/v1/repositories/{name}/approval"): 1,  # what the yes does, said with it
    ("GET", "/v1/whoami"): 1,
    ("POST", "/v1/promotions"): 1,
    ("POST", "/v1/operations/{operation_id}/approve"): 1,
    ("GET", "/v1/operations/{operation_id}/receipt"): 1,
}


def test_the_question_under_the_gate_asks_who_the_person_is_once(gated: Gated) -> None:
    """The requests a run at a terminal makes under the gate, counted in the daemon's
    metrics against a ``--yes`` run's: the question's gate reads the caller once, and the
    approval after the held promotion uses that answer, never asking again."""
    daemon, repo, _ = gated
    before = _requests(daemon)
    flagged = _run_at_a_terminal(daemon, repo, daemon.operator_token, "--yes")
    assert flagged.finish() == 0, flagged.text()
    between = _requests(daemon)
    term = _run_at_a_terminal(daemon, repo, daemon.operator_token, script="echo b > src/b.py")
    term.expect(b"Promote these changes into the worktree? [y/N]:")
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / "src" / "b.py").read_bytes() == b"b\n"
    after = _requests(daemon)
    with_yes = _delta(before, between)
    asked = _delta(between, after)
    assert with_yes == {
        ("GET", "/v1/repositories"): 1,
        ("POST", "/v1/repositories/{name}/changes"): 1,
        ("POST", "/v1/runs"): 1,
        ("POST", "/v1/promotions:withEvidence"): 1,
    }
    del with_yes[("POST", "/v1/promotions:withEvidence")]
    assert asked == {**with_yes, **ASKED_AND_APPROVED}


def _delta(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]
) -> dict[tuple[str, str], int]:
    """The requests made between two readings of the metrics (not the readings)."""
    moved = {k: int(v - before.get(k, 0)) for k, v in after.items() if v != before.get(k, 0)}
    moved.pop(("GET", "/metrics"), None)
    return moved
