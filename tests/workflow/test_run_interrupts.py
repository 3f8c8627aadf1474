"""``promoter run``'s exits at each stage, as a real process (TESTS.md P2).

Ctrl-C is SIGINT sent to the real CLI process once a marker shows it reached the stage:
the agent's own line (while it runs) or the question on a real pseudo-terminal (at the
prompt). Each names what was kept (the sandbox, the bundle) and the next command, exits
130, and leaves the person's worktree byte for byte as it was. After the person's "y",
with the host's promotion paused at ``before_replace``, Ctrl-C says the host finishes it
(never "nothing was promoted") and names the command that shows its outcome. The agent's
own failure
is ``command_failed`` (71); the not-confirmed remedy promotes the very bundle it named;
``run --list`` tells a step interrupted or approved in part as such.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from promoter import faults
from promoter.cli import run_manage
from promoter.executor import confine
from promoter.executor import sandbox as sandboxes
from tests.support import bwrap
from tests.support.daemon import Daemon
from tests.support.pause import Pause
from tests.support.promotion import tree_bytes
from tests.workflow.test_run_command import gated

__all__ = ["gated"]  # the fixture, used here by name

INTERRUPTED = 130


def _argv(daemon: Daemon, *args: str) -> list[str]:
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url]
    return [sys.executable, "-m", "promoter.cli.main", args[0], *where, *args[1:]]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env.update(PAGER="cat", COLUMNS="2000", NO_COLOR="1")
    return env


def _cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with its current directory in the guarded worktree (no --repo needed)."""
    return subprocess.run(
        _argv(daemon, *args),
        cwd=daemon.services.registry.by_name("work").worktree,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _only_run(daemon: Daemon) -> sandboxes.RunRecord:
    (record,) = sandboxes.list_runs(daemon.state_dir)
    return record


@pytest.mark.parametrize(
    ("script", "ended"),
    [
        ("echo x > a; exit 3", "exited with status 3"),
        ("echo x > a; kill -KILL $$", "was killed by signal 9 (SIGKILL)"),
    ],
    ids=["status", "signal"],
)
def test_the_agents_failure_is_command_failed_with_its_status(
    daemon: Daemon, repo: Path, script: str, ended: str
) -> None:
    before = tree_bytes(repo)
    result = _cli(daemon, "run", "--unconfined", "--yes", "--", "sh", "-c", script)
    assert result.returncode == 71
    record = _only_run(daemon)
    assert (
        f"error [command_failed] the command {ended}; nothing was submitted; the sandbox "
        f"is kept: {record.clone} (the next step: promoter run --continue {record.run_id} "
        "--unconfined -- CMD)"
    ) in result.stderr
    assert tree_bytes(repo) == before
    assert record.steps[0].status == "command_failed"


def test_a_confined_command_that_fails_has_bubblewrap_probed_again_next_time(
    daemon: Daemon, repo: Path
) -> None:
    """A failure of bubblewrap's own ends the command as the agent's does: the kept
    probe's answer is forgotten, so the next run asks bubblewrap again first."""
    bwrap.confining()
    kept = sandboxes.runs_dir(daemon.state_dir) / confine.KEPT_PROBE
    assert _cli(daemon, "run", "--yes", "--", "true").returncode == 0
    assert kept.read_bytes().endswith(b"\nyes\n")
    assert _cli(daemon, "run", "--yes", "--", "sh", "-c", "exit 3").returncode == 71
    assert kept.read_bytes() == b""


def test_a_timeout_is_the_commands_failure_with_the_sandbox_and_the_next_step(
    daemon: Daemon, repo: Path
) -> None:
    before = tree_bytes(repo)
    script = "echo x > src/app.py; exec sleep 600"  # never ends by itself
    result = _cli(
        daemon, "run", "--unconfined", "--yes", "--timeout", "1", "--", "sh", "-c", script
    )
    assert result.returncode == 71, result.stderr
    record = _only_run(daemon)
    assert (
        f"error [command_failed] the command did not finish within 1 s and was ended with "
        f"every process of it; nothing was submitted; the sandbox is kept: {record.clone} "
        f"(the next step: promoter run --continue {record.run_id} --unconfined --timeout 1 "
        "-- CMD)"
    ) in result.stderr
    assert tree_bytes(repo) == before
    assert record.steps[0].status == "command_failed"
    home = sandboxes.runs_dir(daemon.state_dir) / record.run_id
    assert run_manage._live(home) == []  # nothing of the command outlived it


def test_ctrl_c_while_the_agent_runs_keeps_the_sandbox_and_names_the_next_step(
    daemon: Daemon, repo: Path
) -> None:
    (repo / "README.md").write_bytes(b"the person's own edit\n")
    before = tree_bytes(repo)
    agent = "echo x > src/app.py; echo AGENT-STARTED; exec sleep 600"
    process = subprocess.Popen(
        _argv(daemon, "run", "--unconfined", "--yes", "--", "sh", "-c", agent),
        cwd=repo,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:  # blocking reads until the agent says it runs
        if line.strip() == "AGENT-STARTED":
            break
    else:
        pytest.fail("the agent never started: " + process.communicate()[1])
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == INTERRUPTED, stderr
    record = _only_run(daemon)
    assert stderr.splitlines()[-1] == (
        f"error [interrupted] interrupted: nothing was promoted; the sandbox is kept: "
        f"{record.clone}; run the step again with promoter run --continue {record.run_id} "
        "--unconfined -- CMD"
    )
    assert tree_bytes(repo) == before
    assert record.steps[0].status == "interrupted"
    home = sandboxes.runs_dir(daemon.state_dir) / record.run_id
    assert run_manage._live(home) == []  # the agent did not outlive the run
    listed = _cli(daemon, "run", "--list")
    assert f"{record.run_id}  work  1 step(s), last interrupted" in listed.stdout


def _read_until(fd: int, marker: bytes, seen: bytearray) -> None:
    while marker not in seen:
        ready, _, _ = select.select([fd], [], [], 120)
        assert ready, f"no {marker!r} within 120 s: {bytes(seen)!r}"
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side closed
            chunk = b""
        assert chunk, f"ended before {marker!r}: {bytes(seen)!r}"
        seen += chunk


def _read_to_end(fd: int, seen: bytearray, within: float | None = None) -> None:
    while True:
        if within is not None:
            ready, _, _ = select.select([fd], [], [], within)
            assert ready, f"no end within {within} s: {bytes(seen)!r}"
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        seen += chunk


@pytest.mark.parametrize("keep", [[], ["--keep"]], ids=["removed", "kept"])
def test_ctrl_c_at_the_question_names_the_bundle_and_the_remedy_promotes_it(
    daemon: Daemon, repo: Path, keep: list[str]
) -> None:
    """A step given ``--keep`` is named a remedy with ``--keep``: its sandbox stays."""
    before = tree_bytes(repo)
    master, slave = pty.openpty()
    agent = ["sh", "-c", "echo new > src/new.py"]
    process = subprocess.Popen(
        _argv(daemon, "run", "--unconfined", *keep, "--", *agent),
        cwd=repo,
        env=_env(),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, b"Promote these changes into the worktree?", seen)
        _read_until(master, b"[y/N]", seen)  # the prompt whole: the answer is being read
        process.send_signal(signal.SIGINT)
        _read_to_end(master, seen, within=120.0)  # read while it ends: a full pty never blocks it
        assert process.wait(10) == INTERRUPTED
    finally:
        os.close(master)
    text = seen.decode(errors="replace").replace("\r\n", "\n")
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # bold on a terminal
    record = _only_run(daemon)
    (step,) = record.steps
    assert step.bundle_id is not None and step.status == "interrupted"
    # the error on a line of its own (the prompt's trailing space is written by the read
    # the signal may come before)
    assert re.search(r"\[y/N\]: ?\nerror \[interrupted\]", text), repr(text[-700:])
    assert (
        f"error [interrupted] interrupted: nothing was promoted; the sandbox is kept: "
        f"{record.clone}; bundle {step.bundle_id} stays submitted: promote it with promoter "
        f"run --continue {record.run_id} --yes{' --keep' if keep else ''} --unconfined\n"
    ) in text
    assert tree_bytes(repo) == before

    remedy = _cli(daemon, "run", "--continue", record.run_id, "--yes", *keep)
    assert remedy.returncode == 0, remedy.stderr + remedy.stdout
    assert f"promoting the bundle step 1 submitted: {step.bundle_id}" in remedy.stdout
    assert (repo / "src" / "new.py").read_bytes() == b"new\n"
    _promoted_exactly(daemon, remedy.stdout, step.bundle_id)
    assert Path(record.clone).exists() == bool(keep)  # completed: removed unless kept


def test_ctrl_c_after_yes_while_the_host_promotes_says_it_finishes_and_names_the_outcome(
    daemon: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "README.md").write_bytes(b"the person's own edit\n")
    before = tree_bytes(repo)
    held = Pause(tmp_path, "before_replace")  # in the daemon, this process
    monkeypatch.setenv(faults.ENV, held.spec)
    faults.reset()
    master, slave = pty.openpty()
    process = subprocess.Popen(
        _argv(daemon, "run", "--unconfined", "--", "sh", "-c", "echo new > src/app.py"),
        cwd=repo,
        env=_env(),  # the command line itself passes no fault point
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, b"Promote these changes into the worktree? [y/N]", seen)
        os.write(master, b"y\r")
        held.reached()  # the promotion asked, its temp written, the replace not made
        assert (repo / "src" / "app.py").read_bytes() == before["src/app.py"][0]
        process.send_signal(signal.SIGINT)
        _read_to_end(master, seen, within=120.0)
        assert process.wait(10) == INTERRUPTED
    finally:
        held.release()
        os.close(master)
    text = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode(errors="replace").replace("\r\n", "\n"))
    record = _only_run(daemon)
    (step,) = record.steps
    assert step.bundle_id is not None and step.status == "interrupted"
    assert (
        f"error [interrupted] interrupted after the host was asked to promote bundle "
        f"{step.bundle_id}: it finishes that promotion, so your worktree may still change; "
        f"the sandbox is kept: {record.clone}; its outcome: promoter run --continue "
        f"{record.run_id} --yes --unconfined"
    ) in " ".join(text.split()), repr(text[-700:])
    assert "nothing was promoted" not in text

    outcome = _cli(daemon, "run", "--continue", record.run_id, "--yes")
    assert outcome.returncode == 0, outcome.stderr + outcome.stdout
    _promoted_exactly(daemon, outcome.stdout, step.bundle_id)
    with daemon.operator() as operator:
        listed = operator.get("/v1/operations").json()["operations"]
    assert [(o["bundle_id"], o["status"]) for o in listed] == [(step.bundle_id, "completed")]
    after = tree_bytes(repo)
    assert after.pop("src/app.py")[0] == b"new\n"
    before.pop("src/app.py")
    assert after == before  # the person's own edit and every other file as they were


def test_ctrl_c_while_the_one_request_of_yes_promotes_names_its_bundle_and_outcome(
    daemon: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = tree_bytes(repo)
    held = Pause(tmp_path, "before_replace")  # in the daemon, this process
    monkeypatch.setenv(faults.ENV, held.spec)
    faults.reset()
    process = subprocess.Popen(
        _argv(daemon, "run", "--unconfined", "--yes", "--", "sh", "-c", "echo new > src/app.py"),
        cwd=repo,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        held.reached()  # blobs, bundle and promotion sent in one request, its replace not made
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        held.release()
    assert process.returncode == INTERRUPTED, stderr
    record = _only_run(daemon)
    (step,) = record.steps
    assert step.bundle_id is not None and step.status == "interrupted"
    assert stderr.splitlines()[-1] == (
        f"error [interrupted] interrupted after the host was asked to promote bundle "
        f"{step.bundle_id}: it finishes that promotion, so your worktree may still change; "
        f"the sandbox is kept: {record.clone}; its outcome: promoter run --continue "
        f"{record.run_id} --yes --unconfined"
    )
    outcome = _cli(daemon, "run", "--continue", record.run_id, "--yes")
    assert outcome.returncode == 0, outcome.stderr + outcome.stdout
    _promoted_exactly(daemon, outcome.stdout, step.bundle_id)
    with daemon.operator() as operator:
        listed = operator.get("/v1/operations").json()["operations"]
    assert [(o["bundle_id"], o["status"]) for o in listed] == [(step.bundle_id, "completed")]
    after = tree_bytes(repo)
    assert after.pop("src/app.py")[0] == b"new\n"
    before.pop("src/app.py")
    assert after == before


def _promoted_exactly(daemon: Daemon, output: str, bundle_id: str) -> None:
    """The remedy promoted ``bundle_id`` itself, not a bundle built anew."""
    found = re.search(r"promoted: operation (op_[0-9a-f]+) completed", output)
    assert found is not None, output
    with daemon.operator() as operator:
        view = operator.get(f"/v1/operations/{found.group(1)}").json()
    assert (view["bundle_id"], view["status"]) == (bundle_id, "completed")


def test_the_not_confirmed_remedy_promotes_the_bundle_it_named(daemon: Daemon, repo: Path) -> None:
    before = tree_bytes(repo)
    result = _cli(daemon, "run", "--unconfined", "--", "sh", "-c", "echo n > src/n.py")
    assert result.returncode == 75
    record = _only_run(daemon)
    bundle_id = record.steps[0].bundle_id
    assert bundle_id is not None
    named = re.search(
        r"promote that bundle with (promoter run --continue \S+ --yes)", result.stderr
    )
    assert named is not None and f"bundle {bundle_id} stays submitted" in result.stderr
    assert tree_bytes(repo) == before
    again = _cli(daemon, *named.group(1).split()[1:])
    assert again.returncode == 0, again.stderr + again.stdout
    assert (repo / "src" / "n.py").read_bytes() == b"n\n"
    _promoted_exactly(daemon, again.stdout, bundle_id)


def test_run_list_tells_a_promotion_approved_in_part(gated: tuple[Daemon, Path]) -> None:
    daemon, repo = gated
    script = "echo a > src/a.py; echo b > src/b.py"
    held = _cli(daemon, "run", "--unconfined", "--yes", "--", "sh", "-c", script)
    assert held.returncode == 0, held.stderr + held.stdout
    record = _only_run(daemon)
    operation_id = record.steps[0].operation_id
    assert operation_id is not None
    with daemon.operator() as operator:
        answer = operator.post(
            f"/v1/operations/{operation_id}/approve", json={"only": ["src/a.py"], "wait": True}
        )
        assert answer.status_code == 200, answer.text
    listed = _cli(daemon, "run", "--list")
    assert f"{record.run_id}  work  1 step(s), last approved in part" in listed.stdout
    assert (repo / "src" / "a.py").read_bytes() == b"a\n"
    assert not (repo / "src" / "b.py").exists()
