"""``promoter run``'s sandbox bounded (TESTS E5, E6, E7): real daemon, git and bwrap.

E5: the command connects to the relay's socket itself, skipping its forwarder, and holds
3000 connections; the ``promoter run`` process's threads and the daemon's descriptors
stay flat, and the relay answers afterwards. E6: with ``--state-dir A --token-file
B/credentials/orchestrator.token`` nothing of A's or B's credentials and keys, nor the
per-user configuration, is readable inside; a credential that could not be hidden
refuses the run before anything is made. E7: the command leaves a 3000-level directory,
a FIFO, an unreadable directory, a set-user-ID file and a set-group-ID directory; after
the run no set-ID bit is left and ``--remove`` removes the sandbox; a tree deeper
than the host can name under a layered sandbox's upper layer is ``path_invalid``.

Without bubblewrap the module is skipped with one line, unless ``PROMOTER_REQUIRE_BWRAP=1``
(CI), where it fails instead.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from promoter.errors import PromoterError
from promoter.executor import layered, layers
from promoter.executor import sandbox as sandboxes
from tests.integration.test_relay import _daemon_connections
from tests.support.daemon import Daemon, running_daemon
from tests.support.deep_trees import removed_after  # noqa: F401 (autouse)
from tests.support.promotion import git_dir_digest, tree_bytes
from tests.workflow.test_run_confinement import _app, _only_run, _probe, _report, _run

E7_BODY = """
os.chmod(os.open("tool", os.O_WRONLY | os.O_CREAT, 0o755), 0o4755)
os.mkdir("shared"); os.chmod("shared", 0o2775)
with open("shared/data.txt", "w") as handle:
    handle.write("shared\\n")
home = os.environ["HOME"]
os.chdir(home)
os.mkfifo("fifo")
os.makedirs("locked/below"); os.chmod("locked/below", 0); os.chmod("locked", 0)
for n in range(3000):
    os.mkdir("d"); os.chdir("d")
os.mkfifo("deep-fifo")
os.close(os.open("deep-setuid", os.O_WRONLY | os.O_CREAT, 0o755)); os.chmod("deep-setuid", 0o4755)
os.chdir(os.environ["PWD"])
report["tool"] = oct(os.stat("tool").st_mode)
report["shared"] = oct(os.stat("shared").st_mode)
"""


def _set_id_paths(top: Path) -> list[str]:
    found = []
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    stack = [(fd, str(top))]
    try:
        while stack:
            fd, where = stack.pop()
            for name in os.listdir(fd):
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if info.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    found.append(f"{where}/{name}")
                if stat.S_ISDIR(info.st_mode):
                    stack.append(
                        (os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), f"{where}/{name}")
                    )
            os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return found


def test_set_id_files_a_deep_tree_and_a_fifo_left_by_the_command_are_disarmed_and_removed(
    daemon: Daemon, repo: Path
) -> None:
    result = _run(daemon, "--repo", "work", "--yes", "--", *_probe(E7_BODY))
    assert result.exit_code == 0, result.output
    report = _report(repo)
    assert report["tool"] == oct(stat.S_IFREG | 0o4755)  # the bits were set inside
    assert report["shared"] == oct(stat.S_IFDIR | 0o2775)
    record = _only_run(daemon)
    home = daemon.state_dir / "runs" / record.run_id
    written = layered.written_tree(record)  # the clone, or an overlay's upper layer
    assert stat.S_IMODE((written / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((written / "shared").stat().st_mode) == 0o775
    assert _set_id_paths(home) == []
    assert stat.S_IMODE((repo / "tool").stat().st_mode) == 0o755  # promoted as 100755
    listed = _run(daemon, "--list")  # its size summed through the 3000 levels
    assert listed.exit_code == 0, listed.output
    assert record.run_id in listed.stdout
    removed = _run(daemon, "--remove", record.run_id)
    assert removed.exit_code == 0, removed.output
    assert not home.exists()
    assert sandboxes.list_runs(daemon.state_dir) == []


E5_BODY = """
import resource, socket, sys, urllib.request
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
held = []
for n in range(3000):  # straight to the relay's socket, past the forwarder
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect("/run/promoter/daemon.sock")
    held.append(sock)
