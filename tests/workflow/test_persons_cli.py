"""The person's own command line (protocol: api#persons-command-line), from their own repository.

A daemon is started by ``promoter serve`` as a real process (its state directory beside,
not inside, the person's repository); the CLI runs as a real process with its current
directory in the person's worktree, HOME and XDG_CONFIG_HOME in the test's temp directory,
and no --repo, --state-dir, --url or --token-file. The attacks: a per-user configuration
others can read (or a symlink, or a folder others can enter), a credential sent to a daemon
it does not belong to, the agent's run reaching the person's credential, ``--yes`` taken
for a person's approval, and an executor token changing the approval gate.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from promoter.cli import userconfig
from promoter.client.wire import tls_context
from tests.support.flows import init_repo
from tests.support.process import DaemonProcess
from tests.support.promotion import tree_bytes


@dataclass
class Person:
    home: Path
    config: Path  # $XDG_CONFIG_HOME
    repo: Path
    daemon: DaemonProcess

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
        env.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.config), PAGER="cat")
        env.update(extra)
        return env

    def cli(
        self, *args: str, cwd: Path | None = None, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "promoter.cli.main", *args],
            cwd=cwd or self.repo,
            env=self.env(**extra),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    @property
    def user_config(self) -> Path:
        return self.config / "promoter" / "daemon.json"


@pytest.fixture
def person(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Person]:
    home = tmp_path / "home"
    home.mkdir()
    config = home / ".config"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))  # the daemon records itself here
    repo = init_repo(tmp_path / "app")
    daemon = DaemonProcess(tmp_path / "state", {"app": repo})
    try:
        yield Person(home, config, repo, daemon)
    finally:
        daemon.stop()


def test_serve_records_the_daemon_in_a_private_per_user_file(person: Person) -> None:
    folder = person.config / "promoter"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(person.user_config.stat().st_mode) == 0o600
    recorded = json.loads(person.user_config.read_text())
    state = person.daemon.state_dir.resolve()
    assert recorded == {
        "schema": "PromoterUserConfigV1",
        "url": person.daemon.url,
        "state_dir": str(state),
        "token_file": str(state / "credentials" / "operator.token"),
        "repositories": {"app": str(person.repo.resolve())},
    }
    assert person.daemon.token("operator") not in person.user_config.read_text()


def test_run_from_the_persons_repository_needs_no_repo_state_dir_or_token(
    person: Person,
) -> None:
    (person.repo / "notes.txt").write_bytes(b"my own uncommitted notes\n")
    script = "printf 'def greet():\\n    return 1\\n' > src/greet.py; env > seen-env.txt"
    result = person.cli("run", "--unconfined", "--yes", "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "promoted: operation op_" in result.stdout
    assert (person.repo / "src" / "greet.py").read_bytes() == b"def greet():\n    return 1\n"
    assert (person.repo / "notes.txt").read_bytes() == b"my own uncommitted notes\n"
    # the agent got its own executor token, never the person's credential or its file
    seen = (person.repo / "seen-env.txt").read_text()
    assert person.daemon.token("operator") not in seen
    assert person.daemon.token("orchestrator") not in seen
    assert "PROMOTER_TOKEN=pex_" in seen
    # the sandbox lived in the daemon's state directory, not in the person's repository
    assert not (person.repo / ".promoter").exists()


def test_status_names_the_daemon_the_credential_and_the_repository_here(
    person: Person,
) -> None:
    result = person.cli("status")
    assert result.returncode == 0, result.stderr + result.stdout
    state = person.daemon.state_dir.resolve()
    token_file = state / "credentials" / "operator.token"
    lines = result.stdout.splitlines()
    assert lines[:4] == [
        f"daemon      {person.daemon.url}  (from {person.user_config})",
        f"state       {state}  (from {person.user_config})",
        f"credential  operator (role operator), from {token_file}",
        "repositories",
    ]
    assert lines[4].startswith(f"  app  {person.repo}  refs/heads/main at ")
    assert lines[4].endswith("approval none (config)  (here)")
    assert person.daemon.token("operator") not in result.stdout


def test_status_says_when_the_daemon_does_not_answer(person: Person) -> None:
    person.daemon.stop()
    result = person.cli("status")
    assert result.returncode == 69  # unavailable: the daemon is down, not misconfigured
    assert "problem: the daemon does not answer" in result.stdout
    assert "start it with promoter serve" in result.stdout
    assert "error [" not in result.stderr  # the problem is said once, on its line
    assert f"problem: the daemon does not answer at {person.daemon.url}: " in result.stdout
    assert "promoter status says" not in result.stdout  # status is the command itself


def test_status_with_a_url_nothing_listens_at_says_so_before_the_credential(
    person: Person,
) -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens at once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    result = person.cli("status", "--url", url)
    assert result.returncode == 69
    assert result.stdout.splitlines()[0] == f"daemon      {url}  (from --url)"
    assert f"problem: the daemon does not answer at {url}: " in result.stdout
    assert "credential" not in result.stdout and "no token" not in result.stdout
    assert "error [" not in result.stderr


@pytest.mark.parametrize("answer", [404, 200])
def test_status_at_a_url_where_something_else_answers_says_it_is_not_promoter(
    person: Person, answer: int
) -> None:
    """A web server at the URL (a 404 page, or a page served for every path) is not a
    daemon that does not answer: one line says what answered."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(answer)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html><body>\n<h1>Not promoter</h1>\n</body></html>\n")

        def log_message(self, *args: object) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Page) as server:
        thread = threading.Thread(target=server.serve_forever)
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            result = person.cli("status", "--url", url)
        finally:
            server.shutdown()
            thread.join()
    assert result.returncode != 0
    assert result.stdout.splitlines()[2:] == [
        f"problem: something answered at {url}, but it is not a promoter daemon "
        f"(HTTP {answer} to GET /healthz); check --url or PROMOTER_URL"
    ]
    assert "error [" not in result.stderr


