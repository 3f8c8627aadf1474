"""``promoter run`` read without typer (``promoter.cli.run_args``) is read as typer reads it.

The table of options is typer's own command's (each option, flag or repeatable, with its
default); every command line of the shape read without typer gives exactly the values
typer hands ``run_cmd.run``; anything else (help, an unknown, repeated or odd option, a
value typer would refuse or read otherwise, completion) is left to typer; and an error
typer prints itself (a usage error, Ctrl-C, an abort, end of input) is printed and ends
the program exactly as when typer had parsed the command line.
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
from typer.core import TyperArgument as Argument
from typer.core import TyperOption as Option
from typer.exceptions import Abort

from promoter.cli import main as program
from promoter.cli import run_args, run_cmd
from promoter.cli.lazy import _BY_NAME, load

READ_HERE = [
    ["run", "--", "true"],
    ["run", "--repo", "app", "--yes", "--", "sh", "-c", "echo --help -h"],
    ["run", "--repo=app", "--yes", "--diff", "--json", "--keep", "--from-head", "--", "x"],
    ["run", "--unconfined", "--network", "--yes", "--yes", "--", "x", "--", "y"],
    ["run", "--allow", "src/**:create", "--allow=docs/**:modify", "--", "x"],
    ["run", "--pass-env", "A", "--pass-env", "B", "--hide", "/srv/a", "--hide=b", "--", "x"],
    ["run", "--timeout", "5", "--max-procs", "7", "--memory", "512M", "--", "x"],
    ["run", "--timeout=1.5", "--max-file-size", "1G", "--symlinks", "inside", "--", "x"],
    ["run", "--state-dir", "st", "--url", "http://h:1", "--token-file", "t", "--", "x"],
    ["run", "--continue", "run_1", "--", "x"],
    ["run", "--list", "--", "x"],
    ["run", "--prune", "--older-than", "7d", "--", "x"],
    ["run", "--remove", "run_1", "--", "x"],
    ["run", "--list"],
    ["run", "--list", "--state-dir", "st", "--url=http://h:1"],
    ["run", "--prune", "--older-than", "7d"],
    ["run", "--remove", "run_1", "--token-file", "t"],
]
LEFT_TO_TYPER = [
    ["run", "--help", "--", "x"],
    ["run", "-h", "--", "x"],
    ["--version", "run", "--", "x"],
    ["run", "--bogus", "--", "x"],
    ["run", "--no-yes", "--", "x"],
    ["run", "--yes=1", "--", "x"],
    ["run", "--re", "app", "--", "x"],
    ["run", "--repo", "a", "--repo", "b", "--", "x"],
    ["run", "--repo", "--", "x"],
    ["run", "--repo=", "--", "x"],
    ["run", "--repo", "-x", "--", "x"],
    ["run", "--timeout", "0.5", "--", "x"],
    ["run", "--timeout", "1e3", "--", "x"],
    ["run", "--timeout", "inf", "--", "x"],
    ["run", "--max-procs", "0", "--", "x"],
    ["run", "--max-procs", "+5", "--", "x"],
    ["run", "--yes", "--"],
    ["run", "--yes", "sh"],
    ["run", "sh", "--", "x"],
    ["status", "--", "x"],
    ["run"],
    ["run", "--yes"],
    ["run", "--repo", "app", "--keep"],
    ["run", "--continue", "run_1"],
    ["run", "--list", "sh"],
    ["run", "--list", "--bogus"],
    ["run", "--list", "--help"],
]


def _typers_values(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What typer's ``run`` hands on for ``argv``, through the program's own app."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(run_cmd, "dispatch", lambda **values: seen.update(values))
    from promoter.cli.app import app

    with pytest.raises(SystemExit) as ended:
        app(args=argv, prog_name="promoter")
    assert ended.value.code == 0
    return seen


def test_the_table_is_typers_own_run_command() -> None:
    command = load(_BY_NAME["run"])
    flags: dict[str, str] = {}
    values: dict[str, str] = {}
    many: dict[str, str] = {}
    defaults: dict[str, Any] = {}
    for param in command.params:
        assert param.name is not None
        defaults[param.name] = param.default
        if isinstance(param, Argument):
            assert (param.name, param.nargs) == ("command", -1)
            continue
        if param.name == "help":
            continue
        assert isinstance(param, Option)
        (name,) = param.opts
        table = flags if param.is_flag else many if param.multiple else values
        table[name] = param.name
    assert (flags, values, many) == (run_args.RUN.flags, run_args.RUN.values, run_args.RUN.many)
    assert {k: v for k, v in defaults.items() if k != "help"} == run_args.RUN.defaults


@pytest.mark.parametrize("argv", READ_HERE, ids=" ".join)
def test_a_command_line_read_here_gives_the_values_typer_gives(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    read = run_args.parse(argv, {})
    assert read is not None
    assert read == _typers_values(argv, monkeypatch)
    assert {k: type(v) for k, v in read.items()} == {
        k: type(v) for k, v in _typers_values(argv, monkeypatch).items()
    }


@pytest.mark.parametrize("argv", LEFT_TO_TYPER, ids=" ".join)
def test_help_unknown_repeated_and_odd_options_are_left_to_typer(argv: list[str]) -> None:
    assert run_args.parse(argv, {}) is None


def test_shell_completion_is_left_to_typer() -> None:
    argv = ["run", "--yes", "--", "x"]
    assert run_args.parse(argv, {"_PROMOTER_COMPLETE": "bash_complete"}) is None
    assert run_args.parse(argv, {"PROMOTER_URL": "http://h:1"}) is not None


def _usage() -> BaseException:
    return UsageError("name the repository: --repo NAME (it guards: app)")


@pytest.fixture
def program_argv(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    argv = ["run", "--repo", "app", "--yes", "--", "sh", "-c", "true"]
    monkeypatch.setattr(sys, "argv", ["promoter", *argv])
    yield argv


def _ended(call: Callable[[], None]) -> object:
    with pytest.raises(SystemExit) as ended:
        call()
    return ended.value.code


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
    def failing(**values: Any) -> None:
        raise error()

    monkeypatch.setattr(run_args, "dispatch", failing)
    monkeypatch.setattr(run_cmd, "dispatch", failing)
    read = run_args.parse(program_argv, {})
    assert read is not None
    fast = _ended(lambda: program.main(lambda: run_args.invoke(read)))
    fast_printed = capsys.readouterr()
    typers = _ended(program.main)  # the whole command line parsed by typer
    assert (fast, fast_printed) == (typers, capsys.readouterr())
    assert run_cmd.run.__name__ == "run" and not hasattr(run_cmd.run, "__wrapped__")


def test_a_promoter_error_is_printed_once_as_under_typer(
    program_argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from promoter.errors import ConfigError

    def failing(**values: Any) -> None:
        raise ConfigError("no token for http://h:1")

    monkeypatch.setattr(run_args, "dispatch", failing)
    monkeypatch.setattr(run_cmd, "dispatch", failing)
    read = run_args.parse(program_argv, {})
    assert read is not None
    fast = _ended(lambda: program.main(lambda: run_args.invoke(read)))
    fast_printed = capsys.readouterr()
    assert (fast, fast_printed) == (_ended(program.main), capsys.readouterr())
    assert fast == 78 and "[config_error] no token for http://h:1" in fast_printed.err


@pytest.mark.parametrize("option", ["--token-file", "--state-dir", "--hide"])
def test_an_unreadable_path_is_read_here_only_where_typer_reads_it(
    option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """typer refuses an existing path ``os.access`` says is unreadable (the superuser
    reads any): so is it left to typer here."""
    unreadable = tmp_path / "unreadable"
    unreadable.write_text("t")
    unreadable.chmod(0)
    argv = ["run", "--list", option, str(unreadable)]
    read = run_args.parse(argv, {})
    if not os.access(unreadable, os.R_OK):
        assert read is None
    else:
        assert read is not None and read == _typers_values(argv, monkeypatch)


def test_paths_are_read_as_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    read = run_args.parse(["run", "--hide", "a", "--state-dir=s", "--", "x"], {})
    assert read is not None
    assert (read["hide"], read["state_dir"], read["token_file"]) == ([Path("a")], Path("s"), None)


class _Interrupting:
    """A finder that meets Ctrl-C while the run's own module is looked for."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "promoter.cli.run_start":
            raise KeyboardInterrupt


