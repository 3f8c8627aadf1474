"""The CLI exits exactly as docs/reference/errors.md says, case by case, as a real process.

Every error class's exit status is the table's; then each documented case that needs no
daemon is run: a usage error (2), a taken port (69, one line, refused before a migration
or a key), a daemon that is down (69) and a URL that is not one (78), a damaged or missing bundle file (65, 66, one line, a missing file never taken
for an id), a bad ``--log-format`` (78). The cases a running daemon answers (a missing
``--repo`` outside a guarded worktree, an agent's failure, Ctrl-C, not confirmed) are in
tests/workflow/test_run_interrupts.py and tests/workflow/test_persons_cli.py.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from promoter.errors import PromoterError, all_error_classes

ROOT = Path(__file__).resolve().parents[2]


def _documented() -> dict[str, int]:
    """code -> exit, from the table's rows (a row of several codes gives one exit, or one
    exit per code in the same order)."""
    found: dict[str, int] = {}
    for line in (ROOT / "docs" / "reference" / "errors.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`"):
            continue
        codes = re.findall(r"`([a-z_]+)`", cells[0])
        exits = [int(e) for e in cells[2].split(",")]
        assert len(exits) in (1, len(codes)), line
        for number, code in enumerate(codes):
            found[code] = exits[0] if len(exits) == 1 else exits[number]
    return found


def test_every_error_exits_as_the_table_says() -> None:
    documented = _documented()
    wrong = {
        cls.code: (cls.exit_code, documented.get(cls.code))
        for cls in all_error_classes()
        if cls is not PromoterError and documented.get(cls.code) != cls.exit_code
    }
    assert wrong == {}
    assert documented["internal"] == PromoterError.exit_code


def _cli_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = _cli_env()
    return subprocess.run(
        [sys.executable, "-m", "promoter.cli.main", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_usage_errors_exit_2() -> None:
    for args in (
        ["run", "--bogus"],
        ["bundle", "show"],
        ["repos", "set", "x", "--approval", "x"],
        # a decision reconcile does not take: refused before any daemon is asked (which
        # answered it validation_failed, 65)
        ["ops", "reconcile", "op_x", "bogus", "--url", "http://127.0.0.1:9"],
    ):
        result = _cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("Usage: ")


def test_a_taken_port_is_refused_before_any_migration_or_key(tmp_path: Path) -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    state = tmp_path / "state"
    try:
        result = _cli(
            "serve", "--state-dir", str(state), "--port", str(port), "--log-format", "json"
        )
    finally:
        holder.close()
    assert result.returncode == 69
    assert result.stderr == (
        f"error [address_in_use] 127.0.0.1:{port} is in use by another process; nothing was "
        "started (stop it, or pass --port N, or --port 0 for any free port)\n"
    )
    assert not (state / "promoter.db").exists()
    assert not (state / "keys").exists()
    assert not (tmp_path / "config").exists()


def test_a_daemon_that_cannot_be_reached_is_69_and_a_url_that_is_not_one_78() -> None:
    """A daemon that is down is a service the command cannot have (69,
    ``server_unavailable``), not a configuration error, for a client command and for
    ``receipt verify --keys-from``; a URL the client cannot use at all is (78,
    ``config_error``). The port is bound and never listened on: refused, always."""
    closed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    closed.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    env = {**_cli_env(), "PROMOTER_TOKEN": "t"}
    argv = [sys.executable, "-m", "promoter.cli.main", "bundle", "show", "bnd_" + "0" * 32]

    def run(where: str) -> subprocess.CompletedProcess[str]:
        command = [*argv, "--url", where]
        return subprocess.run(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    try:
        down = run(url)
        keys = subprocess.run(
            [*argv[:3], "receipt", "verify", "any.dsse", "--keys-from", url],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        closed.close()
    assert (keys.returncode, keys.stderr.count("\n")) == (69, 1), keys.stderr
    assert keys.stderr.startswith(f"error [server_unavailable] cannot reach the server at {url}: ")
    assert (down.returncode, down.stdout, down.stderr.count("\n")) == (69, "", 1)
    assert down.stderr.startswith(
        f"error [server_unavailable] cannot reach the promoter server at {url}: "
    )
    assert down.stderr.endswith("; promoter status says what is wrong\n")
    odd = run("ftp://127.0.0.1:9")
    assert (odd.returncode, odd.stdout, odd.stderr.count("\n")) == (78, "", 1)
    assert odd.stderr.startswith(
        "error [config_error] cannot use the promoter server URL ftp://127.0.0.1:9: "
    )


def test_a_damaged_bundle_file_is_one_line_65(tmp_path: Path) -> None:
    damaged = tmp_path / "bundle.json"
    damaged.write_bytes(b'{"schema": "PatchBundleV1", ')
    result = _cli("bundle", "show", str(damaged))
    assert result.returncode == 65
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error [validation_failed] {damaged} is not a bundle: ")
    wrong = tmp_path / "other.json"
    wrong.write_bytes(b'{"schema": "GrantV1"}')
    result = _cli("bundle", "show", str(wrong))
    assert (result.returncode, result.stderr.count("\n")) == (65, 1)
    assert result.stderr.startswith("error [validation_failed] PatchBundleV1: ")


def test_a_missing_bundle_file_is_not_taken_for_an_id(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.json"
    result = _cli("bundle", "show", str(missing))
    assert result.returncode == 66
    assert result.stderr == (
        f"error [not_found] no file {missing} (and not a bundle id, which is bnd_ and 32 hex "
        "digits)\n"
    )
    # a name shaped like an id, with no such file, is asked of the daemon (none here)
    asked = _cli("bundle", "show", "bnd_" + "0" * 32, "--url", "http://127.0.0.1:9")
    assert asked.returncode == 78
    assert "no token for http://127.0.0.1:9" in asked.stderr


def test_an_error_line_naming_a_hostile_path_writes_no_control_to_the_terminal(
    tmp_path: Path,
) -> None:
    """A path in an error's detail (typed, or an agent's name the daemon quotes) holding a
    terminal's escape sequence, a bidirectional override and a zero-width space is shown
    with each as ``<U+XXXX>``: the line cannot retitle, clear or recolour the terminal,
    nor pose as another name."""
    missing = tmp_path / "a\x1b]0;pwned\x07\x1b[2J\u202etxt.exe\u200b.json"
    result = _cli("bundle", "show", str(missing))
    assert result.returncode == 66
    shown = f"{tmp_path}/a<U+001B>]0;pwned<U+0007><U+001B>[2J<U+202E>txt.exe<U+200B>.json"
    assert result.stderr == (
        f"error [not_found] no file {shown} (and not a bundle id, which is bnd_ and 32 hex "
        "digits)\n"
    )


def test_a_bad_log_format_is_a_configuration_error(tmp_path: Path) -> None:
    result = _cli("serve", "--state-dir", str(tmp_path / "s"), "--log-format", "xml")
    assert result.returncode == 78
    assert result.stderr == "error [config_error] --log-format must be json or text, not 'xml'\n"


def test_the_command_line_reference_lists_every_code_at_its_exit() -> None:
    """docs/reference/cli.md's exit table names every code in the row of its exit (``the
    ``*_conflict`` codes`` stands for those of 409 that end so)."""
    text = (ROOT / "docs" / "reference" / "cli.md").read_text()
    table = text[text.index("| exit | meaning | codes |") :].split("\n\n")[0]
    listed: dict[str, int] = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        listed.update({code: int(cells[0]) for code in re.findall(r"`([a-z_*]+)`", cells[2])})
    wrong = {
        cls.code: (cls.exit_code, listed.get(cls.code))
        for cls in all_error_classes()
        if cls is not PromoterError
        and listed.get(cls.code, listed["*_conflict"] if cls.code.endswith("_conflict") else None)
        != cls.exit_code
    }
    assert wrong == {}


def test_a_database_url_that_cannot_be_opened_is_one_line_78(tmp_path: Path) -> None:
    """A URL SQLAlchemy cannot parse, or whose dialect or driver is not installed, once
    ended ``serve``, ``gc`` and ``keys rotate`` with a traceback (exit 1); a password in it
    is never printed."""
    state = str(tmp_path / "state")
    for url, said in (
        ("notaurl:secret@", "is not a SQLAlchemy URL"),
        ("bogus://u:secret@h/db", "bogus://u:***@h/db names a database this installation"),
    ):
        for command in (
            ["serve", "--port", "0", "--state-dir", state, "--database-url", url],
            ["gc", "--state-dir", state],
            ["keys", "rotate", "--state-dir", state],
        ):
            result = subprocess.run(
                [sys.executable, "-m", "promoter.cli.main", *command],
                env={**_cli_env(), "PROMOTER_DATABASE_URL": url},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert result.returncode == 78, (command, result.stderr)
            (line,) = result.stderr.splitlines()
            assert line.startswith("error [config_error] the database URL "), line
            assert said in line and "secret" not in line, line


def test_a_repository_that_is_not_one_stops_serve_before_its_state_is_made(
    tmp_path: Path,
) -> None:
    """A configured repository path that is not a directory, or not a git worktree, is a
    ``config_error`` (78) of one line, and ``serve`` makes nothing first: it once created
    the state directory, migrated a new database and wrote credentials before it looked."""
    state = tmp_path / "state"
    plain = tmp_path / "plain"
    plain.mkdir()
    serve = [sys.executable, "-m", "promoter.cli.main", "serve", "--port", "0", "--workers", "1"]
    for path in (tmp_path / "missing", plain):
        result = subprocess.run(
            [*serve, "--state-dir", str(state), "--repo", f"demo={path}"],
            env=_cli_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 78, result.stderr
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error [config_error] repository 'demo' at {path}: "), line
        assert not state.exists()
