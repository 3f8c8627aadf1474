"""``promoter review`` and ``promoter receipt verify`` read without typer in their common shape.

``TABLES`` are their tables for the shared reader (``promoter.cli.args_reader``): each
command's words, options and arguments, and the typer-free function its typer command
hands its values to (``promoter.cli.review_list.show``,
``promoter.cli.receipt_verify.verify``, whose non-zero code is the exit). ``read`` gives
the call that runs a command line of one of them, or None for anything else, which typer
then parses: help, usage errors and completion are always typer's own. A path is read
here only when typer's checks let it through as it is (an existing, readable regular
file; for an option of a directory, a directory), and no combination the command refuses
before it runs is (``review --path`` without an operation). The values are exactly those
typer hands the command (``tests/unit/test_quick_args.py`` compares them with typer's
own parse and the tables with typer's commands).

Typer (its import, and the command it builds) was a third of these commands' processor
time. This module imports nothing but the standard library and the shared reader;
``promoter run`` is ``promoter.cli.run_args``'s. Deliberately not here: what any command
does or prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from promoter.cli import args_reader
from promoter.cli.args_reader import DIRECTORY, FILE, Table, flag, many, value

__all__ = ["FILE", "TABLES", "parse", "read"]


def _show(values: dict[str, Any]) -> None:
    from promoter.cli import review_list

    review_list.show(**values)


def _verify(values: dict[str, Any]) -> int:
    from promoter.cli import receipt_verify

    return receipt_verify.verify(**values)


REVIEW = Table(
    ("review",),
    {
        "--all": flag("every"),
        "--stat": flag("stat"),
        "--json": flag("json_output"),
        "--url": value("url"),
        "--token-file": value("token_file", FILE),
        "--path": many("path"),
    },
    argument="operation",
    refused=lambda v: v["operation"] is None and bool(v["path"] or v["every"]),
    runs=_show,
)
RECEIPT_VERIFY = Table(
    ("receipt", "verify"),
    {
        "--no-signature": flag("no_signature"),
        "--chain": flag("chain"),
        "--json": flag("as_json"),
        "--worktree": value("worktree", DIRECTORY),
        "--operation": value("operation"),
        "--url": value("url"),
        "--token-file": value("token_file", FILE),
        "--public-key": many("public_key", FILE),
        "--keys": many("keys_file", FILE),
        "--keys-from": many("keys_from"),
    },
    argument="files",
    arguments=True,
    argument_reading=FILE,
    runs=_verify,
)
TABLES = (REVIEW, RECEIPT_VERIFY)


def read(argv: Sequence[str], environ: Mapping[str, str]) -> Callable[[], None] | None:
    """The call that runs ``argv`` (the program's arguments) as typer's command would,
    or None when it is not a command line of a shape read here."""
    return args_reader.read(TABLES, argv, environ)


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[Table, dict[str, Any]] | None:
    """The shape ``argv`` has and the values typer would hand its function, or None."""
    return args_reader.find(TABLES, argv, environ)
