"""The ``promoter`` program: where a command line starts, and its one error handler.

``entry`` reads a ``promoter run``, ``bundle build``, ``review`` and ``receipt verify``
of the common shape without typer (``promoter.cli.args_reader``, with the table of
``promoter.cli.run_args``, ``bundle_args`` or ``quick_args``), and hands any other
command line to the Typer app (``promoter.cli.app``, imported then; its ``app``,
``EXIT_CODES`` and other names are reachable from here as before). Every command catches
``PromoterError`` once here (``main``) and exits with the error's exit code, printing its
code and detail; nothing else is caught.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from promoter.cli import startup

if TYPE_CHECKING:
    from promoter.cli.app import EXIT_CODES as EXIT_CODES
    from promoter.cli.app import app as app

__all__ = ["entry", "main"]


def __getattr__(name: str) -> Any:
    """The Typer app's module's names (``app``, ``EXIT_CODES``, ``serve``, ...); a dunder
    name the import system asks after (``__path__``) is not one and loads nothing."""
    if not name.startswith("__"):
        from promoter.cli import app as module

        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _typer_app() -> None:
    from promoter.cli.app import app

    app()


def main(command: Callable[[], object] | None = None) -> None:
    """Run the command (``command``, else the Typer app); print a ``PromoterError`` once
    and exit with its exit code."""
    from promoter.errors import PromoterError

    try:
        (command or _typer_app)()
    except PromoterError as exc:
        from rich.markup import escape

        from promoter.cli.common import err_console
        from promoter.domain.hidden import visible

        # one line, however long: never wrapped; a name it quotes (the daemon's, a path
        # typed or made by an agent) writes no control or hidden character to the terminal
        detail = escape(visible(exc.detail))
        err_console.print(f"[bold red]error[/] {escape(f'[{exc.code}]')} {detail}", soft_wrap=True)
        sys.exit(exc.exit_code)


# the commands read without typer: the module of each one's table
_TABLES = {
    "run": "run_args",
    "bundle": "bundle_args",
    "review": "quick_args",
    "receipt": "quick_args",
}


def _read(argv: list[str]) -> Callable[[], None] | None:
    """The call that runs ``argv`` read without typer, or None: typer's. Only the table
    of the command named is imported (``--help`` imports none)."""
    module = _TABLES.get(argv[0]) if argv else None
    if module is None:
        return None
    from promoter.cli import args_reader

    tables = importlib.import_module(f"promoter.cli.{module}").TABLES
    return args_reader.read(tables, argv, os.environ)


def entry() -> None:
    """The ``promoter`` program: ``main``, then the process ends without its teardown
    (``promoter.cli.startup.finish``); httpx's own command line is never loaded."""
    startup.defer_httpx_cli()
    try:
        main(_read(sys.argv[1:]))
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
        if not isinstance(code, int):
            raise  # a message for stderr: the ordinary exit prints it
        startup.finish(code)
    startup.finish(0)


if __name__ == "__main__":
    entry()
