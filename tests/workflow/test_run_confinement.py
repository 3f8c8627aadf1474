"""``promoter run`` is a boundary (protocol: runs#sandbox-boundary, TESTS S1, S2): real daemon, git
and bwrap.

Each test runs a hostile command through the CLI and then checks the person's side: their
``.git`` byte-identical (every file hashed before and after), ``git fsck --full`` clean,
the worktree unchanged except by the promotion the person approved, and no planted
program run on the host (each would create a marker file). What the command saw inside
is written to ``report.txt`` in the clone, which the run promotes, so the test reads the
sandbox's own account from the person's worktree.

Every test runs on both sandbox layouts (``PROMOTER_SANDBOX_LAYOUT``: a copy clone, and
layers over a shared base, protocol: runs#layered-sandboxes); where the layouts differ by design
(the command's ``.git``), each is checked for its own boundary.

Without bubblewrap the module is skipped with one line, unless ``PROMOTER_REQUIRE_BWRAP=1``
(CI), where it fails instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from promoter.cli import run_cmd
from promoter.errors import CommandFailed, PromoterError
from promoter.executor import sandbox as sandboxes
from promoter.executor.confine import BWRAP_ENV
from promoter.executor.layers import LAYOUT_ENV, OBJECTS_INSIDE
from tests.support import bwrap
from tests.support.daemon import Daemon
from tests.support.fixtures import Serve, under_gate
from tests.support.promotion import git_dir_digest, tree_bytes
from tests.support.repos import Repos
from tests.support.sandbox_view import sandbox_file

bwrap.required(module=True)


@pytest.fixture(autouse=True, params=["copy", "overlay"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The sandbox layout every run of the test makes."""
    monkeypatch.setenv(LAYOUT_ENV, request.param)
    return str(request.param)


def _app() -> typer.Typer:
    app = typer.Typer()
    run_cmd.register(app)
    app.command("unused")(lambda: None)  # a group, so ``run`` is a subcommand
    return app


def _run(daemon: Daemon, *args: str, env: dict[str, str] | None = None) -> Result:
    # --keep: these tests read the sandbox after a completed run
    argv = ["run", "--state-dir", str(daemon.state_dir), "--url", daemon.url, "--keep", *args]
    return CliRunner().invoke(_app(), argv, env={"PROMOTER_TOKEN": "", **(env or {})})


def _only_run(daemon: Daemon) -> sandboxes.RunRecord:
    (record,) = sandboxes.list_runs(daemon.state_dir)
    return record


