"""``promoter bundle build``'s arguments, read without typer in their common shape.

``parse`` reads, without typer, a command line of the shape ``bundle build [OPTION]...``
whose every option is one of ``build``'s own spelled in full (``--grant FILE`` or
``--grant=FILE``), ``--worktree`` and ``--grant`` given, a valued option given once, its
value not empty and not starting with ``-``, a path absent or readable (as typer checks
it), and shell completion not asked for. It gives the values typer would hand
``bundle_cmd.build`` for it, or None for anything else (``--help``, ``-v``, an unknown or
repeated option, an argument, a missing option, an unreadable path), which typer then
parses: help and usage errors are always typer's own. ``invoke`` runs
``bundle_build.build`` with what ``parse`` read; an error typer would have printed itself
(a usage error, typer's ``Abort`` or ``Exit``, Ctrl-C, end of input, a closed pipe) is
handed to typer's own command with the same arguments (``promoter.cli.run_args.replay``),
which prints it and exits exactly as a command typer had parsed would.

The build of a change in a large worktree is a few git processes and one walk of the
index; typer's import and the command it builds were a fifth of its processor time. The
module imports nothing but the standard library; the options' table is checked against
typer's command by a test (``tests/unit/test_bundle_args.py``).

Deliberately not here: the options' help (``promoter.cli.bundle_cmd``) or the command's
work (``promoter.cli.bundle_build``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULTS", "FLAGS", "VALUES", "invoke", "parse"]

# each option of ``bundle build``: the parameter of ``bundle_cmd.build`` it sets
FLAGS = {"--submit": "submit", "--json": "json_output", "--verbose": "verbose"}
VALUES = {
    "--worktree": "worktree",
    "--grant": "grant",
    "--out": "out",
    "--since": "since",
    "--url": "url",
    "--token-file": "token_file",
}
PATHS = frozenset({"worktree", "out", "token_file"})
REQUIRED = frozenset({"worktree", "grant"})
DEFAULTS: dict[str, Any] = {  # ``bundle_cmd.build``'s own defaults (checked by the test)
    **dict.fromkeys(FLAGS.values(), False),
    **dict.fromkeys(VALUES.values()),
}


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The values typer would hand ``bundle_cmd.build`` for ``argv`` (the program's
    arguments), or None when this is not a ``bundle build`` of the shape read here."""
    if len(argv) < 2 or argv[0] != "bundle" or argv[1] != "build":
        return None
    if any(name.startswith("_") and name.endswith("_COMPLETE") for name in environ):
        return None  # shell completion: typer's
    options = argv[2:]
    values: dict[str, Any] = {}
    at = 0
    while at < len(options):
        word = options[at]
        at += 1
        name, equals, value = word.partition("=")
        if name in FLAGS and not equals:
            values[FLAGS[name]] = True
            continue
        param = VALUES.get(name)
        if param is None or param in values:
            return None  # not build's own, an argument, or given twice
        if not equals:
            if at == len(options):
                return None
            value = options[at]
            at += 1
        if not value or value.startswith("-"):
            return None
        if param not in PATHS:
            values[param] = value
            continue
        path = _path(value)
        if path is None:
            return None
        values[param] = path
    if not values.keys() >= REQUIRED:
        return None  # typer's usage error
    return {**DEFAULTS, **values}


def _path(text: str) -> Path | None:
    """``text`` as typer reads a path of ``build``'s, or None where typer refuses it: an
    existing one ``os.access`` says is unreadable (typer's ``readable`` check), or a name
    ``os.stat`` cannot take."""
    try:
        os.stat(text)
    except OSError:
        return Path(text)  # absent: typer takes it as it is
    except ValueError:
        return None
    return Path(text) if os.access(text, os.R_OK) else None


def invoke(values: dict[str, Any]) -> None:
    """``bundle_build.build`` with what ``parse`` read; an error typer prints itself is
    replayed through typer's command (``promoter.cli.run_args.replay``), which exits.

    The build's modules (the command's, the grant's reading, the builder) are imported
    with the cyclic collector off, then frozen out of its later passes, as ``run``'s
    are (``run_args.Uncollected``): they live until the exit."""
    from promoter.cli import run_args

    with run_args.Uncollected():
        from promoter.cli import bundle_build
        from promoter.executor import builder, handover  # noqa: F401 (imported here, used there)

    try:
        bundle_build.build(**values)
    except BaseException as exc:
        if run_args.typers(exc):
            run_args.replay(exc, ("bundle", "build"))
        raise
