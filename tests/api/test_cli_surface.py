"""The command line's own surface: help, version, completion, start-up, output, preflight.

Start-up is checked by what ``promoter --help`` imports (no web, database, HTTP client or
crypto stack), not by a stopwatch, so the test does not depend on the machine's speed.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

import promoter.errors as errors
from promoter import __version__
from promoter.cli import bundle_cmd
from promoter.cli.common import iec
from promoter.cli.lazy import ENTRIES, load, reflowed
from promoter.cli.main import EXIT_CODES, app
from tests.support.daemon import Daemon
from tests.support.promotion import submit

PROMOTER = Path(sys.executable).parent / "promoter"  # the installed entry point
HEAVY = ("fastapi", "sqlalchemy", "alembic", "httpx", "cryptography", "pydantic", "uvicorn")


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PROMOTER), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_help_imports_no_heavy_module() -> None:
    probe = (
        "import sys\n"
        "from promoter.cli.main import main\n"
        "sys.argv = ['promoter', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_the_client_imports_no_server_framework() -> None:
    """Every CLI command that talks to a daemon imports the client; FastAPI, Starlette,
    uvicorn and SQLAlchemy are the daemon's (importing FastAPI alone took half a second)."""
    probe = (
        "import sys\n"
        "from promoter.client.sync import PromoterClient\n"
        "PromoterClient('http://127.0.0.1:8787', None).close()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'fastapi', 'starlette', 'uvicorn', 'sqlalchemy', 'alembic'}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_help_lists_every_command_and_the_exit_codes() -> None:
    for flag in ("--help", "-h"):
        result = run_cli(flag)
        assert result.returncode == 0, result.stderr
        for entry in ENTRIES:
            assert entry.name in result.stdout
        assert "Exit codes:" in result.stdout and "75  conflict or refusal" in result.stdout


def test_every_error_exit_code_is_listed_in_help() -> None:
    listed = {int(m) for m in re.findall(r"^\s+(\d+)\s", EXIT_CODES, re.MULTILINE)}
    codes = {
        cls.exit_code
        for cls in vars(errors).values()
        if inspect.isclass(cls) and issubclass(cls, errors.PromoterError)
    }
    assert codes <= listed


def test_lazy_help_lines_match_the_real_commands() -> None:
    for entry in ENTRIES:
        real = load(entry)
        assert (real.help or "").strip().splitlines()[0] == entry.help


def _described(command: Any) -> Any:
    """A command as the command line sees it: its help, parameters and subcommands."""
    shown = ("name", "opts", "secondary_opts", "required", "default", "help", "hidden", "nargs")
    params = [
        (type(p).__name__, *(repr(getattr(p, name, None)) for name in shown))
        for p in command.params
    ]
    callback = getattr(command.callback, "__name__", None)
    subcommands = getattr(command, "commands", {})
    below = {name: _described(sub) for name, sub in sorted(subcommands.items())}
    return (command.name, command.help, command.short_help, callback, params, below)


def test_a_lazy_command_is_built_alone_as_its_whole_module_builds_it() -> None:
    """``load`` builds the one command asked for, the same as the module's every command
    built together (typer's click, its help reflowed), and none of the others."""
    for entry in ENTRIES:
        whole = typer.Typer()
        whole.command("_")(lambda: None)
        importlib.import_module(entry.module).register(whole)
        everything = typer.main.get_command(whole)
        assert isinstance(everything, TyperGroup)
        full = reflowed(everything.commands[entry.name])
        real = load(entry)
        assert type(real) is type(full), entry.name
        assert _described(real) == _described(full), entry.name
    built: list[str] = []
    original = typer.main.get_command_from_info

    def counted(command_info: Any, **kwargs: Any) -> Any:
        command = original(command_info, **kwargs)
        built.append(str(command.name))
        return command

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.main, "get_command_from_info", counted)
        load(next(entry for entry in ENTRIES if entry.name == "review"))
    assert sorted(built) == ["_", "review"]  # not approve, reject, reopen


def test_a_group_run_with_one_command_builds_that_command_alone() -> None:
    """``load(entry, sub)`` of a group builds the command ``sub`` names as the whole group
    builds it, and none of the group's others; a name the group does not hold (a typo, an
    option) builds every command, so the refusal names them all."""
    for entry in ENTRIES:
        whole = load(entry)
        for name, full in getattr(whole, "commands", {}).items():
            alone = load(entry, name)
            assert list(getattr(alone, "commands", {})) == [name], (entry.name, name)
            assert _described(alone.commands[name]) == _described(full), (entry.name, name)
        if hasattr(whole, "commands"):
            assert _described(load(entry, "no-such-command")) == _described(whole)
    built: list[str] = []
    original = typer.main.get_command_from_info

    def counted(command_info: Any, **kwargs: Any) -> Any:
        command = original(command_info, **kwargs)
        built.append(str(command.name))
        return command

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.main, "get_command_from_info", counted)
        load(next(entry for entry in ENTRIES if entry.name == "bundle"), "build")
    assert sorted(built) == ["_", "build"]  # not show, diff


