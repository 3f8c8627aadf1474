"""``promoter review`` and ``promoter receipt verify`` read without typer in their common shape.

``read`` gives the call that runs a command line of one of ``SHAPES`` (each command's
words, options and arguments, and the typer-free function its typer command hands its
values to: ``promoter.cli.review_list.show``, ``promoter.cli.receipt_verify.verify``),
or None for anything else, which typer then parses: help, usage errors and completion
are always typer's own. A command line of the shape read here is the command's words,
then its options spelled in full (``--keys FILE`` or ``--keys=FILE``) and its arguments
in any order: a flag without a value, a valued option given once (a repeatable one any
number of times), a value not empty and not starting with ``-``, an argument not
starting with ``-`` (no ``--``), as many arguments as the command takes, a path one that
typer's checks let through as they are (an existing, readable regular file; for an
option of a directory, a directory), and no combination the command refuses before it
runs (``review --path`` without an operation). The values are exactly those typer hands
the command (``tests/unit/test_quick_args.py`` compares them with typer's own parse and
the table with typer's command). An error typer would have printed itself (Ctrl-C, end
of input, a closed pipe) is replayed through typer's command
(``promoter.cli.run_args.replay``), which prints it and exits as it would have.

Typer (its import, and the command it builds) was a third of these commands' processor
time. This module imports nothing but the standard library; ``promoter run`` is
``promoter.cli.run_args``'s. Deliberately not here: what any command does or prints.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["SHAPES", "Shape", "parse", "read"]

FILE, DIRECTORY = "file", "directory"


class Shape:
    """One command read here: its words (``receipt verify``), its flags, valued and
    repeatable options (each: the parameter it sets), its arguments' parameter (``many``:
    any number of them, else at most one), its parameters of paths (a file's or a
    directory's), the defaults, what it refuses before it runs, and the function run."""

    def __init__(
        self,
        words: tuple[str, ...],
        *,
        flags: dict[str, str],
        values: dict[str, str],
        many: dict[str, str],
        argument: str,
        arguments: bool,
        paths: dict[str, str],
        runs: tuple[str, str],
        refused: Callable[[dict[str, Any]], bool] = lambda values: False,
    ) -> None:
        self.words = words
        self.flags = flags
        self.values = values
        self.many = many
        self.argument = argument
        self.arguments = arguments
        self.paths = paths
        self.runs = runs
        self.refused = refused
        self.defaults: dict[str, Any] = {
            **dict.fromkeys(flags.values(), False),
            **dict.fromkeys([*values.values(), *many.values(), argument]),
        }

    def run(self, values: dict[str, Any]) -> None:
        """The command's function with ``values``; a non-zero code it returns, the exit."""
        module, name = self.runs
        function = getattr(__import__(module, fromlist=[name]), name)
        code = function(**values)
        if code:
            sys.exit(code)


REVIEW = Shape(
    ("review",),
    flags={"--all": "every", "--stat": "stat", "--json": "json_output"},
    values={"--url": "url", "--token-file": "token_file"},
    many={"--path": "path"},
    argument="operation",
    arguments=False,
    paths={"token_file": FILE},
    runs=("promoter.cli.review_list", "show"),
    refused=lambda v: v["operation"] is None and bool(v["path"] or v["every"]),
)
RECEIPT_VERIFY = Shape(
    ("receipt", "verify"),
    flags={"--no-signature": "no_signature", "--chain": "chain", "--json": "as_json"},
    values={
        "--worktree": "worktree",
        "--operation": "operation",
        "--url": "url",
        "--token-file": "token_file",
    },
    many={"--public-key": "public_key", "--keys": "keys_file", "--keys-from": "keys_from"},
    argument="files",
    arguments=True,
    paths={
        "files": FILE,
        "public_key": FILE,
        "keys_file": FILE,
        "worktree": DIRECTORY,
        "token_file": FILE,
    },
    runs=("promoter.cli.receipt_verify", "verify"),
)
SHAPES = (REVIEW, RECEIPT_VERIFY)


def read(argv: Sequence[str], environ: Mapping[str, str]) -> Callable[[], None] | None:
    """The call that runs ``argv`` (the program's arguments) as typer's command would,
    or None when it is not a command line of a shape read here."""
    found = parse(argv, environ)
    if found is None:
        return None
    shape, values = found
    return lambda: invoke(shape, values)


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[Shape, dict[str, Any]] | None:
    """The shape ``argv`` has and the values typer would hand its function, or None."""
    if any(name.startswith("_") and name.endswith("_COMPLETE") for name in environ):
        return None  # shell completion: typer's
    for shape in SHAPES:
        if tuple(argv[: len(shape.words)]) == shape.words:
            return _read_shape(shape, argv[len(shape.words) :])
    return None


def _read_shape(shape: Shape, words: Sequence[str]) -> tuple[Shape, dict[str, Any]] | None:
    values: dict[str, Any] = {}
    arguments: list[Any] = []
    at = 0
    while at < len(words):
        word = words[at]
        at += 1
        if not word.startswith("-"):
            arguments.append(word)
            continue
        name, equals, value = word.partition("=")
        if name in shape.flags and not equals:
            values[shape.flags[name]] = True
            continue
        param = shape.values.get(name) or shape.many.get(name)
        if param is None or (param in values and name in shape.values):
            return None  # not the command's own (``--help``, ``--``), or given twice
        if not equals:
            if at == len(words):
                return None
            value = words[at]
            at += 1
        read = _value(shape, param, value)
        if read is None:
            return None
        if name in shape.many:
            values.setdefault(param, []).append(read)
        else:
            values[param] = read
    if arguments:
        if len(arguments) > 1 and not shape.arguments:
            return None  # an extra argument: typer's usage error
        read_arguments = [_value(shape, shape.argument, word) for word in arguments]
        if any(value is None for value in read_arguments):
            return None
        values[shape.argument] = read_arguments if shape.arguments else read_arguments[0]
    values = {**shape.defaults, **values}
    return None if shape.refused(values) else (shape, values)


def _value(shape: Shape, param: str, text: str) -> Any:
    """``text`` as typer reads it for ``param``, or None where typer might read it
    otherwise or refuse it."""
    if not text or text.startswith("-"):
        return None
    kind = shape.paths.get(param)
    if kind is None:
        return text
    try:
        info = os.stat(text)
        text.encode()  # no lone surrogate: a name typer's path adapter may read otherwise
    except (OSError, ValueError):
        return None  # absent, unreadable or odd: typer's checks say what it is
    wanted = stat.S_ISREG if kind == FILE else stat.S_ISDIR
    if not wanted(info.st_mode) or not os.access(text, os.R_OK):
        return None
    return Path(text)


def invoke(shape: Shape, values: dict[str, Any]) -> None:
    """``shape``'s function with ``values``; an error typer prints itself is replayed
    through typer's command (``run_args.replay``), which exits."""
    try:
        shape.run(values)
    except BaseException as exc:
        from promoter.cli import run_args

        if run_args.typers(exc):
            run_args.replay(exc, shape.words)
        raise
