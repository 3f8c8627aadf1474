"""``promoter bundle build``'s arguments, read without typer in their common shape.

``BUILD`` is ``bundle build``'s table for the shared reader (``promoter.cli.args_reader``):
a command line ``bundle build [OPTION]...`` whose every option is one of ``build``'s own
spelled in full, ``--worktree`` and ``--grant`` given, a valued option given once, a
path absent or readable (as typer checks it), is read without typer and runs
``bundle_build.build``; anything else (``--help``, ``-v``, an unknown or repeated
option, an argument, a missing option, an unreadable path) is typer's, and an error
typer would have printed itself is replayed through typer's own command
(``args_reader.replay``), which prints it and exits as it would have.

The build of a change in a large worktree is a few git processes and one walk of the
index; typer's import and the command it builds were a fifth of its processor time. The
module imports nothing but the standard library and the shared reader; the table is
checked against typer's command by a test (``tests/unit/test_bundle_args.py``).

Deliberately not here: the options' help (``promoter.cli.bundle_cmd``) or the command's
work (``promoter.cli.bundle_build``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from promoter.cli import args_reader
from promoter.cli.args_reader import Table, flag, path, value

__all__ = ["BUILD", "TABLES", "invoke", "parse"]


def _build(values: dict[str, Any]) -> None:
    """``bundle_build.build`` with ``values``. The build's modules (the command's, the
    grant's reading, the builder) are imported with the cyclic collector off, then frozen
    out of its later passes, as ``run``'s are (``run_args.Uncollected``): they live until
    the exit."""
    from promoter.cli import run_args

    with run_args.Uncollected():
        from promoter.cli import bundle_build
        from promoter.executor import builder, handover  # noqa: F401 (imported here, used there)

    bundle_build.build(**values)


BUILD = Table(  # each option of ``bundle build``: the parameter of ``bundle_cmd.build`` it sets
    ("bundle", "build"),
    {
        "--submit": flag("submit"),
        "--json": flag("json_output"),
        "--verbose": flag("verbose"),
        "--worktree": value("worktree", path),
        "--grant": value("grant"),
        "--out": value("out", path),
        "--since": value("since"),
        "--url": value("url"),
        "--token-file": value("token_file", path),
    },
    required=("worktree", "grant"),
    runs=_build,
)
TABLES = (BUILD,)


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The values typer would hand ``bundle_cmd.build`` for ``argv`` (the program's
    arguments), or None when this is not a ``bundle build`` of the shape read here."""
    found = args_reader.find(TABLES, argv, environ)
    return None if found is None else found[1]


def invoke(values: dict[str, Any]) -> None:
    """``bundle_build.build`` with what ``parse`` read; an error typer prints itself is
    replayed through typer's command (``args_reader.replay``), which exits."""
    args_reader.invoke(BUILD, values)
