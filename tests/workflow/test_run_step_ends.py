"""Every step of ``promoter run`` ends with a status that says what happened, and its code.

Through the real CLI on a real pseudo-terminal against a real daemon on a loopback port
(``test_run_drift.Terminal``), the command pausing on a FIFO while the test plays the
person or the host: the person's HEAD moved during the run ends the step ``refused`` for
``base_moved`` (never offered a merge, which cannot mend a base gone); the run's token
expired before its bundle reached the host ends it ``interrupted`` for
``unauthenticated`` (nothing was decided about the change); a file of an overlay's upper
layer changed while its blob was read again for the upload (fault point
``layer_blob_read``, under bubblewrap) ends it ``interrupted`` for ``source_changed``.
Each names the next command; ``run.json`` records the code and ``run --list`` shows it.
With ``--from-head`` a tracked directory the person made mode 000 is never written by the
daemon (root could): ``path_unsafe`` names it and ``chmod u+rwx``.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from promoter.executor import layers
from promoter.executor import sandbox as sandboxes
from promoter.store.tables import ExecutorTokenRow
from tests.gitutil import commit_all, git
from tests.support import bwrap
from tests.support.daemon import Daemon
from tests.support.flows import ts
from tests.support.pause import Pause
from tests.support.promotion import git_dir_digest, tree_bytes
from tests.workflow.test_run_drift import CLI, WAIT, Terminal

pytestmark = pytest.mark.repo(files={"README.md": b"# project\n", "src/app.py": b"v1\n"})


def _run(daemon: Daemon, repo: Path, script: str, *extra: str, env: dict[str, str]) -> Terminal:
    argv = [*CLI, "run", "--state-dir", str(daemon.state_dir), "--url", daemon.url]
    argv += ["--repo", "work", *extra, "--", "sh", "-c", script]
    return Terminal(argv, repo, {"PAGER": "cat", **env})


def _listed(daemon: Daemon, repo: Path) -> bytes:
    argv = [*CLI, "run", "--list", "--state-dir", str(daemon.state_dir), "--url", daemon.url]
    listed = Terminal(argv, repo, {})
    assert listed.finish() == 0, listed.text()
    return listed.plain


def _pausing(tmp_path: Path, edit: str) -> tuple[str, Path, Path]:
    """The command's script: ``edit``, then word on one FIFO and a wait on another."""
    ready, go = tmp_path / "ready.fifo", tmp_path / "go.fifo"
    os.mkfifo(ready)
    os.mkfifo(go)
    return f"{edit} && echo waiting > {ready} && read x < {go}", ready, go


def _while_paused(ready: Path, go: Path, act: Callable[[], None]) -> None:
    """Wait for the command's word, ``act``, then let the command end."""
    heard: list[bytes] = []
    listener = threading.Thread(target=lambda: heard.append(ready.read_bytes()), daemon=True)
    listener.start()
    listener.join(WAIT)
    assert heard == [b"waiting\n"], "the command never reached its pause"
    act()
    go.write_bytes(b"go\n")


def _step(daemon: Daemon) -> sandboxes.Step:
    (record,) = sandboxes.list_runs(daemon.state_dir)
    [step] = record.steps
    return step