print("holding", flush=True)
sys.stdin.readline()  # until the test has counted (its stdin reaches the command)
for sock in held:
    sock.close()
request = urllib.request.Request(
    os.environ["PROMOTER_URL"] + "/v1/grants/" + os.environ["PROMOTER_GRANT"],
    headers={"Authorization": "Bearer " + os.environ["PROMOTER_TOKEN"]})
report["after"] = urllib.request.urlopen(request, timeout=60).status
"""


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_three_thousand_connections_held_on_the_relay_leave_threads_and_descriptors_flat(
    daemon: Daemon, repo: Path
) -> None:
    fds_before = _descriptors()  # the daemon serves from this process
    argv = [sys.executable, "-m", "promoter.cli.main", "run", "--state-dir", str(daemon.state_dir)]
    argv += ["--url", daemon.url, "--repo", "work", "--yes", "--", *_probe(E5_BODY)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    cli = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert cli.stdin is not None and cli.stdout is not None
    seen = []
    for line in cli.stdout:  # a blocking read until the command holds its connections
        seen.append(line)
        if line.strip() == b"holding":
            break
    else:
        raise AssertionError(b"".join(seen).decode())
    threads = len(os.listdir(f"/proc/{cli.pid}/task"))
    fds = _descriptors() - fds_before
    connections = _daemon_connections(daemon)
    cli.stdin.write(b"counted\n")  # the command goes on once it reads this line
    cli.stdin.close()
    rest = cli.stdout.read()
    assert cli.wait(timeout=600) == 0, (b"".join(seen) + rest).decode()
    assert threads <= 4, threads  # the CLI's own and the relay's one
    assert connections <= 32 + 2, connections  # the relay's bound, the CLI's own client
    assert fds <= 2 * 32 + 16, fds
    assert _report(repo) == {"after": 200}  # the relay still answers


@pytest.fixture
def visible_place() -> Iterator[Path]:
    """A directory the sandbox would see: not under ``/tmp`` (always hidden), but in HOME."""
    made = Path(tempfile.mkdtemp(prefix=".promoter-test-", dir=Path.home()))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _secrets(place: Path) -> dict[str, Path]:
    """A second state directory (A) and a per-user configuration, with secrets in both."""
    paths = {
        "A operator": place / "A" / "credentials" / "operator.token",
        "A key": place / "A" / "keys" / "signing.key",
        "config": place / "config" / "promoter" / "config.toml",
    }
    for name, path in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"secret of {name}\n")
    (place / "config" / "promoter").chmod(0o700)  # private, as the CLI requires of it
    return paths


def test_a_token_file_in_another_state_directory_hides_that_directory_and_its_keys(
    tmp_path: Path, repo: Path, visible_place: Path
) -> None:
    secrets = _secrets(visible_place)
    with running_daemon(visible_place / "B", {"work": repo}) as daemon:  # B: the daemon's own
        credentials = daemon.state_dir / "credentials"
        secrets |= {f"B {p.name}": p for p in sorted(credentials.iterdir()) if p.is_file()}
        assert {"B operator.token", "B orchestrator.token"} <= set(secrets)
        assert any(name.startswith("B ") and "key" in name for name in secrets)  # signing keys
        listed = {
            "B": daemon.state_dir, "B credentials": credentials, "A": visible_place / "A",
            "config": visible_place / "config" / "promoter", "place": visible_place,
        }  # fmt: skip
        body = f"""
for name, path in {({k: str(v) for k, v in secrets.items()})!r}.items():
    attempt(name, lambda: read(path))
for name, path in {({k: str(v) for k, v in listed.items()})!r}.items():
    attempt("list " + name, lambda: sorted(os.listdir(path)))
