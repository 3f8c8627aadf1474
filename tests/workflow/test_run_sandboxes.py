"""``promoter run``'s sandboxes as a person manages them, and the agent's own bundle.

``--yes`` never pages (the real CLI on a pseudo-terminal, with a pager that leaves a
marker: the same harness shows ``bundle diff`` paging); ``--list`` shows each sandbox's
true status (refreshed from the daemon, ``unknown`` when it does not answer) and its
size; ``--prune`` removes finished and abandoned sandboxes, never one a live process
works in; and a bundle the command submitted through the MCP tool is the one promoted
when the sandbox still gives it, a new one when the sandbox changed after.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from promoter.client.sync import PromoterClient
from promoter.executor import sandbox as sandboxes
from tests.support.daemon import Daemon
from tests.workflow.test_run_command import _app, _only_run, _run, gated

__all__ = ["gated"]  # the fixture, used here by name

ROOT = Path(__file__).resolve().parents[2]


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    """Run ``argv`` with a pseudo-terminal as stdin, stdout and stderr; its output."""
    master, slave = pty.openpty()
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**base, "PYTHONPATH": str(ROOT), "TERM": "xterm", "LINES": "24", **env},
        close_fds=True,
    )
    os.close(slave)
    output = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    return proc.wait(timeout=600), output


def test_yes_never_pages_a_long_diff(daemon: Daemon, repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "paged"
    pager = {"PAGER": f"touch {marker}; cat >/dev/null", "MANPAGER": ""}
    cli = [sys.executable, "-m", "promoter.cli.main"]
    code, output = _on_a_terminal(
        [
            *cli,
            "run",
            "--state-dir",
            str(daemon.state_dir),
            "--url",
            daemon.url,
            "--repo",
            "work",
            "--yes",
            "--keep",
            "--",
            "sh",
            "-c",
            "seq 1 300 > long.txt",
        ],
        pager,
    )
    assert code == 0, output.decode(errors="replace")
    assert b"+300" in output
    assert not marker.exists()
    # the same terminal and pager do page a long diff where paging is asked for
    bundle_id = _only_run(daemon).steps[0].bundle_id
    assert bundle_id is not None
    env = {**pager, "PROMOTER_TOKEN": daemon.orchestrator_token, "PROMOTER_URL": daemon.url}
    code, output = _on_a_terminal([*cli, "bundle", "diff", bundle_id], env)
    assert code == 0, output.decode(errors="replace")
    assert marker.exists()


def _age(daemon: Daemon, record: sandboxes.RunRecord, seconds: float) -> None:
    path = sandboxes.runs_dir(daemon.state_dir) / record.run_id / "run.json"
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_prune_removes_finished_and_abandoned_sandboxes_never_a_live_one(
    daemon: Daemon, repo: Path
) -> None:
    done = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", "sh", "-c", "echo a>a")
    assert done.exit_code == 0, done.output
    finished = _only_run(daemon)
    declined = _run(daemon, "run", "--repo", "work", "--", "sh", "-c", "echo b > b")
    assert declined.exception is not None
    (left,) = [r for r in sandboxes.list_runs(daemon.state_dir) if r.run_id != finished.run_id]

    listed = _run(daemon, "run", "--list")
    assert listed.exit_code == 0, listed.output
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()}
    assert "1 step(s), last completed" in lines[finished.run_id]
    assert "1 step(s), last declined" in lines[left.run_id]
    assert "KiB" in lines[finished.run_id] or "MiB" in lines[finished.run_id]

    pruned = _run(daemon, "run", "--prune")
    assert pruned.exit_code == 0, pruned.output
    assert f"removed {finished.run_id} (last completed), freed" in pruned.stdout
    assert (
        f"{left.run_id}  kept: last declined, untouched for less than a day "
        f"(promoter run --remove {left.run_id} removes it now)\n"
    ) in pruned.stdout
    assert [r.run_id for r in sandboxes.list_runs(daemon.state_dir)] == [left.run_id]

    _age(daemon, left, 2 * 86400)
    young = _run(daemon, "run", "--prune", "--older-than", "3d")
    assert f"{left.run_id}  kept: last declined, untouched for less than 3 days " in young.stdout
    worker = subprocess.Popen(["sleep", "600"], cwd=left.clone)
    try:
        live = _run(daemon, "run", "--prune", "--older-than", "1d")
        assert f"{left.run_id}  kept: process {worker.pid} runs in it" in live.stdout
        assert Path(left.clone).is_dir()
    finally:
        worker.kill()
        worker.wait()
    gone = _run(daemon, "run", "--prune", "--older-than", "1d")
    assert f"removed {left.run_id} (last declined), freed" in gone.stdout
    assert "pruned 1 sandbox(es)" in gone.stdout
    assert sandboxes.list_runs(daemon.state_dir) == []
    assert (repo / "a").read_bytes() == b"a\n" and not (repo / "b").exists()


def test_list_refreshes_a_waiting_step_and_says_unknown_without_the_daemon(
    gated: tuple[Daemon, Path],
) -> None:
    daemon, repo = gated
    result = _run(daemon, "run", "--repo", "work", "--yes", "--", "sh", "-c", "echo a > a.txt")
    assert result.exit_code == 0, result.output
    record = _only_run(daemon)
    assert record.steps[0].status == "awaiting_approval"
    assert Path(record.clone).is_dir()  # not completed: kept
    argv = ["run", "--state-dir", str(daemon.state_dir), "--url", "http://127.0.0.1:9", "--list"]
    away = CliRunner().invoke(_app(), argv, env={"PROMOTER_TOKEN": ""})
    assert f"{record.run_id}  work  1 step(s), last unknown" in away.stdout
    operation_id = record.steps[0].operation_id
    assert operation_id is not None
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    approved = CliRunner().invoke(_app(), ["approve", operation_id], env=env)
    assert approved.exit_code == 0, approved.output
    listed = _run(daemon, "run", "--list")
    assert f"{record.run_id}  work  1 step(s), last completed" in listed.stdout
    assert _only_run(daemon).steps[0].status == "completed"  # the record learned it


AGENT = """
import json, os, sys
import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

