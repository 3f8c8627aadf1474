"""``promoter run`` end to end: a real daemon, a real repository, a real shell command.

The command runs in the sandbox clone; the tests compare the user's worktree and its
``.git`` byte for byte before and after, with the user's own uncommitted edits elsewhere.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import typer
from click.testing import Result
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from promoter.cli import review_cmd, run_cmd
from promoter.errors import PromoterError
from promoter.executor import sandbox as sandboxes
from tests.support import forkserver
from tests.support.daemon import Daemon
from tests.support.fixtures import Serve, under_gate
from tests.support.promotion import git_dir_digest, operation_receipt, tree_bytes
from tests.support.repos import Repos
from tests.support.sandbox_view import sandbox_file, sandbox_tree

ROOT = Path(__file__).resolve().parents[2]
USER_README = b"# project\nthe user's uncommitted line\n"


def _app() -> typer.Typer:
    app = typer.Typer()
    run_cmd.register(app)
    review_cmd.register(app)
    return app


def _run(daemon: Daemon, *args: str) -> Result:
    argv = [*args[:1], "--state-dir", str(daemon.state_dir), "--url", daemon.url, *args[1:]]
    if args[0] != "run":
        argv = list(args)
    return CliRunner().invoke(_app(), argv, env={"PROMOTER_TOKEN": ""})


def _only_run(daemon: Daemon) -> sandboxes.RunRecord:
    (record,) = sandboxes.list_runs(daemon.state_dir)
    return record


def test_run_creates_modifies_and_deletes_then_continues_twice(daemon: Daemon, repo: Path) -> None:
    (repo / "README.md").write_bytes(USER_README)
    (repo / "notes.txt").write_bytes(b"the user's notes\n")
    git_before = git_dir_digest(repo)
    script = "printf 'x = 1\\n' > src/new.py; printf \"print('v2')\\n\" > src/app.py"
    first = _run(
        daemon, "run", "--repo", "work", "--yes", "--diff", "--keep", "--", "sh", "-c", script
    )
    assert first.exit_code == 0, first.output
    record = _only_run(daemon)
    assert "requested with its evidence in one request" in first.stdout  # --yes: one request
    assert "+print('v2')" in first.stdout
    assert f"promoter run --continue {record.run_id}" in first.stdout
    assert (repo / "src" / "new.py").read_bytes() == b"x = 1\n"
    assert (repo / "src" / "app.py").read_bytes() == b"print('v2')\n"
    op1 = record.steps[0].operation_id
    assert op1 is not None and "base_operation" not in operation_receipt(daemon, op1)

    second = _run(
        daemon,
        "run",
        "--continue",
        record.run_id,
        "--yes",
        "--keep",
        "--",
        "sh",
        "-c",
        "printf 'x = 2\\n' > src/new.py; printf 'y\\n' > src/other.py",
    )
    assert second.exit_code == 0, second.output
    assert f"chained on {op1}" in second.stdout
    # --yes without --diff: the summary, never the patch
    assert "+x = 2" not in second.stdout and "@@" not in second.stdout
    assert " create src/other.py  - -> 2 B, +1 -0\n" in second.stdout
    assert "2 file(s), 2 insertion(s), 1 deletion(s)" in second.stdout
    record = _only_run(daemon)
    op2 = record.steps[1].operation_id
    assert op2 is not None and operation_receipt(daemon, op2)["base_operation"] == op1
    paths = sorted(t["path"] for t in operation_receipt(daemon, op2)["targets"])
    assert paths == ["src/new.py", "src/other.py"]  # only the new edits

    third = _run(
        daemon, "run", "--continue", record.run_id, "--yes", "--keep", "--", "rm", "src/other.py"
    )
    assert third.exit_code == 0, third.output
    record = _only_run(daemon)
    op3 = record.steps[2].operation_id
    assert op3 is not None and operation_receipt(daemon, op3)["base_operation"] == op2
    assert not (repo / "src" / "other.py").exists()

    source = tree_bytes(repo)
    assert source["README.md"][0] == USER_README
    assert source["notes.txt"][0] == b"the user's notes\n"
    assert source == sandbox_tree(record)  # it started from the user's files
    assert git_dir_digest(repo) == git_before

    listed = _run(daemon, "run", "--list")
    assert f"{record.run_id}  work  3 step(s), last completed" in listed.stdout
    removed = _run(daemon, "run", "--remove", record.run_id)
    assert removed.exit_code == 0, removed.output
    assert not Path(record.clone).exists()
    assert (repo / "src" / "new.py").read_bytes() == b"x = 2\n"
    assert (repo / "README.md").read_bytes() == USER_README


def test_run_deletes_a_tracked_file_and_a_step_without_changes_promotes_nothing(
    daemon: Daemon, repo: Path
) -> None:
    first = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", "rm", "README.md")
    assert first.exit_code == 0, first.output
    assert not (repo / "README.md").exists()
    record = _only_run(daemon)
    again = _run(daemon, "run", "--continue", record.run_id, "--yes", "--keep", "--", "true")
    assert again.exit_code == 0, again.output
    assert "no changes since the last promotion: nothing to promote\n" in again.stdout
    assert _only_run(daemon).steps[-1].status == "no_changes"


def test_a_first_step_without_changes_says_the_command_changed_nothing(
    daemon: Daemon, repo: Path
) -> None:
    result = _run(daemon, "run", "--repo", "work", "--yes", "--", "true")
    assert result.exit_code == 0, result.output
    record = _only_run(daemon)
    assert f"({record.layout}), with no uncommitted change of yours\n" in result.stdout
    assert "no changes by the command: nothing to promote\n" in result.stdout
    assert record.steps[-1].status == "no_changes"


def test_without_a_terminal_or_yes_nothing_is_promoted(daemon: Daemon, repo: Path) -> None:
    before = tree_bytes(repo)
    result = _run(daemon, "run", "--repo", "work", "--", "sh", "-c", "echo hi > src/app.py")
    assert isinstance(result.exception, PromoterError), result.output
    assert "stays submitted" in result.exception.detail
    assert tree_bytes(repo) == before
    assert _only_run(daemon).steps[0].status == "declined"


def test_a_failing_command_submits_nothing(daemon: Daemon, repo: Path) -> None:
    before = tree_bytes(repo)
    result = _run(daemon, "run", "--repo", "work", "--yes", "--", "sh", "-c", "echo x > a; exit 3")
    assert isinstance(result.exception, PromoterError), result.output
    assert "status 3" in result.exception.detail
    assert tree_bytes(repo) == before


@pytest.fixture
def gated(repos: Repos, serve: Serve) -> tuple[Daemon, Path]:
    daemon, repo, _ = under_gate(repos, serve, name="work")
    return daemon, repo


def test_yes_does_not_pass_the_approval_gate(gated: tuple[Daemon, Path]) -> None:
    daemon, repo = gated
    result = _run(daemon, "run", "--repo", "work", "--yes", "--", "sh", "-c", "echo a > src/a.py")
    assert result.exit_code == 0, result.output
    record = _only_run(daemon)
    operation_id = record.steps[0].operation_id
    assert record.steps[0].status == "awaiting_approval"
    assert f"awaiting approval: promoter approve {operation_id}" in result.stdout
    assert not (repo / "src" / "a.py").exists()
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    assert operation_id is not None
    approved = CliRunner().invoke(_app(), ["approve", operation_id], env=env)
    assert approved.exit_code == 0, approved.output
    assert (repo / "src" / "a.py").read_bytes() == b"a\n"
    # the next step chains on it once the record learns it completed
    nxt = _run(
        daemon, "run", "--continue", record.run_id, "--yes", "--", "sh", "-c", "echo b > src/a.py"
    )
    assert nxt.exit_code == 0, nxt.output
    record = _only_run(daemon)
    assert record.steps[0].status == "completed"
    assert record.steps[1].base_operation == operation_id
    assert json.loads(json.dumps(record.wire()))["steps"][1]["status"] == "awaiting_approval"


def test_continuing_a_run_whose_sandbox_was_removed_names_keep(daemon: Daemon, repo: Path) -> None:
    first = _run(daemon, "run", "--repo", "work", "--yes", "--", "sh", "-c", "echo a > src/a.py")
    assert first.exit_code == 0, first.output
    run_id = first.stdout.split()[1].rstrip(":")
    again = _run(daemon, "run", "--continue", run_id, "--yes", "--", "true")
    assert isinstance(again.exception, PromoterError), again.output
    assert again.exception.code == "not_found"
    assert again.exception.detail == (
        f"no run {run_id!r} under {daemon.state_dir / 'runs'} (a completed step removes its "
        "sandbox unless given --keep; promoter run --list shows the sandboxes left)"
    )


def test_remove_refuses_what_is_not_a_sandbox(daemon: Daemon, repo: Path) -> None:
    result = _run(daemon, "run", "--remove", "../work")
    assert isinstance(result.exception, PromoterError)
    assert result.exception.code == "not_found"
    assert (repo / "README.md").exists()


def _requests(daemon: Daemon) -> dict[tuple[str, str], float]:
    """``promoter_http_requests_total`` by (method, route), any status."""
    with daemon.client() as client:
        text = client.get("/metrics").text
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "promoter_http_requests_total":
                key = (sample.labels["method"], sample.labels["route"])
                counts[key] = counts.get(key, 0) + sample.value
    return counts


def test_each_step_sets_up_its_grant_lease_and_token_in_one_request(
    daemon: Daemon, repo: Path
) -> None:
    first = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", "true")
    assert first.exit_code == 0, first.output
    record = _only_run(daemon)
    second = _run(daemon, "run", "--continue", record.run_id, "--yes", "--keep", "--", "true")
    assert second.exit_code == 0, second.output
    counts = _requests(daemon)
    assert counts[("POST", "/v1/runs")] == 2
    for separate in (
        ("POST", "/v1/grants"),
        ("PUT", "/v1/leases/{workflow_id}/{stage}"),
        ("POST", "/v1/executor-tokens"),
    ):
        assert counts.get(separate, 0) == 0, separate
    record = _only_run(daemon)
    with daemon.orchestrator() as orch:
        for number, step in enumerate(record.steps, start=1):
            grant = orch.get(f"/v1/grants/{step.grant_id}").json()
            assert (grant["executor_run_id"], grant["fence"]) == (record.run_id, number)


def test_a_step_whose_lease_would_move_back_registers_no_grant_and_runs_nothing(
    daemon: Daemon, repo: Path
) -> None:
    first = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", "true")
    assert first.exit_code == 0, first.output
    record = _only_run(daemon)
    (step,) = record.steps
    with daemon.orchestrator() as orch:
        grant = orch.get(f"/v1/grants/{step.grant_id}").json()
        ahead = {
            "run_id": record.run_id,
            "attempt": 1,
            "generation": 1,
            "resume_epoch": 0,
            "fence": 50,
            "expires_at": grant["expires_at"],
        }
        put = orch.put(f"/v1/leases/{grant['workflow_id']}/{grant['stage']}", json=ahead)
        assert put.status_code == 200, put.text
    marker = Path(record.clone) / "ran.txt"
    script = f"echo ran > {marker}"  # an absolute path inside the sandbox
    again = _run(
        daemon, "run", "--continue", record.run_id, "--yes", "--keep", "--", "sh", "-c", script
    )
    assert isinstance(again.exception, PromoterError), again.output
    assert again.exception.code == "lease_fence_regression"
    assert sandbox_file(record, "ran.txt") is None
    assert len(_only_run(daemon).steps) == 1
    second_grant = step.grant_id.removesuffix("_1") + "_2"
    assert daemon.services.audit.get("grant", second_grant) is None
    with daemon.orchestrator() as orch:
        assert orch.get(f"/v1/grants/{second_grant}").json()["code"] == "grant_unknown"


def test_a_command_with_bidi_and_escape_characters_is_echoed_with_them_shown(
    daemon: Daemon, repo: Path
) -> None:
    """The person's own command holds U+202E (which reorders what follows it) and an ESC
    (which starts a terminal sequence): the run's line naming it shows both as
    ``<U+XXXX>``, as every other surface shows a name; neither reaches the terminal raw,
    nor in ``--list`` or the next-command hints after the step."""
    script = "printf 'x\\n' > a.txt # \u202eexe.txt\x1b[2J"
    argv = [sys.executable, "-m", "promoter.cli.main", "run", "--state-dir"]
    argv += [str(daemon.state_dir), "--url", daemon.url, "--yes", "--keep", "--"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env = {**base, "PYTHONPATH": str(ROOT)}
    done = forkserver.run([*argv, "sh", "-c", script], env=env, cwd=repo, timeout=600)
    assert done.returncode == 0, done.stderr
    record = _only_run(daemon)
    shown = "'printf '\"'\"'x\\n'\"'\"' > a.txt # <U+202E>exe.txt<U+001B>[2J'"  # shell-quoted
    assert f"running sh -c {shown} in {record.clone} (bwrap)\n".encode() in done.stdout
    listed = forkserver.run([*argv[:8], "--list"], env=env, cwd=repo, timeout=600)
    assert listed.returncode == 0, listed.stderr
    for said in (done.stdout, done.stderr, listed.stdout, listed.stderr):
        assert "\u202e".encode() not in said and b"\x1b" not in said
    assert (repo / "a.txt").read_bytes() == b"x\n"


def test_an_argument_with_a_newline_cannot_pose_as_a_line_of_its_own_in_the_echo(
    daemon: Daemon, repo: Path
) -> None:
    """The person's command holds arguments with a newline, a tab and a carriage return:
    the run's line naming it shows each argument shell-quoted, those three as ``\\n``,
    ``\\t``, ``\\r`` inside ``$'…'``; so no argument prints what looks like a line of its
    own (``promoted: …``), and a literal backslash-n stays told apart from a newline."""
    args = ["one\npromoted: operation op_x completed", "tab\there", "cr\r\nlf", "it's\\n"]
    args += ["back\\slash\nx"]
    argv = [sys.executable, "-m", "promoter.cli.main", "run", "--state-dir"]
    argv += [str(daemon.state_dir), "--url", daemon.url, "--yes", "--keep", "--"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env = {**base, "PYTHONPATH": str(ROOT)}
    command = ["sh", "-c", "printf 'x\\n' > a.txt", *args]
    done = forkserver.run([*argv, *command], env=env, cwd=repo, timeout=600)
    assert done.returncode == 0, done.stderr
    record = _only_run(daemon)
    shown = (
        "sh -c 'printf '\"'\"'x\\n'\"'\"' > a.txt' $'one\\npromoted: operation op_x completed' "
        "$'tab\\there' $'cr\\r\\nlf' 'it'\"'\"'s\\n' $'back\\\\slash\\nx'"
    )
    assert f"running {shown} in {record.clone} (bwrap)\n".encode() in done.stdout
    assert b"\npromoted: operation op_x" not in done.stdout
    assert b"\t" not in done.stdout and b"\r" not in done.stdout
    assert (repo / "a.txt").read_bytes() == b"x\n"
