"""A step whose bundle was refused after its command ended ends ``refused``; one that
stopped for a crash or a daemon it could not reach stays ``started``.

The real CLI runs from inside the guarded repository on a real pseudo-terminal against a
real daemon on a loopback port (``test_run_drift.Terminal``): the builder refuses a FIFO
the command made over a tracked file (a copy clone unconfined, an overlay under
bubblewrap), the daemon refuses a bundle past the run's blob quota (with ``--yes``, in
its one request; at a terminal, at the upload), and a daemon killed while the command
waits (the command says so on one FIFO and waits on another) leaves the step as a crash
leaves it: ``promoter run --list`` says ``interrupted``. Each test asserts the step's
state in ``run.json``, the error's code and exit status, what ``--list`` prints and the
person's files, byte for byte.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from promoter.executor import layers
from promoter.executor import sandbox as sandboxes
from tests.support import bwrap
from tests.support.daemon import Daemon
from tests.support.process import DaemonProcess
from tests.support.promotion import git_dir_digest, tree_bytes
from tests.workflow.test_run_drift import CLI, WAIT, Terminal

pytestmark = pytest.mark.repo(files={"README.md": b"# project\n", "src/app.py": b"v1\n"})

BIG = 4096  # the new file of the quota's test, past its quota


def _run(
    url: str, state_dir: Path, repo: Path, script: str, *extra: str, env: dict[str, str]
) -> Terminal:
    argv = [*CLI, "run", "--state-dir", str(state_dir), "--url", url, "--repo", "work"]
    argv += [*extra, "--", "sh", "-c", script]
    return Terminal(argv, repo, {"PAGER": "cat", **env})


def _listed(url: str, state_dir: Path, repo: Path) -> bytes:
    """What ``promoter run --list`` prints, run from the person's repository."""
    listed = Terminal(
        [*CLI, "run", "--list", "--state-dir", str(state_dir), "--url", url], repo, {}
    )
    assert listed.finish() == 0, listed.text()
    return listed.plain


def _record(state_dir: Path) -> sandboxes.RunRecord:
    (record,) = sandboxes.list_runs(state_dir)
    return record


@pytest.mark.parametrize("layout", ["copy", "overlay"])
def test_a_fifo_the_command_makes_over_a_tracked_file_ends_the_step_refused(
    daemon: Daemon, repo: Path, layout: str
) -> None:
    """The builder's ``path_unsafe`` is a definite answer: the step ends ``refused``, no
    bundle, and ``run --list`` says ``refused``, never ``interrupted`` (which reads as a
    crash). A copy clone runs the command unconfined, an overlay under bubblewrap."""
    extra = ["--unconfined"] if layout == "copy" else []
    if layout == "overlay":
        bwrap.confining()
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    term = _run(
        daemon.url,
        daemon.state_dir,
        repo,
        "rm README.md && mkfifo README.md",
        "--yes",
        *extra,
        env={layers.LAYOUT_ENV: layout},
    )
    assert term.finish() == 75, term.text()
    assert b"error [path_unsafe] the worktree has changes that cannot be promoted: " in term.plain
    record = _record(daemon.state_dir)
    assert record.layout == layout
    [step] = record.steps
    assert (step.status, step.bundle_id, step.operation_id) == ("refused", None, None)
    assert step.code == "path_unsafe"
    listed = _listed(daemon.url, daemon.state_dir, repo)
    assert f"{record.run_id}  work  1 step(s), last refused (path_unsafe)  ".encode() in listed
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before


@pytest.mark.daemon(executor_quota_bytes=BIG // 2)
@pytest.mark.parametrize("yes", [True, False], ids=["one-request", "at-a-terminal"])
def test_a_bundle_the_daemon_refuses_ends_the_step_refused(
    daemon: Daemon, repo: Path, yes: bool
) -> None:
    """The daemon's problem answer (``quota_exceeded``: the run's new blobs past its
    quota) is a definite answer too, whether the bundle went in ``--yes``'s one request
    or was uploaded before the question: the step ends ``refused``, nothing written."""
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    script = f"head -c {BIG} /dev/zero > big.bin"
    term = _run(
        daemon.url,
        daemon.state_dir,
        repo,
        script,
        "--unconfined",
        *(["--yes"] if yes else []),
        env={},
    )
    assert term.finish() == 73, term.text()
    assert b"error [quota_exceeded] " in term.plain
    assert b"Promote these changes" not in term.plain
    record = _record(daemon.state_dir)
    [step] = record.steps
    assert (step.status, step.bundle_id, step.operation_id) == ("refused", None, None)
    assert step.code == "quota_exceeded"
    listed = _listed(daemon.url, daemon.state_dir, repo)
    assert f"{record.run_id}  work  1 step(s), last refused (quota_exceeded)  ".encode() in listed
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before


def test_a_daemon_killed_before_the_submission_leaves_the_step_interrupted(
    repo: Path, tmp_path: Path
) -> None:
    """A daemon that cannot be reached is no answer about the change: the step stays
    ``started`` (``server_unavailable``, exit 69) and ``run --list`` says
    ``interrupted``, as after a crash."""
    ready, go = tmp_path / "ready.fifo", tmp_path / "go.fifo"
    os.mkfifo(ready)
    os.mkfifo(go)
    script = f"echo new > new.txt && echo waiting > {ready} && read x < {go}"
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    state_dir = tmp_path / "state"
    daemon = DaemonProcess(state_dir, {"work": repo})
    try:
        term = _run(daemon.url, state_dir, repo, script, "--unconfined", "--yes", env={})
        heard: list[bytes] = []  # the command's word: it has run, nothing is submitted
        listener = threading.Thread(target=lambda: heard.append(ready.read_bytes()), daemon=True)
        listener.start()
        listener.join(WAIT)
        assert heard == [b"waiting\n"], term.text()
        daemon.kill()
        released = threading.Thread(target=lambda: go.write_bytes(b"go\n"), daemon=True)
        released.start()
        assert term.finish() == 69, term.text()
        released.join(WAIT)
    finally:
        daemon.kill()
    assert b"error [server_unavailable] cannot reach the promoter server at " in term.plain
    record = _record(state_dir)
    [step] = record.steps
    assert (step.status, step.bundle_id, step.operation_id, step.code) == (
        "started",
        None,
        None,
        None,
    )
    listed = _listed(daemon.url, state_dir, repo)
    assert f"{record.run_id}  work  1 step(s), last interrupted  ".encode() in listed
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
