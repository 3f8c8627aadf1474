"""The one reader of command lines without typer (``promoter.cli.args_reader``).

Every command the program reads without typer is read by the table of the module the
program names for its first word, and a command line of any other command (``--help``
among them) imports no table at all; a table's kinds read as typer reads them (a flag
without a value, a valued option once, a repeatable one any number of times, the words
after ``--``, one argument or many, the required options, a value's own reading) and
anything else is None, typer's; the table's function ends the program with the non-zero
code it returns, and only the errors typer prints itself are replayed through it. Each
command's own table is held to typer's command in ``test_run_args.py``,
``test_bundle_args.py`` and ``test_quick_args.py``.
"""

from __future__ import annotations

import errno
import importlib
import subprocess
import sys
from typing import Any

import pytest
import typer

from promoter.cli import args_reader
from promoter.cli import main as program
from promoter.cli.args_reader import Table, flag, many, value
from promoter.errors import ConfigError


def test_each_command_is_read_by_the_table_of_the_module_named_for_its_first_word() -> None:
    read_by: dict[str, set[str]] = {}
    for word, module in program._TABLES.items():
        tables = importlib.import_module(f"promoter.cli.{module}").TABLES
        assert tables and all(isinstance(table, Table) for table in tables)
        for table in tables:
            read_by.setdefault(table.words[0], set()).add(module)
        assert word in {table.words[0] for table in tables}, word
    assert {word: {module} for word, module in program._TABLES.items()} == read_by


def test_help_and_other_commands_import_no_table() -> None:
    probe = (
        "import sys\n"
        "from promoter.cli import main\n"
        "for argv in (['--help'], ['status'], [], ['runs', '--list']):\n"
        "    assert main._read(argv) is None, argv\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('promoter.cli.'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert loaded.isdisjoint(
        {
            "promoter.cli.args_reader",
            "promoter.cli.run_args",
            "promoter.cli.bundle_args",
            "promoter.cli.quick_args",
        }
    ), loaded


def _size(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


TOOL = Table(
    ("tool", "do"),
    {
        "--yes": flag("yes"),
        "--name": value("name"),
        "--size": value("size", _size),
        "--tag": many("tag"),
    },
    rest="command",
    required=("name",),
    defaults={"size": 1},
    refused=lambda values: values["command"] is None and not values["yes"],
    runs=lambda values: None,
)
ONE = Table(("one",), {"--json": flag("json")}, argument="item", runs=lambda values: None)
ALL = Table(
    ("all",), {"--json": flag("json")}, argument="items", arguments=True, runs=lambda v: None
)
BASE = {"yes": False, "name": None, "size": 1, "tag": None, "command": None}


@pytest.mark.parametrize(
    ("argv", "read"),
    [
        (["tool", "do", "--name", "a", "--", "x", "--", "-y"], {"command": ["x", "--", "-y"]}),
        (["tool", "do", "--name=a", "--yes", "--yes"], {"yes": True}),
        (
            ["tool", "do", "--tag", "t", "--name", "a", "--tag=u", "--yes"],
            {"tag": ["t", "u"], "yes": True},
        ),
        (["tool", "do", "--size", "7", "--name", "a", "--", "x"], {"size": 7, "command": ["x"]}),
        (["tool", "do", "--name", "a", "--yes", "--"], None),  # no words after ``--``
        (["tool", "do", "--name", "a"], None),  # refused: nothing to do
        (["tool", "do", "--yes"], None),  # ``--name`` required
        (["tool", "do", "--name", "a", "--name", "b", "--yes"], None),  # a value once
        (["tool", "do", "--name", "a", "--yes=1"], None),  # a flag takes no value
        (["tool", "do", "--name", "-a", "--yes"], None),  # a value starting with ``-``
        (["tool", "do", "--name=", "--yes"], None),  # an empty value
        (["tool", "do", "--yes", "--name"], None),  # a value missing
        (["tool", "do", "--name", "a", "--size", "x", "--yes"], None),  # its reading refuses
        (["tool", "do", "--name", "a", "--na", "b", "--yes"], None),  # not spelled in full
        (["tool", "do", "--name", "a", "-y"], None),  # a short option: typer's
        (["tool", "do", "--name", "a", "x", "--", "y"], None),  # an argument it takes none of
        (["tool", "do", "--help", "--name", "a", "--yes"], None),
        (["tool", "did", "--name", "a", "--yes"], None),  # not its words
        (["one", "--json", "x"], "one"),
        (["one", "x", "y"], None),  # one argument only
        (["one", ""], None),
        (["one", "--", "x"], None),  # ``--`` is a table's with words after it only
        (["all", "x", "--json", "y"], "all"),
    ],
    ids=lambda given: " ".join(given) if isinstance(given, list) else str(given),
)
def test_a_table_reads_its_kinds_and_leaves_anything_else_to_typer(
    argv: list[str], read: dict[str, Any] | str | None
) -> None:
    found = args_reader.find((TOOL, ONE, ALL), argv, {})
    if read is None:
        assert found is None
    elif read == "one":
        assert found == (ONE, {"json": True, "item": "x"})
    elif read == "all":
        assert found == (ALL, {"json": True, "items": ["x", "y"]})
    else:
        assert isinstance(read, dict)
        assert found == (TOOL, {**BASE, "name": "a", **read})


def test_shell_completion_is_typers_for_every_table() -> None:
    argv = ["tool", "do", "--name", "a", "--yes"]
    assert args_reader.find((TOOL,), argv, {"_PROMOTER_COMPLETE": "bash_complete"}) is None
    assert args_reader.find((TOOL,), argv, {"PROMOTER_URL": "http://h:1"}) is not None


@pytest.mark.parametrize(("returned", "code"), [(None, None), (0, None), (3, 3)])
def test_a_non_zero_code_the_function_returns_ends_the_program(
    returned: int | None, code: int | None
) -> None:
    table = Table(("one",), {}, runs=lambda values: returned)
    if code is None:
        args_reader.invoke(table, {})
    else:
        with pytest.raises(SystemExit) as ended:
            args_reader.invoke(table, {})
        assert ended.value.code == code


@pytest.mark.parametrize(
    ("error", "printed_by_typer"),
    [
        (KeyboardInterrupt(), True),
        (EOFError(), True),
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), True),
        (typer.Exit(2), True),
        (typer.Abort(), True),
        (OSError(errno.ENOSPC, "No space left on device"), False),
        (ConfigError("no token"), False),
        (ValueError("odd"), False),
    ],
    ids=repr,
)
def test_only_an_error_typer_prints_itself_is_replayed(
    error: BaseException, printed_by_typer: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    replayed: list[tuple[BaseException, tuple[str, ...]]] = []
    monkeypatch.setattr(
        args_reader, "replay", lambda exc, words: replayed.append((exc, tuple(words)))
    )

    def failing(values: dict[str, Any]) -> None:
        raise error

    assert args_reader.typers(error) is printed_by_typer
    with pytest.raises(type(error)):
        args_reader.invoke(Table(("receipt", "verify"), {}, runs=failing), {})
    assert replayed == ([(error, ("receipt", "verify"))] if printed_by_typer else [])