def test_a_command_that_cannot_reach_the_daemon_names_promoter_status(
    person: Person,
) -> None:
    person.daemon.stop()
    result = person.cli("run", "--unconfined", "--yes", "--", "true")
    assert result.returncode == 69
    assert (
        f"error [server_unavailable] cannot reach the promoter server at {person.daemon.url}: "
        in (result.stderr)
    )
    assert result.stderr.rstrip("\n").endswith("; promoter status says what is wrong")


def test_status_says_when_the_credential_is_refused(person: Person, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.token"
    wrong.write_text("pop_not-a-token\n")
    result = person.cli("status", "--token-file", str(wrong))
    assert result.returncode == 77
    assert "problem: the daemon refuses this credential [unauthenticated]" in result.stdout
    assert "error [" not in result.stderr


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o602])
def test_a_config_file_others_can_read_or_write_is_refused(person: Person, mode: int) -> None:
    person.user_config.chmod(mode)
    result = person.cli("run", "--unconfined", "--yes", "--", "true")
    assert result.returncode == 78
    assert f"{person.user_config} is readable or writable by others (mode 0{mode:o})" in (
        result.stderr
    )
    assert f"chmod 600 {person.user_config}" in result.stderr
    assert not list((person.daemon.state_dir / "runs").glob("run_*"))


def test_a_config_folder_others_can_enter_is_refused(person: Person) -> None:
    (person.config / "promoter").chmod(0o755)
    result = person.cli("status")
    assert result.returncode == 78
    assert "is readable or writable by others (mode 0755)" in result.stdout