@pytest.mark.parametrize("yes", [True, False], ids=["one-request", "at-a-terminal"])
def test_a_head_moved_during_the_run_ends_the_step_refused_for_its_base(
    daemon: Daemon, repo: Path, tmp_path: Path, yes: bool
) -> None:
    """The preflight (at a terminal) or the one request's promotion (``--yes``) refuses
    the change: HEAD is not its base. The step ends ``refused`` with ``base_moved`` (not
    ``preflight_refused``, not a merge offered), exit 75, the person's commit untouched."""
    base = git(repo, "rev-parse", "HEAD").strip()
    script, ready, go = _pausing(tmp_path, "echo new > new.txt")
    extra = ["--unconfined", *(["--yes"] if yes else [])]
    term = _run(daemon, repo, script, *extra, env={})

    def commit() -> None:
        (repo / "README.md").write_bytes(b"# project, moved on\n")
        commit_all(repo, "the person moves on")

    _while_paused(ready, go, commit)
    moved = git(repo, "rev-parse", "HEAD").strip()
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    assert term.finish() == 75, term.text()
    run_id = sandboxes.list_runs(daemon.state_dir)[0].run_id
    assert (
        f"error [base_moved] work's HEAD moved from {base[:12]} to {moved[:12]} since run "
        f"{run_id} began: its change was made against a base that no longer is HEAD; "
        "nothing was written; next: start again from your files as they are now: "
        "promoter run --repo work -- CMD"
    ).encode() in term.plain
    assert b"promoter merge" not in term.plain and b"merge your edit" not in term.plain
    step = _step(daemon)
    assert (step.status, step.code) == ("refused", "base_moved")
    assert f"{run_id}  work  1 step(s), last refused (base_moved)  ".encode() in _listed(
        daemon, repo
    )
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before