def test_version_and_subcommand_short_help() -> None:
    assert run_cli("--version").stdout == f"promoter {__version__}\n"
    sub = run_cli("receipt", "-h")
    assert sub.returncode == 0 and "verify" in sub.stdout


def test_shell_completion_completes_lazy_groups_and_their_commands() -> None:
    top = run_cli(
        env={"_PROMOTER_COMPLETE": "complete_bash", "COMP_WORDS": "promoter rec", "COMP_CWORD": "1"}
    )
    assert top.stdout.split() == ["receipt"]
    sub = run_cli(
        env={
            "_PROMOTER_COMPLETE": "complete_bash",
            "COMP_WORDS": "promoter receipt v",
            "COMP_CWORD": "2",
        }
    )
    assert sub.stdout.split() == ["verify"]


def test_sizes_are_iec() -> None:
    assert [iec(n) for n in (0, 1023, 1024, 1536, 5 * 1024**2, 3 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "5.0 MiB",
        "3.0 GiB",
    ]


def _big_bundle(count: int, long_name: str) -> dict[str, object]:
    new = {"exists": True, "mode": "100644", "bytes": 2048, "sha256": "0" * 64}
    gone = {"exists": False}
    changes = [
        {
            "operation": "create" if i % 3 else "delete",
            "path": f"dir/{long_name}{i:03d}.txt",
            "old": gone if i % 3 else new,
            "new": new if i % 3 else gone,
        }
        for i in range(count)
    ]
    return {
        "bundle_id": "bnd_x",
        "change_count": count,
        "total_bytes": 2048 * count,
        "base_tree": "a" * 40,
        "changes": changes,
    }


def test_a_big_bundle_prints_a_summary_and_long_paths_whole_off_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    long_name = "a-very-long-file-name-" * 8
    bundle_cmd.print_bundle(_big_bundle(300, long_name))
    out = capsys.readouterr().out
    assert "300 change(s), 600.0 KiB of new content" in out
    assert "200 create, 100 delete" in out
    paths = [line for line in out.splitlines() if "dir/" in line]
    assert len(paths) == bundle_cmd.SUMMARY_PATHS
    assert f"dir/{long_name}000.txt" in paths[0]
    assert "… and 280 more (--verbose lists every path)" in out
    bundle_cmd.print_bundle(_big_bundle(300, long_name), verbose=True)
    assert len([line for line in capsys.readouterr().out.splitlines() if "dir/" in line]) == 300


def test_preflight_prints_a_verdict_per_path_and_exits_with_the_refusal_code(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    changes = [("src/app.py", b"print('v1')\n", b"print('v2')\n"), ("src/new.py", None, b"n\n")]
    _, bundle, _ = submit(daemon, repo, identity, changes)
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.orchestrator_token}
    clean = run_cli("preflight", bundle["bundle_id"], "--fence", "7", env=env)
    assert clean.returncode == 0, clean.stderr
    assert "passed" in clean.stdout and "src/new.py" in clean.stdout
    (repo / "src" / "app.py").write_bytes(b"the user's edit\n")
    drifted = run_cli("preflight", bundle["bundle_id"], env=env)
    assert drifted.returncode == 75, drifted.stdout + drifted.stderr
    verdicts = {
        line.split()[1]: line.split()[0]
        for line in drifted.stdout.splitlines()
        if line.strip().split(" ")[-1].startswith("src/") or "src/" in line
    }
    assert verdicts["src/app.py"] == "drift"
    assert "[target_drift]" in drifted.stderr
    as_json = run_cli("preflight", bundle["bundle_id"], "--json", env=env)
    assert json.loads(as_json.stdout)["code"] == "target_drift"


def test_cli_runner_sees_the_lazy_groups() -> None:
    result = CliRunner().invoke(app, ["ops", "--help"])
    assert result.exit_code == 0 and "reconcile" in result.output


def test_preflight_refused_on_authority_shows_the_failed_check(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    """A stale fence: the answer lists the authority check as failed (not ``checks: {}``),
    and the CLI prints its ``check authority: failed`` line; the refusal's reason once, on
    stderr."""
    changes = [("src/app.py", b"print('v1')\n", b"print('v2')\n")]
    _, bundle, _ = submit(daemon, repo, identity, changes)
    with daemon.orchestrator() as orch:
        pre = orch.post(f"/v1/bundles/{bundle['bundle_id']}/preflight", json={"fence": 6})
    assert pre.status_code == 200, pre.text
    detail = "the request's fence 6 is not the lease's fence 7"
    answer = pre.json()
    assert (answer["status"], answer["code"], answer["detail"]) == (
        "refused",
        "lease_stale",
        detail,
    )
    assert answer["checks"] == {"authority": {"ok": False}}
    assert "paths" not in answer
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.orchestrator_token}
    refused = run_cli("preflight", bundle["bundle_id"], "--fence", "6", env=env)
    assert refused.returncode == 75, refused.stdout + refused.stderr
    assert refused.stdout == (
        f"preflight {bundle['bundle_id']}: refused\n  check authority: failed\n"
    )
    assert refused.stderr == f"error [lease_stale] {detail}\n"
