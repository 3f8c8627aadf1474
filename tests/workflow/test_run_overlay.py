"""Layered sandboxes (protocol: runs#layered-sandboxes): real daemon, git, overlayfs and bubblewrap.

The sandbox is an overlay of promoter's cached base of HEAD, a start layer of the
person's uncommitted work and the run's upper layer. These tests check what the command
sees (the kernel's merge, reported from inside), that the bundle is the upper layer's
files and whiteouts against the start state, that a base is never changed or removed
under a live run, that a kill at each point of a sandbox's making and removal
leaves the person's files as they were and nothing of promoter's that the next run does
not sweep, and that Ctrl-C while the daemon holds the start's watch request ends the
start at once.

Without bubblewrap the module is skipped with one line, unless ``PROMOTER_REQUIRE_BWRAP=1``.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from promoter import faults
from promoter.executor import base_cache, layered, layers, removal
from promoter.executor import sandbox as sandboxes
from tests.gitutil import git
from tests.support import bwrap
from tests.support.daemon import Daemon
from tests.support.fixtures import Serve
from tests.support.pause import Pause
from tests.support.promotion import git_dir_digest, operation_receipt, tree_bytes
from tests.support.repos import Repos
from tests.support.sandbox_view import sandbox_file, sandbox_tree
from tests.workflow.test_run_command import _only_run, _run

bwrap.required(module=True)

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    ".gitignore": b"*.log\nbuild/\n",
    "README.md": b"# project\n",
    "src/app.py": b"print('v1')\n",
    "src/util.py": b"def f(): pass\n",
    "tool.sh": b"echo tool\n",
    "old.txt": b"to be deleted by the person\n",
    "emptied/only.txt": b"the only file of a directory the person empties\n",
    "swap": b"a file the person turns into a directory\n",
    "pkg/a.py": b"a directory the person turns into a file\n",
}


@pytest.fixture(autouse=True)
def overlay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(layers.LAYOUT_ENV, "overlay")


pytestmark = pytest.mark.repo(files=FILES)


def _dirty(repo: Path) -> None:
    """The person's uncommitted work of every kind the start layer must carry."""
    (repo / "README.md").write_bytes(b"# project\nthe person's unstaged line\n")
    (repo / "src" / "app.py").write_bytes(b"print('staged')\n")
    git(repo, "add", "src/app.py")
    (repo / "notes.txt").write_bytes(b"untracked notes\n")
    (repo / "latest").symlink_to("notes.txt")
    (repo / "tool.sh").chmod(0o755)
    (repo / "old.txt").unlink()
    (repo / "emptied" / "only.txt").unlink()
    (repo / "emptied").rmdir()
    (repo / "swap").unlink()
    (repo / "swap").mkdir()
    (repo / "swap" / "inner.txt").write_bytes(b"inside the new directory\n")
    (repo / "pkg" / "a.py").unlink()
    (repo / "pkg").rmdir()
    (repo / "pkg").write_bytes(b"now a file\n")
    (repo / "debug.log").write_bytes(b"ignored: never copied\n")


# Inside the sandbox: every entry but .git, with its bytes' digest and mode, or link target.
VIEW = r"""
import hashlib, json, os, stat
seen = {}
for top, dirs, files in os.walk("."):
    dirs[:] = sorted(d for d in dirs if not (top == "." and d == ".git"))
    for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
        path = os.path.join(top, name)[2:]
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            seen[path] = "link:" + os.readlink(path)
        else:
            data = open(path, "rb").read()
            seen[path] = "%s %o" % (hashlib.sha256(data).hexdigest(), st.st_mode & 0o7777)
    for name in dirs:
        if not os.listdir(os.path.join(top, name)):
            seen[os.path.join(top, name)[2:] + "/"] = "empty directory"
open(os.environ["HOME"] + "/view.json", "w").write(json.dumps(seen, sort_keys=True))
"""