def test_a_token_expired_before_the_bundle_reached_the_host_ends_the_step_interrupted(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """A 401 says nothing of the change: the step ends ``interrupted`` with
    ``unauthenticated`` (never ``refused``), exit 77, naming the kept sandbox and the
    step to run again; nothing reached the host, nothing of the person's changed. The
    named command carries the options the record does not hold (``--keep``,
    ``--unconfined``, ``--timeout``): run as printed, at a terminal, it runs the step as
    the first ran (unconfined), offers the kept change and keeps the sandbox."""
    script, ready, go = _pausing(tmp_path, "echo new > new.txt")
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    term = _run(daemon, repo, script, "--unconfined", "--keep", "--timeout", "600", env={})

    def expire() -> None:
        (record,) = sandboxes.list_runs(daemon.state_dir)
        with daemon.services.db.session() as session:
            session.execute(
                update(ExecutorTokenRow)
                .where(ExecutorTokenRow.executor_run_id == record.run_id)
                .values(expires_at=ts(timedelta(seconds=-1)))
            )

    _while_paused(ready, go, expire)
    assert term.finish() == 77, term.text()
    (record,) = sandboxes.list_runs(daemon.state_dir)
    assert b"error [unauthenticated] " in term.plain
    named = f"promoter run --continue {record.run_id} --keep --unconfined --timeout 600 -- true"
    assert (
        f"nothing was decided about the change; the sandbox is kept: {record.clone}; with a "
        f"credential the daemon accepts, build and offer it again: {named}"
    ).encode() in term.plain
    step = _step(daemon)
    assert (step.status, step.code, step.bundle_id) == ("interrupted", "unauthenticated", None)
    listed = _listed(daemon, repo)
    assert f"{record.run_id}  work  1 step(s), last interrupted (unauthenticated)  ".encode() in (
        listed
    )
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
    # the command it names, as printed (the daemon found as for any command), does what
    # it says: the step again as the first ran, the kept change offered at the terminal
    printed = re.search(rb"build and offer it again: (promoter run [^\r\n]*-- true)", term.plain)
    assert printed is not None, term.text()
    found = {"PROMOTER_STATE_DIR": str(daemon.state_dir), "PROMOTER_URL": daemon.url}
    again = Terminal([*CLI, *shlex.split(printed[1].decode())[1:]], repo, found)
    again.expect(b"Promote these changes into the worktree?")
    again.send(b"y\r")
    assert again.finish() == 0, again.text()
    assert f"running true in {record.clone} (unconfined)".encode() in again.plain
    assert (repo / "new.txt").read_bytes() == b"new\n"
    assert b"sandbox kept: " in again.plain and Path(record.clone).is_dir()


def test_a_file_changed_while_its_blob_was_read_ends_the_step_interrupted(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """Under bubblewrap, an overlay: the new file's bytes change between the seal and the
    upload's read (``layer_blob_read`` paused). ``source_changed`` (75), not
    ``config_error``: the step ends ``interrupted`` with the code and the next command."""
    bwrap.confining()
    pause = Pause(tmp_path, "layer_blob_read")
    env = {layers.LAYOUT_ENV: "overlay", "PROMOTER_FAULTS": pause.spec}
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    term = _run(daemon, repo, "echo new > new.txt", env=env)
    pause.reached()  # sealed; its blob is read again for the upload
    (record,) = sandboxes.list_runs(daemon.state_dir)
    (Path(record.clone).parent / "layers" / "upper" / "new.txt").write_bytes(b"changed\n")
    pause.release()
    assert term.finish() == 75, term.text()
    assert b"error [source_changed] " in term.plain
    assert b"new.txt changed while it was read" in term.plain or b"while the bundle" in term.plain
    assert (
        f"nothing was decided about the change; the sandbox is kept: {record.clone}; build "
        "and offer it again once the command's processes are done: promoter run --continue "
        f"{record.run_id} -- true"
    ).encode() in term.plain
    step = _step(daemon)
    assert (step.status, step.code, step.bundle_id) == ("interrupted", "source_changed", None)
    listed = _listed(daemon, repo)
    assert f"{record.run_id}  work  1 step(s), last interrupted (source_changed)  ".encode() in (
        listed
    )
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before


def test_a_directory_the_person_closed_to_themselves_is_not_written_from_head(
    daemon: Daemon, repo: Path
) -> None:
    """``--from-head`` starts without reading the person's files, so a tracked directory
    they made mode 000 reaches the promotion; the daemon (root) could go in, but refuses:
    ``path_unsafe`` naming the directory and ``chmod u+rwx``, the step ``refused``, the
    file under it byte for byte as it was."""
    src = repo / "src"
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    src.chmod(0o000)
    try:
        script = "echo v2 > src/app.py && echo new > src/new.py"
        term = _run(daemon, repo, script, "--from-head", "--unconfined", "--yes", env={})
        assert term.finish() == 75, term.text()
        assert stat.S_IMODE(src.stat().st_mode) == 0o000
    finally:
        src.chmod(0o755)
    assert b"error [path_unsafe] " in term.plain
    reopen = shlex.quote(str(repo.resolve() / "src"))  # works from anywhere, as printed
    assert (
        "a target is unsafe to touch (src/app.py and 1 more: path_unsafe: the directory 'src' "
        "is closed to its owner (mode 000): nothing is read or written under it; next: open "
        f"it again (chmod u+rwx {reopen}) and promote again); nothing was written"
    ).encode() in term.plain
    step = _step(daemon)
    assert (step.status, step.code) == ("refused", "path_unsafe")
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before


def test_a_head_moved_as_the_run_starts_is_base_moved_and_nothing_is_made(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """An overlay's start, paused once the daemon said HEAD (``start_head_read``): the
    person commits, and the start's own read of HEAD finds it moved. ``base_moved`` (75,
    a race to run again), not ``config_error`` (78, a setting to fix): nothing was made,
    no sandbox, no step; the person's commit untouched."""
    bwrap.confining()
    base = git(repo, "rev-parse", "HEAD").strip()
    pause = Pause(tmp_path, "start_head_read")
    env = {layers.LAYOUT_ENV: "overlay", "PROMOTER_FAULTS": pause.spec}
    term = _run(daemon, repo, "echo new > new.txt", env=env)
    pause.reached()
    (repo / "README.md").write_bytes(b"# project, moved on\n")
    commit_all(repo, "the person moves on")
    moved = git(repo, "rev-parse", "HEAD").strip()
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    pause.release()
    assert term.finish() == 75, term.text()
    assert (
        f"error [base_moved] {repo}'s HEAD moved from {base[:12]} to {moved[:12]} while the "
        "run started; nothing was made; next: run the same command again: it starts from "
        "HEAD and your files as they are then"
    ).encode() in term.plain
    assert sandboxes.list_runs(daemon.state_dir) == []
    assert not (repo / "new.txt").exists()
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
