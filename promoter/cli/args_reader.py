"""A command line read without typer from a table of its options, as typer reads it.

A ``Table`` is one command read here: its words (``receipt verify``), each option spelled
in full with its kind (``flag``, ``value`` given once, ``many`` given any number of
times), the parameter it sets and how its value is read, its arguments (one, any number,
or the words after ``--``), its defaults, and what it refuses before it runs. ``find``
reads a command line of a table's shape: the command's words, then its options
(``--keys FILE`` or ``--keys=FILE``) and arguments in any order, a flag without a value,
a value not empty and not starting with ``-``, an argument not starting with ``-``, no
more arguments than the command takes, every value one its reading takes as typer does
(``path``, ``FILE``, ``DIRECTORY``, or the command's own), its required options given,
no combination refused, and shell completion not asked for. It gives the values typer
hands the command's function, or None for anything else (``--help``, ``-h``, an unknown,
repeated or odd option, an extra argument, a value typer refuses or might read
otherwise), which typer then parses: help, usage errors and completion are always
typer's own. ``invoke`` runs the table's function with the values; an error typer would
have printed itself (a usage error, typer's ``Abort`` or ``Exit``, Ctrl-C, end of input,
a closed pipe) is handed to typer's own command with the same arguments (``replay``),
which prints it and exits exactly as a command typer had parsed would.

The tables are the commands' own: ``promoter.cli.run_args`` (``run``),
``promoter.cli.bundle_args`` (``bundle build``), ``promoter.cli.quick_args`` (``review``,
``receipt verify``); tests hold each to typer's command. Typer (its import, and the
command it builds) was a third of these commands' processor time: this module imports
nothing but the standard library. Deliberately not here: what any command does.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DIRECTORY",
    "FILE",
    "Option",
    "Table",
    "find",
    "flag",
    "invoke",
    "many",
    "path",
    "read",
    "replay",
    "typers",
    "value",
]

FLAG, VALUE, MANY = "flag", "value", "many"
Reading = Callable[[str], Any]  # a value's text as typer reads it, or None: typer's


def text(given: str) -> str:
    """A value typer hands on as it is."""
    return given


def path(given: str) -> Path | None:
    """A path typer checks for readability only: absent, it is taken as it is; existing,
    only if ``os.access`` says it is readable (typer's check); None for a name
    ``os.stat`` cannot take."""
    try:
        os.stat(given)
    except OSError:
        return Path(given)
    except ValueError:
        return None
    return Path(given) if os.access(given, os.R_OK) else None


def _existing(wanted: Callable[[int], bool]) -> Reading:
    def reading(given: str) -> Path | None:
        try:
            info = os.stat(given)
            given.encode()  # no lone surrogate: a name typer's path adapter may read otherwise
        except (OSError, ValueError):
            return None  # absent, unreadable or odd: typer's checks say what it is
        if not wanted(info.st_mode) or not os.access(given, os.R_OK):
            return None
        return Path(given)

    return reading


FILE = _existing(stat.S_ISREG)  # an existing, readable regular file
DIRECTORY = _existing(stat.S_ISDIR)  # an existing, readable directory


class Option:
    """One option: the parameter it sets, its kind (``FLAG``, ``VALUE``, ``MANY``) and how
    its value is read."""

    __slots__ = ("kind", "param", "reading")

    def __init__(self, param: str, kind: str, reading: Reading = text) -> None:
        self.param = param
        self.kind = kind
        self.reading = reading


def flag(param: str) -> Option:
    return Option(param, FLAG)


def value(param: str, reading: Reading = text) -> Option:
    return Option(param, VALUE, reading)


def many(param: str, reading: Reading = text) -> Option:
    return Option(param, MANY, reading)


class Table:
    """One command read here: its ``words``, its ``options`` (each name spelled in full),
    its ``argument`` (one, or any number if ``arguments``; read by ``argument_reading``),
    or ``rest``, the words after ``--`` (required, not empty), typer's ``defaults`` where
    not False or None, the ``required`` parameters, what it ``refused`` before it runs,
    and the function it ``runs`` (its values; a non-zero integer it returns, the exit)."""

    def __init__(
        self,
        words: tuple[str, ...],
        options: Mapping[str, Option],
        *,
        runs: Callable[[dict[str, Any]], int | None],
        argument: str | None = None,
        arguments: bool = False,
        argument_reading: Reading = text,
        rest: str | None = None,
        defaults: Mapping[str, Any] | None = None,
        required: Iterable[str] = (),
        refused: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.words = words
        self.options = options
        self.runs = runs
        self.argument = argument
        self.arguments = arguments
        self.argument_reading = argument_reading
        self.rest = rest
        self.required = frozenset(required)
        self.refused = refused
        self.defaults: dict[str, Any] = {
            option.param: False if option.kind is FLAG else None for option in options.values()
        }
        for param in (argument, rest):
            if param is not None:
                self.defaults[param] = None
        self.defaults.update(defaults or {})

    def _names(self, kind: str) -> dict[str, str]:
        return {name: option.param for name, option in self.options.items() if option.kind is kind}

    @property
    def flags(self) -> dict[str, str]:
        """Each flag's name and the parameter it sets."""
        return self._names(FLAG)

    @property
    def values(self) -> dict[str, str]:
        """Each valued option's name (given once) and the parameter it sets."""
        return self._names(VALUE)

    @property
    def many(self) -> dict[str, str]:
        """Each repeatable option's name and the parameter it sets."""
        return self._names(MANY)

    @property
    def paths(self) -> dict[str, Reading]:
        """Each parameter of an existing file or directory and which of them it is."""
        readings = {option.param: option.reading for option in self.options.values()}
        if self.argument is not None:
            readings[self.argument] = self.argument_reading
        return {param: kind for param, kind in readings.items() if kind in (FILE, DIRECTORY)}

    def parse(self, words: Sequence[str]) -> dict[str, Any] | None:
        """The values typer hands the function for ``words`` (those after the command's
        own), or None when they are not of the shape read here."""
        rest: list[str] | None = None
        if self.rest is not None and "--" in words:
            cut = words.index("--")
            words, rest = words[:cut], list(words[cut + 1 :])
            if not rest:
                return None
        values: dict[str, Any] = {}
        arguments: list[Any] = []
        at = 0
        while at < len(words):
            word = words[at]
            at += 1
            if not word.startswith("-") and self.argument is not None:
                if arguments and not self.arguments:
                    return None  # an extra argument: typer's usage error
                read = self.argument_reading(word) if word else None
                if read is None:
                    return None
                arguments.append(read)
                continue
            name, equals, given = word.partition("=")
            option = self.options.get(name)
            if option is None:
                return None  # not the command's own (``--help``, ``--``), or an argument
            if option.kind is FLAG:
                if equals:
                    return None  # ``--json=1``: typer's
                values[option.param] = True
                continue
            if option.kind is VALUE and option.param in values:
                return None  # given twice
            if not equals:
                if at == len(words):
                    return None
                given = words[at]
                at += 1
            read = option.reading(given) if given and not given.startswith("-") else None
            if read is None:
                return None
            if option.kind is MANY:
                values.setdefault(option.param, []).append(read)
            else:
                values[option.param] = read
        if not values.keys() >= self.required:
            return None  # typer's usage error
        if arguments:
            assert self.argument is not None
            values[self.argument] = arguments if self.arguments else arguments[0]
        if self.rest is not None:
            values[self.rest] = rest
        values = {**self.defaults, **values}
        if self.refused is not None and self.refused(values):
            return None
        return values


def find(
    tables: Iterable[Table], argv: Sequence[str], environ: Mapping[str, str]
) -> tuple[Table, dict[str, Any]] | None:
    """The table ``argv`` (the program's arguments) is read by and the values typer would
    hand its function, or None when it is not a command line of a shape read here."""
    if any(name.startswith("_") and name.endswith("_COMPLETE") for name in environ):
        return None  # shell completion: typer's
    for table in tables:
        if tuple(argv[: len(table.words)]) == table.words:
            values = table.parse(argv[len(table.words) :])
            return None if values is None else (table, values)
    return None


def read(
    tables: Iterable[Table], argv: Sequence[str], environ: Mapping[str, str]
) -> Callable[[], None] | None:
    """The call that runs ``argv`` as typer's command would, or None (``find``)."""
    found = find(tables, argv, environ)
    if found is None:
        return None
    table, values = found
    return lambda: invoke(table, values)


def invoke(table: Table, values: dict[str, Any]) -> None:
    """``table``'s function with ``values``; a non-zero code it returns, the exit. An error
    typer prints itself is replayed through typer's command (``replay``), which exits."""
    try:
        code = table.runs(values)
        if code:
            sys.exit(code)
    except BaseException as exc:
        if typers(exc):
            replay(exc, table.words)
        raise


def typers(exc: BaseException) -> bool:
    """Whether typer's command would have printed ``exc`` and exited, not raised it."""
    if isinstance(exc, KeyboardInterrupt | EOFError):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        return True
    return type(exc).__module__.startswith("typer.")


def replay(exc: BaseException, words: Sequence[str]) -> None:
    """Typer's own command for this process's arguments, its command ``words`` (``run``,
    ``receipt verify``) raising ``exc``: typer parses them as it would have, and prints
    and exits as it would have."""
    import typer.main

    from promoter.cli.app import app
    from promoter.cli.lazy import LazyCommand, PromoterGroup

    group = typer.main.get_command(app)  # a new command tree, this call's own
    assert isinstance(group, PromoterGroup)
    lazy = group.get_command(typer.Context(group), words[0])
    assert isinstance(lazy, LazyCommand)
    command = lazy.real()  # kept: the one the group runs (a group's, with all its commands)
    for word in words[1:]:
        assert isinstance(command, typer.core.TyperGroup)
        command = command.commands[word]

    def raising(**values: Any) -> None:
        raise exc

    command.callback = raising
    group()