def _person_view(repo: Path) -> dict[str, str]:
    seen: dict[str, str] = {}
    for path, (data, mode) in tree_bytes(repo).items():
        if path == "debug.log":
            continue
        if mode == -1:
            seen[path] = "link:" + data.decode()
        else:
            seen[path] = f"{hashlib.sha256(data).hexdigest()} {mode:o}"
    return seen


def _python() -> str:
    return str(getattr(sys, "_base_executable", sys.executable))


def test_the_start_state_is_byte_exact_inside_the_overlay(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    _dirty(repo)
    git_before = git_dir_digest(repo)
    person = _person_view(repo)
    result = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", _python(), "-c", VIEW)
    assert result.exit_code == 0, result.output
    record = _only_run(daemon)
    assert record.layout == "overlay"
    assert f"({record.layout})" in result.stdout
    home = Path(record.clone).parent / "home"
    seen = json.loads((home / "view.json").read_bytes())
    assert seen == person  # the kernel's merge of base, start layer (and nothing written)
    assert "no changes" in result.stdout
    start = Path(record.clone).parent / "layers" / "start"
    assert layers.is_whiteout(os.lstat(start / "old.txt"))
    assert layers.is_whiteout(os.lstat(start / "emptied"))  # no empty directory left
    assert git_dir_digest(repo) == git_before
    # the start tree, written from the edited paths only, is git's own tree of the worktree
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "index")}
    for argv in (["read-tree", "HEAD"], ["add", "-A"]):
        subprocess.run(["git", *argv], cwd=copy, env=env, check=True)
    written = subprocess.run(["git", "write-tree"], cwd=copy, env=env, check=True,
                             capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert record.start_tree == written


def test_whiteouts_become_deletions_and_an_opaque_directory_removes_what_was_below(
    daemon: Daemon, repo: Path
) -> None:
    script = (
        "rm README.md && rm -rf src && mkdir src && printf 'only\\n' > src/only.py"
        " && printf 'x\\n' > new.log && mkdir build && printf 'o\\n' > build/x.o"
        " && cp tool.sh tool.sh.tmp && mv tool.sh.tmp tool.sh"  # copied up, same bytes
    )
    result = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", "sh", "-c", script)
    assert result.exit_code == 0, result.output
    record = _only_run(daemon)
    upper = Path(record.clone).parent / "layers" / "upper"
    assert layers.is_whiteout(os.lstat(upper / "README.md"))
    assert layers.opaque(os.fsencode(upper / "src"))
    operation = record.steps[0].operation_id
    assert operation is not None
    targets = {t["path"]: t["exists"] for t in operation_receipt(daemon, operation)["targets"]}
    assert targets == {
        "README.md": False,
        "src/app.py": False,
        "src/util.py": False,
        "src/only.py": True,
    }  # ignored new files (new.log, build/) and an unchanged copy-up are no change
    assert not (repo / "README.md").exists() and not (repo / "src" / "app.py").exists()
    assert (repo / "src" / "only.py").read_bytes() == b"only\n"
    assert sandbox_tree(record) == tree_bytes(repo) | {
        "new.log": (b"x\n", 0o644),
        "build/x.o": (b"o\n", 0o644),
    }


def _cli(daemon: Daemon, *args: str, faults: str = "") -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "promoter.cli.main", "run"]
    argv += ["--state-dir", str(daemon.state_dir), "--url", daemon.url, *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env |= {"PYTHONPATH": str(ROOT), layers.LAYOUT_ENV: "overlay"}
    if faults:
        env["PROMOTER_FAULTS"] = faults
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_a_persons_edit_during_the_run_is_drift(daemon: Daemon, repo: Path, tmp_path: Path) -> None:
    pause = Pause(tmp_path, "start_laid")
    script = "printf 'the agent\\n' >> README.md"
    cli = _cli(daemon, "--repo", "work", "--yes", "--", "sh", "-c", script, faults=pause.spec)
    pause.reached()
    (repo / "README.md").write_bytes(b"# project\nsaved by the person during the run\n")
    pause.release()
    out, _ = cli.communicate(timeout=300)
    assert cli.returncode != 0, out
    assert b"README.md" in out and b"drift" in out.lower()
    assert (repo / "README.md").read_bytes() == b"# project\nsaved by the person during the run\n"


def test_a_second_repositorys_first_run_is_not_laid_over_anothers_base(
    repos: Repos, serve: Serve
) -> None:
    """One state directory guards two repositories: a base of one is no parent for the
    other's tree, whose objects the other repository does not hold."""
    first_repo = repos("work", FILES)
    other_repo = repos("other", {"other.txt": b"another project\n"})
    daemon = serve({"work": first_repo, "other": other_repo})
    first = _run(daemon, "run", "--repo", "work", "--yes", "--", "true")
    assert first.exit_code == 0, first.output
    second = _run(daemon, "run", "--repo", "other", "--yes", "--", "sh", "-c", "echo n > new.txt")
    assert second.exit_code == 0, second.output
    assert (other_repo / "new.txt").read_bytes() == b"n\n"
    tree = git(other_repo, "rev-parse", "HEAD^{tree}").strip()
    made = base_cache.load(daemon.state_dir, tree)
    assert made is not None and made.parent is None and made.depth == 1


def _digest(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for top, _, files in os.walk(root):
        for name in files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            body = os.readlink(path).encode() if stat.S_ISLNK(st.st_mode) else b""
            if stat.S_ISREG(st.st_mode):
                body = Path(path).read_bytes()
            out[os.path.relpath(path, root)] = f"{st.st_mode:o} {st.st_mtime_ns} " + (
                hashlib.sha256(body).hexdigest()
            )
    return out


def test_the_base_of_a_live_run_stays_while_head_moves_and_a_new_run_gets_a_new_base(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    pause = Pause(tmp_path, "start_laid")
    live = _cli(daemon, "--repo", "work", "--yes", "--", "true", faults=pause.spec)
    pause.reached()
    (first,) = sandboxes.list_runs(daemon.state_dir)
    base = base_cache.bases_dir(daemon.state_dir) / first.base_tree
    before = _digest(base)
    # a commit of every kind of change: the new base is a layer of them over the old one
    (repo / "src" / "app.py").write_bytes(b"print('v2')\n")
    _dirty(repo)
    (repo / "latest").unlink()
    (repo / "debug.log").unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "moved")
    status = "git -c safe.directory='*' status --porcelain > \"$HOME/status\""
    later = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", "sh", "-c", status)
    assert later.exit_code == 0, later.output
    (second,) = [r for r in sandboxes.list_runs(daemon.state_dir) if r.run_id != first.run_id]
    assert second.base_tree != first.base_tree
    made = base_cache.load(daemon.state_dir, second.base_tree)
    assert made is not None and made.parent == first.base_tree and made.depth == 2
    assert sandbox_tree(second) == tree_bytes(repo)  # the chain is the new commit, exactly
    assert (Path(second.clone).parent / "home" / "status").read_bytes() == b""  # its index
    with base_cache.lock(daemon.state_dir):
        assert (
            base_cache.sweep(daemon.state_dir, sandboxes.used_bases(daemon.state_dir), keep=0) == []
        )
    assert _digest(base) == before  # never written, never removed under the live run
    pause.release()
    out, _ = live.communicate(timeout=300)
    assert live.returncode != 0 and b"HEAD moved" in out, out
    assert _digest(base) == before
    removed = _run(daemon, "run", "--remove", first.run_id)
    assert removed.exit_code == 0, removed.output
    with base_cache.lock(daemon.state_dir):
        swept = base_cache.sweep(daemon.state_dir, sandboxes.used_bases(daemon.state_dir), keep=0)
    assert swept == []  # the second base is a layer over the first: both stay
    assert _run(daemon, "run", "--remove", second.run_id).exit_code == 0
    with base_cache.lock(daemon.state_dir):
        swept = base_cache.sweep(daemon.state_dir, sandboxes.used_bases(daemon.state_dir), keep=0)
    assert sorted(swept) == sorted([first.base_tree, second.base_tree])  # provably promoter's
    assert os.listdir(base_cache.bases_dir(daemon.state_dir)) == [".lock"]


def _leftovers(state: Path) -> list[str]:
    found = []
    for folder in (state / "runs", state / "bases"):
        if folder.is_dir():
            found += [n for n in os.listdir(folder) if n.startswith((".promoter-", "run_"))]
    return sorted(found)


def _wait_gone(marker: str) -> None:
    """Wait (bounded) until no process has ``marker`` on its command line."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        alive = False
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    alive |= marker.encode() in (entry / "cmdline").read_bytes()
                except OSError:
                    continue
        if not alive:
            return
        time.sleep(0.01)
    raise AssertionError(f"a process with {marker} still runs")


@pytest.mark.parametrize(
    "point", ["base_built", "base_placed", "layers_made", "start_laid", "removal_renamed"]
)
def test_a_kill_while_a_sandbox_is_made_or_removed_touches_nothing_and_leaks_nothing(
    daemon: Daemon, repo: Path, point: str
) -> None:
    _dirty(repo)
    git_before, files_before = git_dir_digest(repo), tree_bytes(repo)
    script = ["sh", "-c", "printf 'agent\\n' > agent.txt"]
    killed = _cli(daemon, "--repo", "work", "--yes", "--", *script, faults=f"{point}=kill")
    out, _ = killed.communicate(timeout=300)
    assert killed.returncode == 137, out
    if point == "removal_renamed":  # killed after the promotion, as the sandbox goes
        files_before["agent.txt"] = (b"agent\n", 0o644)
    assert git_dir_digest(repo) == git_before and tree_bytes(repo) == files_before
    for record in sandboxes.list_runs(daemon.state_dir):  # made, not finished: named
        listed = _run(daemon, "run", "--remove", record.run_id)
        assert listed.exit_code == 0, listed.output
    again = _run(daemon, "run", "--repo", "work", "--yes", "--", "true")  # sweeps first
    assert again.exit_code == 0, again.output
    assert "no changes" in again.stdout
    (kept,) = sandboxes.list_runs(daemon.state_dir)
    assert _run(daemon, "run", "--remove", kept.run_id).exit_code == 0
    _wait_gone("promoter.executor.removal")
    assert _leftovers(daemon.state_dir) == []
    assert git_dir_digest(repo) == git_before and tree_bytes(repo) == files_before


def _killed_at(pause: Pause) -> None:
    """SIGKILL the process paused at ``pause`` (its pid is in the marker) and return once it
    has ended. The removal may be a fork of the command line, whose command line names no
    removal: it is known by its pid, never looked for by name."""
    pause.reached()
    pid = int(Path(f"{pause.release_file}.paused").read_text())
    pidfd = os.pidfd_open(pid)  # paused: it cannot end before it is killed
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        ended = select.poll()
        ended.register(pidfd, select.POLLIN)
        assert ended.poll(60_000), f"the removal {pid} did not end"
    finally:
        os.close(pidfd)


def test_a_kill_of_the_background_removal_is_finished_by_the_next_run(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    git_before = git_dir_digest(repo)
    script = ["sh", "-c", "printf 'agent\\n' > agent.txt"]
    walking = Pause(tmp_path, "removal_walking")  # the removal's lock taken, nothing removed
    killed = _cli(daemon, "--repo", "work", "--yes", "--", *script, faults=walking.spec)
    out, _ = killed.communicate(timeout=300)
    assert killed.returncode == 0, out
    _killed_at(walking)  # killed holding its lock: the next run's sweep can take it
    (left,) = [n for n in os.listdir(daemon.state_dir / "runs") if n.startswith(".promoter-")]
    assert left.startswith(removal.REMOVING + "run_")
    assert sandboxes.list_runs(daemon.state_dir) == []
    again = _run(daemon, "run", "--repo", "work", "--yes", "--", "true")  # sweeps first
    assert again.exit_code == 0, again.output
    (kept,) = sandboxes.list_runs(daemon.state_dir)
    assert _run(daemon, "run", "--remove", kept.run_id).exit_code == 0
    assert _leftovers(daemon.state_dir) == []
    assert git_dir_digest(repo) == git_before
    assert (repo / "agent.txt").read_bytes() == b"agent\n"


def test_a_sandbox_holds_only_its_own_layers_before_the_command_writes(
    daemon: Daemon, repo: Path
) -> None:
    _dirty(repo)
    result = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", "true")
    assert result.exit_code == 0, result.output
    record = _only_run(daemon)
    home = Path(record.clone).parent
    assert sorted(os.listdir(home / "layers" / "upper")) == []
    assert os.listdir(home / "clone") == []  # a mount point only: nothing on the host
    found = sandbox_file(record, "notes.txt")
    assert found is not None and found.read_bytes() == b"untracked notes\n"
    base = base_cache.bases_dir(daemon.state_dir) / record.base_tree / "tree"
    assert (base / "old.txt").read_bytes() == FILES["old.txt"]  # HEAD's, shared, as stored
    assert not any(p.stat().st_nlink > 1 for p in home.rglob("*") if p.is_file())


@pytest.mark.parametrize("layout", ["copy", "overlay"])
@pytest.mark.parametrize(
    ("script", "path", "reason"),
    [
        ("ln -s /etc/passwd evil", "evil", "the new state is a symbolic link"),
        ("mkdir sub && git init -q sub && echo x > sub/f", "sub", "nested repository"),
    ],
)
def test_a_link_or_a_nested_repository_the_command_makes_is_refused_on_both_layouts(
    daemon: Daemon,
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
    script: str,
    path: str,
    reason: str,
) -> None:
    monkeypatch.setenv(layers.LAYOUT_ENV, layout)
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    result = _run(daemon, "run", "--repo", "work", "--yes", "--", "sh", "-c", script)
    assert result.exception is not None, result.output
    assert getattr(result.exception, "code", None) == "path_unsafe", result.output
    assert reason in result.exception.args[0] or reason in str(result.exception)
    assert path in str(result.exception)
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
    (record,) = sandboxes.list_runs(daemon.state_dir)
    assert record.layout == layout


def test_ctrl_c_while_the_daemon_holds_the_starts_watch_request_ends_at_once(
    daemon: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon holds the start's watch request (``start_watch_asked``) while the start
    waits for its answer (``start_ask_awaited``); Ctrl-C (a real SIGINT) ends the command
    line with the request still held, not when its client gives up (60 s): the person's
    files untouched, the partial sandbox removed and said so, as for Ctrl-C elsewhere in
    the start."""
    _dirty(repo)
    git_before, files_before = git_dir_digest(repo), tree_bytes(repo)
    held = Pause(tmp_path, "start_watch_asked")  # in the daemon, this process
    monkeypatch.setenv(faults.ENV, held.spec)
    monkeypatch.setenv(faults.PAUSE_LIMIT_ENV, "600")
    faults.reset()
    awaited = Pause(tmp_path, "start_ask_awaited")  # in the command line
    cli = _cli(daemon, "--repo", "work", "--yes", "--", "true", faults=awaited.spec)
    try:
        held.reached()
        awaited.reached()
        cli.send_signal(signal.SIGINT)
        out, _ = cli.communicate(timeout=30)  # half the client's 60 s: never its timeout
    finally:
        held.release()
    assert cli.returncode == 130, out
    assert out.decode().splitlines()[-1] == (
        "error [interrupted] interrupted before the sandbox was ready: nothing was run or "
        "promoted, and nothing of yours was changed"
    )
    assert sandboxes.list_runs(daemon.state_dir) == []
    assert _leftovers(daemon.state_dir) == []
    assert git_dir_digest(repo) == git_before and tree_bytes(repo) == files_before


def test_a_fifo_or_socket_made_over_a_file_or_directory_is_refused_not_dropped(
    daemon: Daemon, repo: Path
) -> None:
    """A FIFO over a base file and a socket over a base directory hide them in the
    sandbox; the bundle cannot carry that, and leaving them out would promote a tree the
    command did not leave: refused, naming both. A FIFO over nothing is left out."""
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    body = (
        "import os, shutil, socket\n"
        "os.remove('README.md'); os.mkfifo('README.md')\n"
        "shutil.rmtree('src'); socket.socket(socket.AF_UNIX).bind('src')\n"
        "os.mkfifo('new-fifo')\n"
    )
    result = _run(daemon, "run", "--repo", "work", "--yes", "--", _python(), "-c", body)
    assert getattr(result.exception, "code", None) == "path_unsafe", result.output
    refused = {item["path"]: item["reason"] for item in result.exception.context["paths"]}
    reason = "a FIFO, socket or device over a file or directory: git cannot carry it"
    assert refused == {"README.md": reason, "src": reason}
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
    (record,) = sandboxes.list_runs(daemon.state_dir)  # kept, named: removed on request
    assert _run(daemon, "run", "--remove", record.run_id).exit_code == 0
    _wait_gone("promoter.executor.removal")
    assert _leftovers(daemon.state_dir) == []


COVERED_FILES = (
    "os.remove('README.md'); os.mkfifo('README.md')\n"
    "os.remove('tool.sh'); socket.socket(socket.AF_UNIX).bind('tool.sh')\n"
    "shutil.rmtree('src'); socket.socket(socket.AF_UNIX).bind('src')\n"
)
COVERED_DIRECTORY = "shutil.rmtree('src'); os.mkfifo('src')\n"


@pytest.mark.parametrize("layout", ["copy", "overlay"])
@pytest.mark.parametrize(
    ("covering", "paths"),
    [(COVERED_FILES, ["README.md", "src", "tool.sh"]), (COVERED_DIRECTORY, ["src"])],
    ids=["files", "directory"],
)
def test_a_fifo_or_socket_over_a_tracked_file_is_refused_on_both_layouts_not_a_git_error(
    daemon: Daemon,
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
    covering: str,
    paths: list[str],
) -> None:
    """A FIFO over one tracked file, a socket over another and over a directory (or a
    FIFO over a directory alone): the copy clone's git cannot add them (it failed with
    ``git_error``) or sees the directory's files only deleted. Both layouts answer
    ``path_unsafe`` naming each path, the person's files and ``.git`` untouched, the
    sandbox kept until removed on request."""
    monkeypatch.setenv(layers.LAYOUT_ENV, layout)
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    body = "import os, shutil, socket\n" + covering + "os.mkfifo('new-fifo')\n"
    result = _run(daemon, "run", "--repo", "work", "--yes", "--", _python(), "-c", body)
    assert getattr(result.exception, "code", None) == "path_unsafe", result.output
    refused = {item["path"]: item["reason"] for item in result.exception.context["paths"]}
    reason = "a FIFO, socket or device over a file or directory: git cannot carry it"
    assert refused == dict.fromkeys(paths, reason)
    assert f"'{paths[0]}': {reason}" in result.exception.detail
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
    (record,) = sandboxes.list_runs(daemon.state_dir)  # kept, named: removed on request
    assert record.layout == layout
    assert not stat.S_ISREG(os.lstat(layered.written_tree(record) / paths[0]).st_mode)
    assert _run(daemon, "run", "--remove", record.run_id).exit_code == 0
    _wait_gone("promoter.executor.removal")
    assert _leftovers(daemon.state_dir) == []


OVERLAY_METADATA = ("opaque", "redirect", "metacopy", "origin", "whiteout", "whiteouts")
SET_METADATA = r"""
import json, os
os.mkdir("newdir")
open("newdir/f", "w").write("f\n")
tried = {}
for target in ("src", "newdir", "README.md"):
    for name in NAMES:
        for space in ("user", "trusted"):
            key = space + ".overlay." + name
            value = b"y" if name == "opaque" else b"/README.md" if name == "redirect" else b""
            try:
                os.setxattr(target, key, value, follow_symlinks=False)
                tried[target + " " + key] = "set"
            except OSError as exc:
                tried[target + " " + key] = type(exc).__name__
tried["src"] = sorted(os.listdir("src"))
open(os.environ["HOME"] + "/tried.json", "w").write(json.dumps(tried))
""".replace("NAMES", repr(OVERLAY_METADATA))


def test_overlay_metadata_the_command_sets_is_escaped_and_changes_nothing(
    daemon: Daemon, repo: Path
) -> None:
    """The command sets overlayfs's own attributes (opaque, redirect, metacopy, origin,
    whiteout) on a base directory, a base file and a directory of its own: the kernel
    stores them escaped (or refuses them), so neither the kernel's merge nor the bundle
    takes them for the layers' metadata: nothing is hidden or deleted, the base keeps no
    attribute, the person's files change only by the new file."""
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    result = _run(
        daemon, "run", "--repo", "work", "--yes", "--keep", "--", _python(), "-c", SET_METADATA
    )
    assert result.exit_code == 0, result.output
    record = _only_run(daemon)
    tried = json.loads((Path(record.clone).parent / "home" / "tried.json").read_bytes())
    assert tried.pop("src") == ["app.py", "util.py"]  # not made opaque by the command
    assert all(v == "PermissionError" for k, v in tried.items() if " trusted." in k), tried
    upper = Path(record.clone).parent / "layers" / "upper"
    for target in ("src", "newdir", "README.md"):
        found = set(os.listxattr(upper / target, follow_symlinks=False))
        forged = {f"user.overlay.{name}" for name in OVERLAY_METADATA if name != "origin"}
        assert not found & forged, (target, found)
    assert not layers.opaque(os.fsencode(upper / "src"))
    operation = record.steps[0].operation_id
    assert operation is not None
    targets = {t["path"]: t["exists"] for t in operation_receipt(daemon, operation)["targets"]}
    assert targets == {"newdir/f": True}
    assert tree_bytes(repo) == before | {"newdir/f": (b"f\n", 0o644)}
    assert git_dir_digest(repo) == git_before
    base = base_cache.bases_dir(daemon.state_dir) / record.base_tree / "tree"
    for name in ("src", "src/app.py", "README.md"):
        assert os.listxattr(base / name, follow_symlinks=False) == []
    assert (base / "README.md").read_bytes() == FILES["README.md"]


def test_a_writer_left_behind_by_the_command_is_ended_before_the_scan(
    daemon: Daemon, repo: Path
) -> None:
    """The command starts a writer in a session of its own (a double fork) that appends
    to a file without end, and exits once it has written: the writer is ended with the
    command, before the upper layer is read, so the promoted bytes are the upper layer's
    as they stay, and no process of it is left."""
    marker = f"writer-{os.getpid()}-{time.monotonic_ns()}"
    body = (
        f"# {marker}: on the command line of every process of the command\n"
        "import os\n"
        "wrote, said = os.pipe()\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        with open('bg.txt', 'ab') as h:\n"
        "            h.write(b'x' * 4096)\n"
        "        os.write(said, b'1')\n"
        "        while True:\n"
        "            with open('bg.txt', 'ab') as h:\n"
        "                h.write(b'x' * 4096)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "os.read(wrote, 1)  # it has written once: the command exits, the writer goes on\n"
    )
    result = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", _python(), "-c", body)
    assert result.exit_code == 0, result.output
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _has(p, marker)]
    record = _only_run(daemon)
    upper = Path(record.clone).parent / "layers" / "upper" / "bg.txt"
    promoted = (repo / "bg.txt").read_bytes()
    assert promoted == upper.read_bytes() and promoted and set(promoted) == {ord("x")}


def _has(process: Path, marker: str) -> bool:
    try:
        return marker.encode() in (process / "cmdline").read_bytes()
    except OSError:
        return False


def test_base_files_linked_written_in_place_or_chmodded_leave_the_shared_base_as_it_was(
    daemon: Daemon, repo: Path
) -> None:
    """The base is shared by every run on the commit: a command that hard-links a base
    file and appends through the link, writes another in place, truncates, chmods and
    touches others only ever writes its own copies (whole copy-up): the base's files,
    modes and times stay, and the next run on the commit sees HEAD's bytes exactly."""
    first = _run(daemon, "run", "--repo", "work", "--yes", "--", "true")
    assert first.exit_code == 0, first.output
    (made,) = [n for n in os.listdir(base_cache.bases_dir(daemon.state_dir)) if n != ".lock"]
    base = base_cache.bases_dir(daemon.state_dir) / made / "tree"  # (its marker is touched)
    before = _digest(base)
    body = (
        "import os\n"
        "os.link('src/app.py', 'linked.py')\n"
        "open('linked.py', 'ab').write(b'# appended through a link\\n')\n"
        "fd = os.open('src/util.py', os.O_RDWR)\n"
        "os.write(fd, b'X')\n"
        "os.close(fd)\n"
        "os.truncate('old.txt', 0)\n"
        "os.chmod('tool.sh', 0o700)\n"
        "os.utime('README.md', (0, 0))\n"
    )
    attack = _run(daemon, "run", "--repo", "work", "--yes", "--", _python(), "-c", body)
    assert attack.exit_code == 0, attack.output
    assert (repo / "linked.py").read_bytes() == FILES["src/app.py"] + b"# appended through a link\n"
    assert (repo / "src" / "app.py").read_bytes() == (repo / "linked.py").read_bytes()
    assert (repo / "src" / "util.py").read_bytes() == b"X" + FILES["src/util.py"][1:]
    assert _digest(base) == before  # nothing of the base written, moved or re-timed
    person = _person_view(repo)
    later = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", _python(), "-c", VIEW)
    assert later.exit_code == 0, later.output
    (record,) = [r for r in sandboxes.list_runs(daemon.state_dir) if r.run_id in later.stdout]
    assert record.base_tree == made
    seen = json.loads((Path(record.clone).parent / "home" / "view.json").read_bytes())
    assert seen == person


CARRIED = {b"latin\xe9.txt": b"latin-1 name\n", b"L" * 255: b"a name of 255 bytes\n"}
REFUSED = {
    "line\nbreak.txt": "path contains a control character",
    ".GIT": "path has a '.git' component",
    "sub/.promoter-tmp-abc": "a path component uses a name reserved for promoter's own files",
}


@pytest.mark.parametrize("layout", ["copy", "overlay"])
def test_names_the_command_makes_are_refused_or_promoted_byte_exact_on_both_layouts(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """Names that are not UTF-8 or are 255 bytes long are promoted byte for byte; a
    newline, a ``.git`` in another case and promoter's reserved temp names are refused
    (``path_invalid``), each named, and nothing of the person's is changed."""
    monkeypatch.setenv(layers.LAYOUT_ENV, layout)
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    make = f"import os\nos.makedirs('sub')\nfor name in {list(REFUSED)!r}:\n"
    make += "    open(name, 'wb').write(b'x\\n')\n"
    refused = _run(daemon, "run", "--repo", "work", "--yes", "--", _python(), "-c", make)
    assert getattr(refused.exception, "code", None) == "path_invalid", refused.output
    named = {item["path"]: item["reason"] for item in refused.exception.context["paths"]}
    assert named == REFUSED
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
    carry = f"for name, data in {CARRIED!r}.items():\n    open(name, 'wb').write(data)\n"
    carried = _run(daemon, "run", "--repo", "work", "--yes", "--", _python(), "-c", carry)
    assert carried.exit_code == 0, carried.output
    new = {os.fsdecode(name): (data, 0o644) for name, data in CARRIED.items()}
    assert tree_bytes(repo) == before | new
    assert git_dir_digest(repo) == git_before
