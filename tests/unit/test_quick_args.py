"""``review`` and ``receipt verify`` read without typer (``promoter.cli.quick_args``) are
read as typer reads them.

Each shape's table is typer's own command's (every option, flag or repeatable, and the
argument); every command line of a shape read without typer gives exactly the values
typer hands the command's function; anything else (help, an unknown, repeated or odd
option, an extra argument, a path typer's checks refuse or might, a combination the
command refuses, completion) is left to typer; a non-zero exit code the check returns,
and an error typer prints itself (Ctrl-C, end of input, a closed pipe), end the program
exactly as when typer had parsed the command line.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.core import TyperArgument as Argument
from typer.core import TyperOption as Option

from promoter.cli import main as program
from promoter.cli import quick_args, receipt_verify, review_cmd
from promoter.cli.args_reader import Table
from promoter.cli.lazy import _BY_NAME, load


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Paths the command lines name, relative to a working directory of the test's own."""
    monkeypatch.chdir(tmp_path)
    for name in ("env.dsse", "two.dsse", "keys.json", "key.pem", "token"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "tree").mkdir()
    (tmp_path / "unreadable").write_text("{}")
    (tmp_path / "unreadable").chmod(0)
    (tmp_path / "gone").symlink_to(tmp_path / "absent")
    (tmp_path / "caf\udce9.dsse").write_text("{}")
    return tmp_path


READ_HERE = [
    ["review"],
    ["review", "--json"],
    ["review", "--stat", "--url", "http://h:1", "--token-file", "token"],
    ["review", "op_1", "--path", "src/a.py", "--path=b c", "--all", "--json"],
    ["review", "--url=http://h:1", "op_1", "--all", "--all"],
    ["receipt", "verify", "env.dsse"],
    ["receipt", "verify", "env.dsse", "--keys", "keys.json"],
    ["receipt", "verify", "--keys=keys.json", "--public-key", "key.pem", "env.dsse", "--json"],
    ["receipt", "verify", "env.dsse", "--keys-from", "http://h:1", "--keys-from", "http://g:2"],
    ["receipt", "verify", "env.dsse", "--no-signature", "--worktree", "tree"],
    ["receipt", "verify", "env.dsse", "two.dsse", "--chain", "--keys", "keys.json"],
    ["receipt", "verify", "--chain", "--operation", "op_1", "--url", "http://h:1"],
    ["receipt", "verify", "--token-file", "token", "env.dsse", "two.dsse", "env.dsse"],
    ["receipt", "verify"],
]
LEFT_TO_TYPER = [
    ["review", "--help"],
    ["review", "-h"],
    ["--version", "review"],
    ["review", "--bogus"],
    ["review", "--json=1"],
    ["review", "--js"],
    ["review", "op_1", "op_2"],
    ["review", "--path", "a"],
    ["review", "--all"],
    ["review", "--url", "a", "--url", "b"],
    ["review", "--url"],
    ["review", "--url="],
    ["review", "--url", "-x"],
    ["review", "-"],
    ["review", "--", "op_1"],
    ["review", ""],
    ["review", "--token-file", "absent"],
    ["review", "--token-file", "tree"],
    ["reviews"],
    ["receipt"],
    ["receipt", "--help"],
    ["receipt", "fetch", "op_1"],
    ["receipt", "verify", "--help"],
    ["receipt", "verify", "absent.dsse"],
    ["receipt", "verify", "tree"],
    ["receipt", "verify", "gone"],
    ["receipt", "verify", "env.dsse", "--keys", "tree"],
    ["receipt", "verify", "env.dsse", "--public-key", "absent"],
    ["receipt", "verify", "env.dsse", "--worktree", "env.dsse"],
    ["receipt", "verify", "env.dsse", "--worktree", "absent"],
    ["receipt", "verify", "env.dsse", "--operation", "a", "--operation", "b"],
    ["receipt", "verify", "env.dsse", "--chain=yes"],
    ["receipt", "verify", "caf\udce9.dsse"],
    ["status"],
    ["run", "--list"],
]