"""
        state_a = visible_place / "A"
        argv = [
            "run",
            "--state-dir",
            str(state_a),
            "--token-file",
            str(credentials / "orchestrator.token"),
        ]
        argv += ["--url", daemon.url, "--keep", "--repo", "work", "--yes", "--", *_probe(body)]
        env = {"PROMOTER_TOKEN": "", "XDG_CONFIG_HOME": str(visible_place / "config")}
        result = CliRunner().invoke(_app(), argv, env=env)
        assert result.exit_code == 0, result.output
    report = _report(repo)
    for name in secrets:
        assert report[name] == "FileNotFoundError", (name, report[name])
    assert report["list B"] == []  # an empty tmpfs
    assert report["list B credentials"] == "FileNotFoundError"
    assert report["list A"] == ["runs"]  # an empty tmpfs but the path to the clone
    assert report["list config"] == []
    assert report["list place"] == sorted(["A", "B", "config"])  # seen, never read below
    text = (repo / "report.txt").read_text()
    assert "secret of" not in text
    assert daemon.operator_token not in text and daemon.orchestrator_token not in text


def test_a_credential_that_the_sandbox_would_see_refuses_the_run_before_anything_is_made(
    daemon: Daemon, repo: Path
) -> None:
    runs = sandboxes.runs_dir(daemon.state_dir)
    runs.mkdir(parents=True)
    token = runs / "orchestrator.token"  # where sandboxes are bound back into the sandbox
    token.write_text(daemon.orchestrator_token)
    argv = ["run", "--state-dir", str(daemon.state_dir), "--token-file", str(token)]
    argv += ["--url", daemon.url, "--repo", "work", "--yes", "--", "true"]
    result = CliRunner().invoke(_app(), argv, env={"PROMOTER_TOKEN": ""})
    assert isinstance(result.exception, PromoterError), result.output
    assert result.exception.code == "credentials_visible"
    assert result.exception.exit_code == 78
    assert result.exception.context == {"path": str(runs), "visible_through": str(runs)}
    assert sorted(os.listdir(runs)) == ["orchestrator.token"]  # no sandbox was made


DEEP_BODY = """
for n in range(2100):  # 4200 bytes of path: past the host's PATH_MAX under the upper layer
    os.mkdir("d"); os.chdir("d")
with open("leaf", "w") as handle:
    handle.write("deep\\n")
"""


def test_a_tree_too_deep_for_the_layers_is_refused_with_its_code(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A layered sandbox's upper layer read on the host: a path the host cannot name
    there is a refusal naming it, not an error of promoter's; the sandbox is removed."""
    monkeypatch.setenv(layers.LAYOUT_ENV, "overlay")
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    result = _run(daemon, "--repo", "work", "--yes", "--", *_probe(DEEP_BODY))
    assert isinstance(result.exception, PromoterError), result.output
    assert result.exception.code == "path_invalid"
    assert "too long to be read" in result.exception.detail
    assert str(result.exception.context["path"]).startswith("d/d/d/")
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
    record = _only_run(daemon)
    assert record.layout == "overlay"
    removed = _run(daemon, "--remove", record.run_id)
    assert removed.exit_code == 0, removed.output
    assert not (daemon.state_dir / "runs" / record.run_id).exists()


COPY_DEEP_BODY = """
for n in range(3000):  # 6000 bytes of path: past the path rules' 4096 bytes
    os.mkdir("d"); os.chdir("d")
with open("leaf", "w") as handle:
    handle.write("deep\\n")
"""


def test_a_file_too_deep_in_a_copy_clone_is_refused_not_left_out(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy layout: a file the command makes 3000 directories deep is past the path
    rules' bound; leaving it out of the bundle would drop a write of the command's
    silently. Refused as the overlay layout refuses it, naming it; the sandbox is kept."""
    monkeypatch.setenv(layers.LAYOUT_ENV, "copy")
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    result = _run(daemon, "--repo", "work", "--yes", "--", *_probe(COPY_DEEP_BODY))
    assert isinstance(result.exception, PromoterError), result.output
    assert result.exception.code == "path_invalid"
    assert "too long to be read" in result.exception.detail
    assert str(result.exception.context["path"]).startswith("d/d/d/")
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
    record = _only_run(daemon)
    assert record.layout == "copy"
    removed = _run(daemon, "--remove", record.run_id)
    assert removed.exit_code == 0, removed.output
    assert not (daemon.state_dir / "runs" / record.run_id).exists()
