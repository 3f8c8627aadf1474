"""``promoter bundle build`` read without typer (``promoter.cli.bundle_args``) is read as
typer reads it.

The table of options is typer's own command's (each option or flag, with its default);
every command line of the shape read without typer gives exactly the values typer hands
``bundle_cmd.build``; anything else (help, a short or unknown option, a repeated or odd
one, a missing required option, an argument, completion) is left to typer; and an error
typer prints itself (Ctrl-C, an abort, end of input, a usage error) or a promoter error
is printed and ends the program exactly as when typer had parsed the command line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer._click.exceptions import UsageError
from typer.core import TyperOption as Option
from typer.exceptions import Abort

from promoter.cli import bundle_args, bundle_build
from promoter.cli import main as program
from promoter.cli.lazy import _BY_NAME, load

BUILD = ["bundle", "build", "--worktree", "w", "--grant", "g.json"]
READ_HERE = [
    BUILD,
    ["bundle", "build", "--grant=grt_1", "--worktree=/srv/w"],
    [*BUILD, "--json", "--verbose", "--json"],
    [*BUILD, "--out", "o.json", "--submit"],
    [*BUILD, "--since", "op_1", "--url", "http://h:1", "--token-file", "t"],
    [*BUILD, "--out=o", "--since=op_2", "--url=http://h:2", "--token-file=t2"],
]
LEFT_TO_TYPER = [
    ["bundle", "build"],
    ["bundle", "build", "--worktree", "w"],
    ["bundle", "build", "--grant", "g"],
    [*BUILD, "--help"],
    [*BUILD, "-v"],
    [*BUILD, "--bogus"],
    [*BUILD, "--json=1"],
    [*BUILD, "--grant", "h"],
    [*BUILD, "--out"],
    [*BUILD, "--out", "-o"],
    [*BUILD, "--out="],
    [*BUILD, "--wor", "x"],
    [*BUILD, "extra"],
    ["bundle", "show", "bnd_1"],
    ["--version", *BUILD],
    ["run", "--", "x"],
]


def _typers_values(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What typer's ``bundle build`` hands on for ``argv``, through the program's own app."""
    seen: dict[str, Any] = {}

    def record(*args: Any) -> None:
        names = ["worktree", "grant", "submit", "out", "since", "json_output", "verbose"]
        seen.update(zip([*names, "url", "token_file"], args, strict=True))

    monkeypatch.setattr(bundle_build, "build", record)
    from promoter.cli.app import app

    with pytest.raises(SystemExit) as ended:
        app(args=argv, prog_name="promoter")
    assert ended.value.code == 0
    return seen


def test_the_table_is_typers_own_bundle_build_command() -> None:
    group = load(_BY_NAME["bundle"], "build")
    command = group.commands["build"]  # type: ignore[attr-defined]
    flags: dict[str, str] = {}
    values: dict[str, str] = {}
    defaults: dict[str, Any] = {}
    for param in command.params:
        assert param.name is not None and isinstance(param, Option)
        if param.name == "help":
            continue
        defaults[param.name] = param.default
        long = [name for name in param.opts if name.startswith("--")]
        assert len(long) == 1, param.opts
        (flags if param.is_flag else values)[long[0]] = param.name
        assert not param.multiple
    assert (flags, values) == (bundle_args.BUILD.flags, bundle_args.BUILD.values)
    assert defaults == bundle_args.BUILD.defaults
    required = {param.name for param in command.params if param.required}
    assert required == bundle_args.BUILD.required


@pytest.mark.parametrize("argv", READ_HERE, ids=" ".join)
def test_a_command_line_read_here_gives_the_values_typer_gives(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    read = bundle_args.parse(argv, {})
    assert read is not None
    typers = _typers_values(argv, monkeypatch)
    assert read == typers
    assert {k: type(v) for k, v in read.items()} == {k: type(v) for k, v in typers.items()}


@pytest.mark.parametrize("argv", LEFT_TO_TYPER, ids=" ".join)
def test_help_short_unknown_repeated_and_odd_options_are_left_to_typer(argv: list[str]) -> None:
    assert bundle_args.parse(argv, {}) is None


def test_shell_completion_is_left_to_typer() -> None:
    assert bundle_args.parse(BUILD, {"_PROMOTER_COMPLETE": "bash_complete"}) is None
    assert bundle_args.parse(BUILD, {"PROMOTER_URL": "http://h:1"}) is not None


def test_paths_are_read_as_paths() -> None:
    read = bundle_args.parse([*BUILD, "--out", "o", "--token-file=t"], {})
    assert read is not None
    assert (read["worktree"], read["out"], read["token_file"]) == (Path("w"), Path("o"), Path("t"))
    assert read["grant"] == "g.json"


@pytest.fixture
def program_argv(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    monkeypatch.setattr(sys, "argv", ["promoter", *BUILD])
    yield BUILD


def _ended(call: Callable[[], None]) -> object:
    with pytest.raises(SystemExit) as ended:
        call()
    return ended.value.code


def _usage() -> BaseException:
    return UsageError("the worktree is not a directory")


@pytest.mark.parametrize(
    "error",
    [_usage, KeyboardInterrupt, EOFError, Abort, lambda: typer.Exit(3)],
    ids=["usage", "ctrl-c", "eof", "abort", "exit"],
)
def test_an_error_typer_prints_ends_the_program_as_under_typer(
    error: Callable[[], BaseException],
    program_argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def failing(*args: Any, **values: Any) -> None:
        raise error()

    monkeypatch.setattr(bundle_build, "build", failing)
    read = bundle_args.parse(program_argv, {})
    assert read is not None
    fast = _ended(lambda: program.main(lambda: bundle_args.invoke(read)))
    fast_printed = capsys.readouterr()
    typers = _ended(program.main)  # the whole command line parsed by typer
    assert (fast, fast_printed) == (typers, capsys.readouterr())


def test_a_promoter_error_is_printed_once_as_under_typer(
    program_argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from promoter.errors import ConfigError

    def failing(*args: Any, **values: Any) -> None:
        raise ConfigError("no token for http://h:1")

    monkeypatch.setattr(bundle_build, "build", failing)
    read = bundle_args.parse(program_argv, {})
    assert read is not None
    fast = _ended(lambda: program.main(lambda: bundle_args.invoke(read)))
    fast_printed = capsys.readouterr()
    assert (fast, fast_printed) == (_ended(program.main), capsys.readouterr())
    assert fast == 78 and "[config_error] no token for http://h:1" in fast_printed.err


@pytest.mark.parametrize("option", ["--worktree", "--out", "--token-file"])
def test_an_unreadable_path_is_left_to_typer_which_refuses_it(
    option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """typer refuses an existing path ``os.access`` says is unreadable: so is it left to
    typer here (``os.access`` answers for both, as the superuser reads any file)."""
    unreadable = tmp_path / "unreadable"
    unreadable.mkdir()
    real = os.access

    def access(path: Any, mode: int, **given: Any) -> bool:
        return False if Path(path) == unreadable else real(path, mode, **given)

    monkeypatch.setattr(os, "access", access)
    argv = [*BUILD, option, str(unreadable)]
    if option == "--worktree":
        argv = ["bundle", "build", "--grant", "g.json", option, str(unreadable)]
    assert bundle_args.parse(argv, {}) is None
    from promoter.cli.app import app

    with pytest.raises(SystemExit) as ended:
        app(args=argv, prog_name="promoter")
    assert ended.value.code == 2 and "is not readable" in capsys.readouterr().err