params = StdioServerParameters(
    command=sys.executable, args=["-m", "promoter.cli.main", "mcp"],
    env=dict(os.environ), cwd=os.getcwd(),
)

async def main():
    async with Client(params, read_timeout_seconds=120) as client:
        result = await client.call_tool("submit_worktree", {})
        return result.structured_content

open("README.md", "ab").write(b"the agent line\\n")
answer = anyio.run(main)
with open(sys.argv[1], "w") as out:
    json.dump(answer, out)
if len(sys.argv) > 2:
    open("later.txt", "wb").write(b"written after the submission\\n")
"""


def _agent_run(daemon: Daemon, tmp_path: Path, *extra: str) -> tuple[str, dict[str, object]]:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    answer = tmp_path / "answer.json"
    result = _run(
        daemon,
        "run",
        "--repo",
        "work",
        "--yes",
        "--unconfined",  # the agent's script and its answer live in the test's directory
        "--",
        sys.executable,
        str(script),
        str(answer),
        *extra,
    )
    assert result.exit_code == 0, result.output
    loaded = json.loads(answer.read_text())
    assert loaded["status"] == "submitted", loaded
    return result.stdout, loaded


def _operations(daemon: Daemon, bundle_id: str) -> list[str]:
    with PromoterClient(daemon.url, daemon.orchestrator_token) as orch:
        return [str(o["status"]) for o in orch.bundle_operations(bundle_id)]


@pytest.mark.slow
def test_the_bundle_the_agent_submitted_through_mcp_is_the_one_promoted(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    (repo / "README.md").write_bytes(b"# project\nthe person's line\n")
    stdout, answer = _agent_run(daemon, tmp_path)
    bundle_id = str(answer["bundle_id"])
    assert answer["changes"] == [{"path": "README.md", "operation": "modify"}]
    assert f"promoting the bundle the command submitted: {bundle_id}" in stdout
    assert _operations(daemon, bundle_id) == ["completed"]
    readme = b"# project\nthe person's line\nthe agent line\n"
    assert (repo / "README.md").read_bytes() == readme


@pytest.mark.slow
def test_a_sandbox_changed_after_the_agent_submitted_is_promoted_as_a_new_bundle(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    stdout, answer = _agent_run(daemon, tmp_path, "then-edit")
    bundle_id = str(answer["bundle_id"])
    assert "promoting the bundle the command submitted" not in stdout
    assert _operations(daemon, bundle_id) == []  # never promoted: it is not what the sandbox holds
    assert (repo / "later.txt").read_bytes() == b"written after the submission\n"
    assert (repo / "README.md").read_bytes() == b"# project\nthe agent line\n"


def test_list_and_prune_name_a_step_without_changes_in_words_not_its_code(
    daemon: Daemon, repo: Path
) -> None:
    """A step that changed nothing reads ``no changes`` in ``--list`` and ``--prune``, as a
    failed command reads ``command failed``: never the record's ``no_changes``, which
    ``run.json`` and ``--json`` keep; ``--continue`` without CMD names it alike."""
    done = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", "true")
    assert done.exit_code == 0, done.output
    record = _only_run(daemon)
    assert [s.status for s in record.steps] == ["no_changes"]
    listed = _run(daemon, "run", "--list")
    assert f"{record.run_id}  work  1 step(s), last no changes  " in listed.stdout, listed.output
    again = _run(daemon, "run", "--continue", record.run_id, "--yes")
    assert again.exit_code == 2, again.output
    said = " ".join(again.output.replace("\u2502", " ").split())  # the usage box's lines
    assert "(its last step: no changes); give the next command" in said, again.output
    pruned = _run(daemon, "run", "--prune")
    assert pruned.exit_code == 0, pruned.output
    assert f"removed {record.run_id} (last no changes), freed " in pruned.stdout
    for said in (listed.stdout, again.output, pruned.stdout):
        assert "no_changes" not in said


def test_prune_and_list_name_a_failed_command_alike(daemon: Daemon, repo: Path) -> None:
    """A step whose command failed reads ``command failed`` in ``--list`` and ``--prune``
    alike (never the record's ``command_failed`` in one of them); its sandbox is kept."""
    failed = _run(daemon, "run", "--repo", "work", "--", "sh", "-c", "echo c > c; exit 3")
    assert getattr(failed.exception, "code", None) == "command_failed", failed.output
    (record,) = sandboxes.list_runs(daemon.state_dir)
    listed = _run(daemon, "run", "--list")
    assert "1 step(s), last command failed" in listed.stdout, listed.output
    pruned = _run(daemon, "run", "--prune")
    assert pruned.exit_code == 0, pruned.output
    assert (
        f"{record.run_id}  kept: last command failed, untouched for less than a day "
        f"(promoter run --remove {record.run_id} removes it now)\n"
    ) in pruned.stdout
    assert "command_failed" not in pruned.stdout
    assert [r.run_id for r in sandboxes.list_runs(daemon.state_dir)] == [record.run_id]
    assert not (repo / "c").exists()