def test_a_config_file_that_is_a_symlink_is_refused(person: Person, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(person.user_config.read_bytes())
    elsewhere.chmod(0o600)
    person.user_config.unlink()
    person.user_config.symlink_to(elsewhere)
    result = person.cli("status")
    assert result.returncode == 78
    assert "cannot read" in result.stdout or "symlink" in result.stdout


def test_the_recorded_credential_is_never_sent_to_another_daemon(person: Person) -> None:
    other = "http://127.0.0.1:9"
    target = userconfig.resolve(None, None, env=person.env(PROMOTER_URL=other))
    assert (target.url, target.token) == (other, None)
    result = person.cli("ops", "list", PROMOTER_URL=other)
    assert result.returncode == 78
    assert "its credential is not sent there" in result.stderr
    ours = userconfig.resolve(None, None, env=person.env())
    assert ours.token == person.daemon.token("operator")


def test_outside_a_guarded_worktree_a_missing_repo_is_a_usage_error(
    person: Person, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = person.cli("run", "--unconfined", "--yes", "--", "true", cwd=elsewhere)
    assert result.returncode == 2
    assert "name the repository: --repo NAME" in result.stderr
    assert "it guards: app" in result.stderr
    assert not list((person.daemon.state_dir / "runs").glob("run_*"))


def test_a_worktree_the_daemon_does_not_guard_is_told_how_to_guard_it(
    person: Person, tmp_path: Path
) -> None:
    """A person in a repository of their own the daemon does not guard: the usage error
    says how the daemon comes to guard it; nothing made."""
    other = init_repo(tmp_path / "other")
    result = person.cli("run", "--unconfined", "--yes", "--", "true", cwd=other)
    assert result.returncode == 2
    assert (
        f"to guard it too, start the daemon again with --repo other={other.resolve()} added "
        "to the command that started it (docs/guide/getting-started.md#more-than-one-repository)"
    ) in " ".join(result.stderr.split())
    assert not list((person.daemon.state_dir / "runs").glob("run_*"))


def _operator(person: Person, token: str | None = None) -> httpx.Client:
    return httpx.Client(
        base_url=person.daemon.url,
        headers={"Authorization": f"Bearer {token or person.daemon.token('operator')}"},
        timeout=60,
        verify=tls_context(person.daemon.url),
    )


def test_repos_set_turns_the_gate_on_and_the_next_promotion_waits(person: Person) -> None:
    on = person.cli("repos", "set", "app", "--approval", "required")
    assert on.returncode == 0, on.stderr
    assert on.stdout.startswith(
        "app: approval required from the next promotion on (set by operator"
    )
    listed = person.cli("repos", "list")
    assert " approval required (ledger by operator at " in listed.stdout

    before = tree_bytes(person.repo)
    held = person.cli("run", "--unconfined", "--yes", "--", "sh", "-c", "echo a > src/a.py")
    assert held.returncode == 0, held.stderr + held.stdout
    assert "awaiting approval: promoter approve op_" in held.stdout
    assert tree_bytes(person.repo) == before  # --yes is not a person's approval

    with _operator(person) as http:
        off = http.put("/v1/repositories/app/approval", json={"approval": "none"})
        assert off.status_code == 200, off.text
        assert (off.json()["approval"], off.json()["source"], off.json()["set_by"]) == (
            "none",
            "ledger",
            "operator",
        )
    done = person.cli("run", "--unconfined", "--yes", "--", "sh", "-c", "echo b > src/b.py")
    assert done.returncode == 0, done.stderr + done.stdout
    assert (person.repo / "src" / "b.py").read_bytes() == b"b\n"
    assert not (person.repo / "src" / "a.py").exists()


def test_only_the_operator_changes_the_gate_and_bad_values_change_nothing(
    person: Person,
) -> None:
    with _operator(person, person.daemon.token("orchestrator")) as orch:
        refused = orch.put("/v1/repositories/app/approval", json={"approval": "none"})
        assert refused.status_code == 403
        assert refused.json()["code"] == "forbidden"
    with person.daemon.executor("run_x") as executor:
        refused = executor.put("/v1/repositories/app/approval", json={"approval": "none"})
        assert refused.status_code == 403
    with _operator(person) as http:
        bad = http.put("/v1/repositories/app/approval", json={"approval": "sometimes"})
        assert bad.status_code == 422
        unknown = http.put("/v1/repositories/nope/approval", json={"approval": "required"})
        assert unknown.json()["code"] == "repository_unknown"
        now = http.get("/v1/repositories/app/approval").json()
    assert (now["approval"], now["source"]) == ("none", "config")
    cli = person.cli("repos", "set", "app", "--approval", "sometimes")
    assert cli.returncode == 2


def test_what_the_persons_credential_may_and_may_not_do(person: Person) -> None:
    """It runs, promotes, reviews, approves and sets the gate; its run's own executor
    token, the only credential the agent sees, can do none of the person's part."""
    with _operator(person) as http:
        who = http.get("/v1/whoami").json()
    assert who == {"role": "operator", "name": "operator", "run_id": None}
    gate = person.cli("repos", "set", "app", "--approval", "required")
    assert gate.returncode == 0, gate.stderr
    script = 'echo c > src/c.py; printf %s "$PROMOTER_TOKEN" > .agent-token'
    held = person.cli("run", "--unconfined", "--yes", "--keep", "--", "sh", "-c", script)
    assert held.returncode == 0, held.stderr + held.stdout
    operation_id = held.stdout.split("awaiting approval: promoter approve ")[1].split()[0]
    (run_home,) = (person.daemon.state_dir / "runs").glob("run_*")
    agent_token = (run_home / "clone" / ".agent-token").read_text()
    assert agent_token.startswith("pex_")
    with _operator(person, agent_token) as agent:
        assert agent.get("/v1/whoami").json()["role"] == "executor"
        for method, path, body in (
            ("POST", f"/v1/operations/{operation_id}/approve", {}),
            ("PUT", "/v1/repositories/app/approval", {"approval": "none"}),
            ("GET", "/v1/repositories", None),
        ):
            answer = agent.request(method, path, json=body)
            assert answer.status_code == 403, (path, answer.text)
    review = person.cli("review", "--stat")
    assert operation_id in review.stdout
    approved = person.cli("approve", operation_id)
    assert approved.returncode == 0, approved.stderr + approved.stdout
    assert (person.repo / "src" / "c.py").read_bytes() == b"c\n"
    with _operator(person) as http:
        events = http.get(f"/v1/operations/{operation_id}").json()["events"]
    decision = next(e for e in events if e["kind"] == "decision")
    assert decision["payload"]["by"] == {"role": "operator", "name": "operator"}


def test_a_named_credential_made_in_the_persons_repository_is_the_daemons(
    person: Person, tmp_path: Path
) -> None:
    made = person.cli("credentials", "add", "ana")
    assert made.returncode == 0, made.stderr + made.stdout
    assert not (person.repo / ".promoter").exists()  # nothing made in the worktree
    stored = person.daemon.state_dir / "credentials" / "operators" / "ana.token"
    assert stored.is_file()
    token_file = tmp_path / "ana.token"
    token_file.write_text(made.stdout)
    token_file.chmod(0o600)
    shown = person.cli("status", "--token-file", str(token_file))
    assert shown.returncode == 0, shown.stderr + shown.stdout
    assert f"credential  ana (role operator), from --token-file {token_file}\n" in shown.stdout
    listed = person.cli("credentials", "list")
    assert listed.stdout.split() == ["operator", "ana"], listed.stderr


def test_a_recorded_token_file_that_is_gone_is_named_and_listing_still_works(
    person: Person, tmp_path: Path
) -> None:
    recorded = json.loads(person.user_config.read_text())
    recorded["token_file"] = str(tmp_path / "gone.token")
    person.user_config.write_text(json.dumps(recorded))
    status = person.cli("status")
    assert status.returncode == 78
    assert f"problem: no token for {person.daemon.url}: cannot read token file " in (status.stdout)
    listed = person.cli("run", "--list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("no sandboxes under ")


def _at_terminal(person: Person, *args: str, columns: int = 80) -> str:
    """What ``promoter ARGS`` shows on a terminal ``columns`` wide, its styles taken out."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in person.env().items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "promoter.cli.main", *args],
        cwd=person.repo,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    shown = bytearray()
    try:
        while chunk := os.read(master, 65536):
            shown += chunk
    except OSError:  # EIO: the command ended and closed its terminal
        pass
    finally:
        os.close(master)
    assert proc.wait(timeout=300) == 0, shown.decode()
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode())


def test_the_ids_a_list_shows_at_a_narrow_terminal_are_whole_to_copy(person: Person) -> None:
    done = person.cli("run", "--unconfined", "--yes", "--", "sh", "-c", "echo a > src/a.py")
    assert done.returncode == 0, done.stderr + done.stdout
    operation = json.loads(person.cli("ops", "list", "--json").stdout)[0]
    host = json.loads(person.cli("hosts", "list", "--json").stdout)[0]

    listed = _at_terminal(person, "ops", "list")
    assert f"│ {operation['operation_id']} │" in listed
    assert "…" not in listed  # the rest folded onto more lines, never cut
    hosts = _at_terminal(person, "hosts", "list")
    assert f"│ {host['host_id']}" in hosts
    assert "…" not in hosts


def test_fetched_bytes_end_a_line_at_a_terminal_and_stay_exact_when_piped(
    person: Person, tmp_path: Path
) -> None:
    """At a terminal the prompt starts on a line of its own; piped or ``--out``, the bytes
    are exactly the served ones."""
    done = person.cli("run", "--unconfined", "--yes", "--", "sh", "-c", "echo a > src/a.py")
    assert done.returncode == 0, done.stderr + done.stdout
    operation = json.loads(person.cli("ops", "list", "--json").stdout)[0]["operation_id"]
    for command in (("receipt", "keys"), ("receipt", "fetch", operation, "--dsse")):
        saved = tmp_path / "served"
        assert person.cli(*command, "--out", str(saved)).returncode == 0
        served = saved.read_bytes()
        assert served and not served.endswith(b"\n")
        piped = subprocess.run(
            [sys.executable, "-m", "promoter.cli.main", *command],
            cwd=person.repo,
            env=person.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=300,
            check=True,
        )
        assert piped.stdout == served
        shown = _at_terminal(person, *command)
        assert shown == served.decode() + "\r\n"  # the terminal's ONLCR: "\n" shown as "\r\n"