def _typers_values(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What typer's command hands its function for ``argv``, through the program's app."""
    seen: dict[str, Any] = {}

    def verify(**values: Any) -> int:
        seen.update(values)
        return 0

    monkeypatch.setattr(review_cmd, "show", lambda **values: seen.update(values))
    monkeypatch.setattr(receipt_verify, "verify", verify)
    from promoter.cli.app import app

    with pytest.raises(SystemExit) as ended:
        app(args=argv, prog_name="promoter")
    assert ended.value.code == 0
    return seen


@pytest.mark.parametrize("shape", quick_args.TABLES, ids=lambda shape: " ".join(shape.words))
def test_each_table_is_typers_own_command(shape: Table) -> None:
    command = load(_BY_NAME[shape.words[0]], *shape.words[1:])
    for word in shape.words[1:]:
        command = command.commands[word]  # type: ignore[attr-defined]
    flags: dict[str, str] = {}
    values: dict[str, str] = {}
    many: dict[str, str] = {}
    defaults: dict[str, Any] = {}
    for param in command.params:
        assert param.name is not None
        if param.name == "help":
            continue
        defaults[param.name] = param.default
        if isinstance(param, Argument):
            assert param.name == shape.argument
            assert param.nargs == (-1 if shape.arguments else 1)
            continue
        assert isinstance(param, Option)
        (name,) = param.opts
        table = flags if param.is_flag else many if param.multiple else values
        table[name] = param.name
    assert (flags, values, many) == (shape.flags, shape.values, shape.many)
    assert defaults == shape.defaults


@pytest.mark.parametrize("argv", READ_HERE, ids=" ".join)
def test_a_command_line_read_here_gives_the_values_typer_gives(
    argv: list[str], files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = quick_args.parse(argv, {})
    assert read is not None
    shape, values = read
    typers = _typers_values(argv, monkeypatch)
    assert values == typers
    assert {k: type(v) for k, v in values.items()} == {k: type(v) for k, v in typers.items()}
    for param, kind in shape.paths.items():  # each path read is one typer's checks passed
        given = values[param]
        for path in given if isinstance(given, list) else [] if given is None else [given]:
            assert path.is_file() if kind == quick_args.FILE else path.is_dir(), path


@pytest.mark.parametrize("argv", LEFT_TO_TYPER, ids=" ".join)
def test_help_unknown_repeated_odd_options_and_paths_are_left_to_typer(
    argv: list[str], files: Path
) -> None:
    assert quick_args.parse(argv, {}) is None


@pytest.mark.parametrize(
    "argv",
    [["review", "--token-file", "unreadable"], ["receipt", "verify", "unreadable"]],
    ids=" ".join,
)
def test_a_file_without_read_permission_is_read_here_only_where_typer_reads_it(
    argv: list[str], files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """typer asks ``os.access`` (which lets the superuser read any file): so does this."""
    read = quick_args.parse(argv, {})
    if not os.access(files / "unreadable", os.R_OK):
        assert read is None
    else:
        assert read is not None and read[1] == _typers_values(argv, monkeypatch)


def test_shell_completion_is_left_to_typer() -> None:
    assert quick_args.parse(["review"], {"_PROMOTER_COMPLETE": "bash_complete"}) is None
    assert quick_args.parse(["review"], {"PROMOTER_URL": "http://h:1"}) is not None


@pytest.fixture
def program_argv(files: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    argv = ["receipt", "verify", "env.dsse", "--keys", "keys.json"]
    monkeypatch.setattr(sys, "argv", ["promoter", *argv])
    yield argv


def _ended(call: Callable[[], None]) -> object:
    with pytest.raises(SystemExit) as ended:
        call()
    return ended.value.code


def _closed_pipe() -> BaseException:
    return BrokenPipeError(errno.EPIPE, "Broken pipe")


@pytest.mark.parametrize(
    "outcome",
    [lambda: 3, lambda: 1, KeyboardInterrupt, EOFError, _closed_pipe],
    ids=["exit-3", "exit-1", "ctrl-c", "eof", "closed-pipe"],
)
def test_an_exit_code_or_an_error_typer_prints_ends_the_program_as_under_typer(
    outcome: Callable[[], Any],
    program_argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def verify(**values: Any) -> int:
        result = outcome()
        if isinstance(result, BaseException):
            raise result
        assert isinstance(result, int)
        return result

    monkeypatch.setattr(receipt_verify, "verify", verify)
    call = quick_args.read(program_argv, {})
    assert call is not None
    stdout, stderr = sys.stdout, sys.stderr
    fast = _ended(lambda: program.main(call))
    fast_printed = capsys.readouterr()
    sys.stdout, sys.stderr = stdout, stderr  # a closed pipe: click wraps both
    typers = _ended(program.main)  # the whole command line parsed by typer
    sys.stdout, sys.stderr = stdout, stderr
    assert (fast, fast_printed) == (typers, capsys.readouterr())


def test_a_promoter_error_is_printed_once_as_under_typer(
    program_argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from promoter.errors import ReceiptInvalid

    def verify(**values: Any) -> int:
        raise ReceiptInvalid("the signature does not verify")

    monkeypatch.setattr(receipt_verify, "verify", verify)
    call = quick_args.read(program_argv, {})
    assert call is not None
    fast = _ended(lambda: program.main(call))
    fast_printed = capsys.readouterr()
    assert (fast, fast_printed) == (_ended(program.main), capsys.readouterr())
    assert fast == 65 and "[receipt_invalid] the signature does not verify" in fast_printed.err