def _fsck(repo: Path) -> None:
    done = subprocess.run(
        ["git", "fsck", "--full", "--strict"], cwd=repo, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr


def _report(repo: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((repo / "report.txt").read_bytes())
    return loaded


# A Python program run inside the sandbox: tries each attempt, reports what happened.
PROBE = """
import json, os, sys
report = {}
def attempt(name, action):
    try:
        result = action()
        report[name] = "ok" if result is None else result
    except OSError as exc:
        report[name] = type(exc).__name__
def read(path):
    with open(path, "rb") as handle:
        return "READ " + handle.read().decode("utf-8", "replace")
def write(path):
    with open(path, "wb") as handle:
        handle.write(b"written from the sandbox\\n")
"""


def _probe(body: str) -> list[str]:
    python = getattr(sys, "_base_executable", sys.executable)  # not a shim that sets variables
    return [python, "-c", PROBE + body + "\nopen('report.txt', 'w').write(json.dumps(report))"]


@pytest.fixture
def person(tmp_path: Path, repo: Path) -> Iterator[tuple[Path, dict[str, str], dict[str, Any]]]:
    """The person's uncommitted edit, their ``.git`` digest and worktree before the run."""
    (repo / "notes.txt").write_bytes(b"the person's uncommitted notes\n")
    yield repo, git_dir_digest(repo), tree_bytes(repo)


def _unchanged_but(repo: Path, before: dict[str, Any], *promoted: str) -> None:
    after, expected = tree_bytes(repo), dict(before)
    for name in promoted:
        after.pop(name, None)
        expected.pop(name, None)
    assert after == expected


def test_overwriting_every_object_and_pack_reachable_leaves_the_persons_git_intact(
    daemon: Daemon, person: tuple[Path, dict[str, str], dict[str, Any]], layout: str
) -> None:
    repo, git_before, files_before = person
    script = (
        "set -u; chmod -R u+w .git/objects;"
        ' find .git/objects -type f | while read f; do printf garbage > "$f"; done;'
        f" for f in $(find {repo}/.git/objects {OBJECTS_INSIDE} -type f 2>/dev/null); do"
        ' chmod u+w "$f" 2>/dev/null; printf garbage > "$f" 2>/dev/null; done;'
        f" printf garbage > {repo}/.git/objects/pack/evil.pack 2>/dev/null;"
        f" printf garbage > {OBJECTS_INSIDE}/pack/evil.pack 2>/dev/null;"
        " printf x > ../../../../work/.git/HEAD 2>/dev/null;"
        " printf \"print('v2')\\n\" > src/app.py; exit 0"
    )
    result = _run(daemon, "--repo", "work", "--yes", "--", "sh", "-c", script)
    if layout == "copy":
        # the clone's own objects were destroyed: its base is unreadable, nothing promoted
        assert isinstance(result.exception, PromoterError), result.output
        assert result.exception.code == "repository_invalid", result.exception.detail
        assert "does not hold the grant's base_tree" in result.exception.detail
        _unchanged_but(repo, files_before)
    else:
        # the person's objects were read-only in the sandbox, and promoter builds the
        # bundle from the layers, never through the command's .git: the edit lands
        assert result.exit_code == 0, result.output
        assert (repo / "src" / "app.py").read_bytes() == b"print('v2')\n"
        _unchanged_but(repo, files_before, "src/app.py")
    assert git_dir_digest(repo) == git_before
    _fsck(repo)


def test_a_sandbox_clone_shares_no_object_file_with_the_person(
    daemon: Daemon, person: tuple[Path, dict[str, str], dict[str, Any]], layout: str
) -> None:
    repo, git_before, _ = person
    if layout == "overlay":
        _the_persons_objects_are_read_only_inside(daemon, repo)
        assert git_dir_digest(repo) == git_before
        return
    result = _run(daemon, "--repo", "work", "--yes", "--", "true")
    assert result.exit_code == 0, result.output
    clone = Path(_only_run(daemon).clone)
    objects = [p for p in (clone / ".git" / "objects").rglob("*") if p.is_file()]
    assert objects and all(p.stat().st_nlink == 1 for p in objects)
    assert not (clone / ".git" / "objects" / "info" / "alternates").exists()
    person_inodes = {p.stat().st_ino for p in (repo / ".git").rglob("*") if p.is_file()}
    assert not person_inodes & {p.stat().st_ino for p in objects}
    assert git_dir_digest(repo) == git_before


def _the_persons_objects_are_read_only_inside(daemon: Daemon, repo: Path) -> None:
    """An overlay sandbox's git reaches the person's objects only through a read-only
    bind: every write there fails, and the command's own git still reads its history."""
    body = f"""
import subprocess
found = [os.path.join(d, n) for d, _, ns in os.walk({OBJECTS_INSIDE!r}) for n in ns]
report["found"] = len(found) > 0
errors = set()
for path in found:
    try:
        os.chmod(path, 0o644)
    except OSError as exc:
        errors.add(exc.errno)
    try:
        open(path, "ab").close()
    except OSError as exc:
        errors.add(exc.errno)
for name in ("new-object", "pack/evil.pack", "info/alternates"):
    try:
        open(os.path.join({OBJECTS_INSIDE!r}, name), "wb").close()
    except OSError as exc:
        errors.add(exc.errno)
report["errors"] = sorted(errors)
report["alternates"] = open(".git/objects/info/alternates").read()
git = ["git", "-c", "safe.directory=*"]
report["log"] = subprocess.run(git + ["log", "--format=%s"], capture_output=True).stdout.decode()
report["status"] = subprocess.run(
    git + ["status", "--porcelain"], capture_output=True).stdout.decode()
"""
    result = _run(daemon, "--repo", "work", "--yes", "--", *_probe(body))
    assert result.exit_code == 0, result.output
    report = _report(repo)
    assert report["found"] is True
    assert report["errors"] in ([30], [13, 30])  # EROFS (EACCES first for a 0444 object)
    assert report["alternates"] == OBJECTS_INSIDE + "\n"
    assert report["log"] == "initial\n"
    assert report["status"] == "?? notes.txt\n"  # the person's untracked file, as in a clone
    record = _only_run(daemon)
    upper = Path(record.clone).parent / "layers" / "upper"
    person_inodes = {p.stat().st_ino for p in (repo / ".git").rglob("*") if p.is_file()}
    mine = {p.stat().st_ino for p in upper.rglob("*") if p.is_file()}
    assert not person_inodes & mine


def test_planted_hooks_filters_fsmonitor_includes_and_alternates_never_run_on_the_host(
    daemon: Daemon,
    tmp_path: Path,
    person: tuple[Path, dict[str, str], dict[str, Any]],
    layout: str,
) -> None:
    repo, git_before, files_before = person
    marker = tmp_path / "planted-program-ran"
    evil = f"#!/bin/sh\ntouch {marker}\ncat\n"
    script = f"""set -e
printf '{evil}' > .git/evil.sh; chmod +x .git/evil.sh
for h in pre-commit post-checkout post-index-change reference-transaction fsmonitor-watchman; do
  cp .git/evil.sh .git/hooks/$h; done
printf '[filter "evil"]\\n\\tclean = $PWD/.git/evil.sh\\n\\tsmudge = $PWD/.git/evil.sh\\n' \
  > .git/evil.config
cat >> .git/config <<EOF
[core]
\tfsmonitor = $PWD/.git/evil.sh
\thooksPath = $PWD/.git/hooks
\tattributesFile = $PWD/.git/evil.attributes
[include]
\tpath = $PWD/.git/evil.config
[diff "evil"]
\ttextconv = $PWD/.git/evil.sh
EOF
echo '* filter=evil diff=evil' > .git/info/attributes
echo '* filter=evil diff=evil' > .git/evil.attributes
echo '* filter=evil diff=evil' > .gitattributes
echo {repo}/.git/objects > .git/objects/info/alternates
printf "print('v2')\\n" > src/app.py
"""
    result = _run(daemon, "--repo", "work", "--yes", "--", "sh", "-c", script)
    assert result.exit_code == 0, result.output
    assert not marker.exists()
    # the bundle carries the raw bytes: no filter converted them
    assert (repo / "src" / "app.py").read_bytes() == b"print('v2')\n"
    assert (repo / ".gitattributes").read_bytes() == b"* filter=evil diff=evil\n"
    clone = Path(_only_run(daemon).clone)
    if layout == "overlay":  # the command's own .git: never read by promoter's git
        _unchanged_but(repo, files_before, "src/app.py", ".gitattributes")
        assert git_dir_digest(repo) == git_before
        return
    assert not (clone / ".git" / "objects" / "info" / "alternates").exists()
    assert not (clone / ".git" / "info" / "attributes").exists()
    assert b"evil" not in (clone / ".git" / "config").read_bytes()
    assert git_dir_digest(repo) == git_before
    _fsck(repo)
    _unchanged_but(repo, files_before, "src/app.py", ".gitattributes")


def test_a_git_dir_swapped_for_a_link_to_the_persons_is_refused(
    daemon: Daemon, person: tuple[Path, dict[str, str], dict[str, Any]]
) -> None:
    repo, git_before, files_before = person
    script = f"mv .git .git-moved && ln -s {repo}/.git .git && echo x > src/app.py"
    result = _run(daemon, "--repo", "work", "--yes", "--", "sh", "-c", script)
    assert isinstance(result.exception, PromoterError), result.output
    assert result.exception.code == "repository_invalid"
    assert git_dir_digest(repo) == git_before
    _unchanged_but(repo, files_before)


def test_credentials_are_unreadable_by_relative_and_absolute_path(
    daemon: Daemon, person: tuple[Path, dict[str, str], dict[str, Any]]
) -> None:
    repo, git_before, files_before = person
    credentials = sorted((daemon.state_dir / "credentials").iterdir())
    assert credentials  # operator.token, orchestrator.token, keys...
    names = [p.name for p in credentials]
    body = f"""
for name in {names!r}:
    attempt("abs " + name, lambda: read({str(daemon.state_dir / "credentials")!r} + "/" + name))
    attempt("rel " + name, lambda: read("../../../credentials/" + name))
attempt("state", lambda: sorted(os.listdir({str(daemon.state_dir)!r})))
attempt("run dir", lambda: sorted(os.listdir("..")))
attempt("run.json", lambda: read("../run.json"))
attempt("worktree", lambda: sorted(os.listdir({str(repo)!r})))
report["env"] = sorted(os.environ)
report["token"] = os.environ["PROMOTER_TOKEN"]
"""
    result = _run(daemon, "--repo", "work", "--yes", "--", *_probe(body))
    assert result.exit_code == 0, result.output
    report = _report(repo)
    for name in names:
        assert report[f"abs {name}"] == "FileNotFoundError"
        assert report[f"rel {name}"] == "FileNotFoundError"
    assert report["state"] == ["runs"]  # an empty tmpfs but the path to the clone
    assert report["run dir"] == ["clone", "home"]
    assert report["run.json"] == "FileNotFoundError"
    assert report["worktree"] in ([], "FileNotFoundError")  # hidden, or under a hidden /tmp
    secrets = {daemon.orchestrator_token, daemon.operator_token}
    assert report["token"] not in secrets
    text = (repo / "report.txt").read_text()
    assert not any(secret in text for secret in secrets)
    assert set(report["env"]) <= {
        "PATH", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "COLUMNS",
        "HOME", "TMPDIR", "PWD", "PROMOTER_URL", "PROMOTER_TOKEN", "PROMOTER_GRANT", "PROMOTER_RUN",
        "PROMOTER_START_TREE", "PROMOTER_SUBMITTED_FILE",  # the start tree; a file in the clone
    }  # fmt: skip
    assert git_dir_digest(repo) == git_before
    _unchanged_but(repo, files_before, "report.txt")


@pytest.fixture
def gated(repos: Repos, serve: Serve) -> tuple[Daemon, Path]:
    daemon, repo, _ = under_gate(repos, serve, where="work", name="work", state="state")
    return daemon, repo


def test_the_command_cannot_approve_its_own_promotion(gated: tuple[Daemon, Path]) -> None:
    daemon, repo = gated
    first = _run(daemon, "--repo", "work", "--yes", "--", "sh", "-c", "echo a > src/a.py")
    assert first.exit_code == 0, first.output
    record = _only_run(daemon)
    operation = record.steps[0].operation_id
    assert operation is not None and record.steps[0].status == "awaiting_approval"
    body = f"""
import urllib.request, urllib.error
def approve(token):
    request = urllib.request.Request(
        os.environ["PROMOTER_URL"] + "/v1/operations/{operation}/approve",
        data=json.dumps({{"reason": "self", "approver": "me"}}).encode(),
        headers={{"Authorization": "Bearer " + token, "Content-Type": "application/json"}},
        method="POST")
    try:
        return urllib.request.urlopen(request, timeout=30).status
    except urllib.error.HTTPError as exc:
        return exc.code
report["executor"] = approve(os.environ["PROMOTER_TOKEN"])
attempt("operator", lambda: read({str(daemon.state_dir / "credentials" / "operator.token")!r}))
report["url"] = os.environ["PROMOTER_URL"]
"""
    second = _run(daemon, "--continue", record.run_id, "--yes", "--", *_probe(body))
    assert second.exit_code == 0, second.output
    with daemon.operator() as operator:
        view = operator.get(f"/v1/operations/{operation}").json()
    assert view["status"] == "awaiting_approval"
    assert not (repo / "src" / "a.py").exists()
    # the report itself waits for approval too: read it from the sandbox
    found = sandbox_file(record, "report.txt")
    assert found is not None
    report = json.loads(found.read_bytes())
    assert report["executor"] == 403  # the daemon answered through the relay, and refused
    assert report["operator"] == "FileNotFoundError"
    assert report["url"] == daemon.url


def test_the_worktree_is_unwritable_by_absolute_path_and_proc_root_and_the_daemon_unreachable(
    daemon: Daemon, person: tuple[Path, dict[str, str], dict[str, Any]], layout: str
) -> None:
    repo, git_before, files_before = person
    pid = os.getpid()  # the daemon serves from this process
    readme = repo / "README.md"
    body = f"""
import ctypes, signal
attempt("absolute", lambda: write({str(readme)!r}))
attempt("proc root", lambda: write("/proc/{pid}/root{readme}"))
attempt("proc environ", lambda: read("/proc/{pid}/environ"))
attempt("kill", lambda: os.kill({pid}, signal.SIGTERM))
libc = ctypes.CDLL(None, use_errno=True)
report["ptrace"] = libc.ptrace(16, {pid}, 0, 0), ctypes.get_errno()  # PTRACE_ATTACH
report["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
attempt("run", lambda: sorted(os.listdir("/var/run")))
import socket
def database():
    with socket.socket(socket.AF_UNIX) as s:
        s.connect("/var/run/postgresql/.s.PGSQL.5432")
attempt("database socket", database)
def tcp(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
attempt("database tcp", lambda: tcp(5432))
"""
    result = _run(daemon, "--repo", "work", "--yes", "--", *_probe(body))
    assert result.exit_code == 0, result.output
    report = _report(repo)
    assert report["absolute"] == "FileNotFoundError"
    assert report["proc root"] == "FileNotFoundError"
    assert report["proc environ"] == "FileNotFoundError"
    assert report["kill"] == "ProcessLookupError"
    assert report["ptrace"] == [-1, 3]  # ESRCH: no such process in the sandbox
    assert max(report["pids"]) < 10  # its own PID namespace: bwrap's init, the entry, us
    # the relay's socket only (and the person's objects, read-only, in an overlay)
    assert report["run"] == (
        ["promoter", "promoter-objects"] if layout == "overlay" else ["promoter"]
    )
    assert report["database socket"] == "FileNotFoundError"
    assert report["database tcp"] == "ConnectionRefusedError"  # its own network namespace
    assert git_dir_digest(repo) == git_before
    _fsck(repo)
    _unchanged_but(repo, files_before, "report.txt")


def _sleeper(seconds: int) -> str:
    """A sleep's duration no other test process uses: its fraction is this process's id,
    so the same test running at once in another worker never counts as this one's."""
    return f"{seconds}.{os.getpid():07d}"  # one width: no marker holds another


def _marked(marker: str) -> list[int]:
    """The host's processes whose command line carries ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_fork_bomb_a_huge_file_and_a_memory_grab_stay_within_the_limits(
    daemon: Daemon, person: tuple[Path, dict[str, str], dict[str, Any]]
) -> None:
    repo, git_before, files_before = person
    body = """
import subprocess
children = []
try:
    for n in range(200):
        children.append(subprocess.Popen(["sleep", "SLEEPER"]))
except OSError as exc:
    report["forks"] = [len(children), type(exc).__name__]
try:
    with open("big.bin", "wb") as handle:
        handle.write(b"\\0" * (2 << 20))
except OSError as exc:
    report["file"] = type(exc).__name__
report["file size"] = os.path.getsize("big.bin")
os.unlink("big.bin")
try:
    grab = bytearray(1 << 30)
except MemoryError:
    report["memory"] = "MemoryError"
"""
    sleeper = _sleeper(4242)
    body = body.replace("SLEEPER", sleeper)
    limits = ["--max-procs", "40", "--max-file-size", "1M", "--memory", "512M"]
    result = _run(daemon, "--repo", "work", "--yes", *limits, "--", *_probe(body))
    assert result.exit_code == 0, result.output
    report = _report(repo)
    started, error = report["forks"]
    assert 0 < started < 40 and error == "BlockingIOError"  # EAGAIN: the pids limit
    assert report["file"] == "OSError" and report["file size"] == 1 << 20  # EFBIG
    assert report["memory"] == "MemoryError"
    assert "processes limited by cgroup-v1" in result.stdout
    assert _marked(sleeper) == []  # the whole tree ended with the command
    assert git_dir_digest(repo) == git_before
    _unchanged_but(repo, files_before, "report.txt")


def test_a_timeout_ends_every_process_of_the_sandbox(
    daemon: Daemon, person: tuple[Path, dict[str, str], dict[str, Any]]
) -> None:
    repo, git_before, files_before = person
    sleeper = _sleeper(4343)
    script = f"setsid sleep {sleeper} & (sleep {sleeper} &) ; sleep {sleeper}"
    result = _run(daemon, "--repo", "work", "--yes", "--timeout", "2", "--", "sh", "-c", script)
    assert isinstance(result.exception, CommandFailed), result.output
    record = _only_run(daemon)
    assert result.exception.detail == (
        f"the command did not finish within 2 s and was ended with every process of it; "
        f"nothing was submitted; the sandbox is kept: {record.clone} (the next step: "
        f"promoter run --continue {record.run_id} --keep --timeout 2 -- CMD)"
    )
    assert record.steps[-1].status == "command_failed"
    assert _marked(sleeper) == []
    assert git_dir_digest(repo) == git_before
    _unchanged_but(repo, files_before)


def _grant_stage(daemon: Daemon, grant_id: str) -> str:
    with daemon.orchestrator() as orch:
        answer = orch.get(f"/v1/grants/{grant_id}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["stage"])


def test_confined_and_unconfined_runs_are_recorded_in_the_grant_and_the_run(
    daemon: Daemon, repo: Path
) -> None:
    confined = _run(daemon, "--repo", "work", "--yes", "--", "sh", "-c", "echo b > src/b.py")
    assert confined.exit_code == 0, confined.output
    record = _only_run(daemon)
    unconfined = _run(
        daemon, "--continue", record.run_id, "--unconfined", "--yes", "--",
        "sh", "-c", "echo c > src/c.py",
    )  # fmt: skip
    assert unconfined.exit_code == 0, unconfined.output
    record = _only_run(daemon)
    assert [s.confinement for s in record.steps] == ["bwrap", "unconfined"]
    stored = json.loads((daemon.state_dir / "runs" / record.run_id / "run.json").read_bytes())
    assert [s["confinement"] for s in stored["steps"]] == ["bwrap", "unconfined"]
    stages = [_grant_stage(daemon, s.grant_id) for s in record.steps]
    assert stages == ["run:bwrap", "run:unconfined"]
    with daemon.orchestrator() as orch:
        for step in record.steps:
            receipt = orch.get(f"/v1/operations/{step.operation_id}/receipt").json()
            grant = orch.get(f"/v1/grants/{step.grant_id}").json()
            assert receipt["grant_sha256"] == grant["grant_sha256"]
    assert (repo / "src" / "c.py").read_bytes() == b"c\n"


def test_without_bubblewrap_run_refuses_unless_unconfined(daemon: Daemon, repo: Path) -> None:
    before = tree_bytes(repo)
    missing = {BWRAP_ENV: str(daemon.state_dir / "no-such-bwrap")}
    refused = _run(daemon, "--repo", "work", "--yes", "--", "true", env=missing)
    assert isinstance(refused.exception, PromoterError), refused.output
    assert refused.exception.code == "confinement_unavailable"
    assert refused.exception.exit_code == 69
    assert "apt-get install bubblewrap" in refused.exception.detail
    assert "--unconfined" in refused.exception.detail
    assert sandboxes.list_runs(daemon.state_dir) == []  # refused before anything was made
    allowed = _run(
        daemon, "--repo", "work", "--yes", "--unconfined", "--", "sh", "-c", "echo d > d.txt",
        env=missing,
    )  # fmt: skip
    assert allowed.exit_code == 0, allowed.output
    assert (repo / "d.txt").read_bytes() == b"d\n"
    after = tree_bytes(repo)
    after.pop("d.txt")
    assert after == before


def test_a_bwrap_that_cannot_make_namespaces_refuses_before_a_sandbox_or_grant_exists(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    # the probe runs while the repository is looked up and read; its refusal still comes first
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    before = tree_bytes(repo)
    refused = _run(daemon, "--repo", "work", "--yes", "--", "true", env={BWRAP_ENV: str(fake)})
    assert isinstance(refused.exception, PromoterError), refused.output
    assert refused.exception.code == "confinement_unavailable"
    assert "No permissions to create new namespace" in refused.exception.detail
    assert sandboxes.list_runs(daemon.state_dir) == []  # no sandbox, so no grant either
    runs = daemon.state_dir / "runs"
    assert not runs.is_dir() or [n for n in os.listdir(runs) if n.startswith("run_")] == []
    assert tree_bytes(repo) == before


def test_ctrl_c_ends_every_process_of_the_sandbox(
    daemon: Daemon, person: tuple[Path, dict[str, str], dict[str, Any]]
) -> None:
    repo, git_before, files_before = person
    # the command's output is the CLI's: its line says every sleeper has started
    sleeper = _sleeper(4444)
    script = (
        f"setsid sleep {sleeper} & (sleep {sleeper} &) ; sleep {sleeper} & echo sandbox-up; wait"
    )
    argv = [sys.executable, "-m", "promoter.cli.main", "run", "--state-dir", str(daemon.state_dir)]
    argv += ["--url", daemon.url, "--repo", "work", "--yes", "--", "sh", "-c", script]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    cli = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert cli.stdout is not None
    seen = []
    for line in cli.stdout:  # a blocking read until the command says it is up
        seen.append(line)
        if line.strip() == b"sandbox-up":
            break
    else:
        raise AssertionError(b"".join(seen).decode())
    cli.send_signal(signal.SIGINT)
    rest = cli.stdout.read()
    assert cli.wait(timeout=60) == 130, rest  # the CLI's exit status for SIGINT
    assert _marked(sleeper) == []
    assert git_dir_digest(repo) == git_before
    _unchanged_but(repo, files_before)


def test_a_bwrap_that_cannot_make_namespaces_is_refused_too(daemon: Daemon, repo: Path) -> None:
    failing = {BWRAP_ENV: shutil.which("false") or "/bin/false"}  # starts, makes nothing
    refused = _run(daemon, "--repo", "work", "--yes", "--", "true", env=failing)
    assert isinstance(refused.exception, PromoterError), refused.output
    assert refused.exception.code == "confinement_unavailable"
    assert sandboxes.list_runs(daemon.state_dir) == []


def test_only_the_variables_the_person_names_reach_the_command(
    daemon: Daemon, person: tuple[Path, dict[str, str], dict[str, Any]]
) -> None:
    repo, _, _ = person
    body = """
report["named"] = os.environ.get("AGENT_API_KEY")
report["unnamed"] = os.environ.get("AWS_SECRET_ACCESS_KEY")
"""
    secrets = {"AGENT_API_KEY": "named-value", "AWS_SECRET_ACCESS_KEY": "unnamed-value"}
    result = _run(
        daemon, "--repo", "work", "--yes", "--pass-env", "AGENT_API_KEY", "--", *_probe(body),
        env=secrets,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert _report(repo) == {"named": "named-value", "unnamed": None}
    refused = _run(
        daemon, "--repo", "work", "--pass-env", "PROMOTER_TOKEN", "--", "true", env=secrets
    )
    assert isinstance(refused.exception, PromoterError)
    assert refused.exception.code == "config_error"
    assert len(sandboxes.list_runs(daemon.state_dir)) == 1  # refused before a sandbox