@pytest.mark.parametrize("failure", ["import-error", "ctrl-c"])
def test_an_import_that_fails_leaves_the_collector_on(
    failure: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cyclic collector, off while the run's modules load, is on again however their
    import ends: a missing module or Ctrl-C in the middle of it."""
    import gc
    from types import SimpleNamespace

    from promoter.cli import userconfig

    target = SimpleNamespace(state_dir=tmp_path, url="http://127.0.0.1:1", token="t")
    monkeypatch.setattr(userconfig, "resolve", lambda *given: target)
    if failure == "import-error":
        monkeypatch.setitem(sys.modules, "promoter.cli.run_start", None)
        expected: type[BaseException] = ImportError
    else:
        monkeypatch.delitem(sys.modules, "promoter.cli.run_start", raising=False)
        monkeypatch.setattr(sys, "meta_path", [_Interrupting(), *sys.meta_path])
        expected = KeyboardInterrupt
    values = {**run_args.RUN.defaults, "command": ["true"]}
    assert gc.isenabled()
    with pytest.raises(expected):
        run_args.dispatch(**values)
    assert gc.isenabled()


def test_every_option_is_repeated_by_a_next_command_or_said_why_not() -> None:
    """A next command a step names (``--continue RUN ...``) repeats exactly the options
    the run's record does not hold; every other option of ``run`` says why not."""
    repeated, others = set(run_args.REPEATED), set(run_args.NOT_REPEATED)
    assert not repeated & others
    assert repeated | others == set(run_args.RUN.options)


def test_the_repeated_options_are_those_given_other_than_their_defaults() -> None:
    values = run_args.parse(
        ["run", "--keep", "--network", "--timeout", "90", "--memory", "2G", "--yes",
         "--pass-env", "A", "--pass-env", "B", "--hide", "/srv", "--symlinks", "inside",
         "--state-dir", "st", "--", "x"],
        {},
    )  # fmt: skip
    assert values is not None
    assert run_args.repeated(values) == (
        "--keep", "--network", "--timeout", "90", "--memory", "2G", "--symlinks", "inside",
        "--pass-env", "A", "--pass-env", "B", "--hide", "/srv",
    )  # fmt: skip
    defaults = run_args.parse(["run", "--timeout", "3600", "--memory", "8G", "--", "x"], {})
    assert defaults is not None and run_args.repeated(defaults) == ()
    halves = run_args.parse(["run", "--timeout", "1.5", "--", "x"], {})
    assert halves is not None and run_args.repeated(halves) == ("--timeout", "1.5")


def test_a_remedy_carries_the_words_quoted_and_leaves_out_the_option_it_gives() -> None:
    """``Run.options``: each word quoted for a shell; a remedy naming ``--symlinks any``
    itself leaves the step's ``--symlinks inside`` (the option and its value) out."""
    from promoter.executor.run.state import Run
    from promoter.executor.sandbox import RunRecord

    record = RunRecord(
        run_id="run_1", repository="app", worktree="/w", branch="refs/heads/main",
        base_commit="c" * 40, base_tree="t" * 40, clone="/c", created_at="now",
    )  # fmt: skip
    run = Run(Path("/state"), record)
    assert run.options() == ""
    run.again = ("--keep", "--symlinks", "inside", "--hide", "/srv/my dir", "--timeout", "90")
    assert run.options() == " --keep --symlinks inside --hide '/srv/my dir' --timeout 90"
    assert run.options(but="--symlinks") == " --keep --hide '/srv/my dir' --timeout 90"
