"""``promoter run``'s arguments, read without typer in their common shape, and what they ask.

``dispatch`` is what a run's flags ask for, whoever read them (typer's ``run_cmd.run``
hands it the same values): the sandboxes listed, pruned or one removed
(``run_manage``), else a run (``run_start``). ``parse`` reads, without typer, a
``promoter run`` command line of the shape ``run [OPTION]... -- CMD [ARG]...`` (or
``run [OPTION]...`` with ``--list``, ``--prune`` or ``--remove RUN`` among them) whose
every option is one of ``run``'s own spelled in full (``--repo NAME`` or
``--repo=NAME``), a valued option given once, its value not empty and not starting with
``-``, a number plain decimal digits within its range, a path absent or readable (as
typer checks it), and shell completion not asked for. It gives the values typer would
hand ``run_cmd.run`` for it, or None for anything else (``--help``, ``-h``, an unknown or
repeated option, a value typer would refuse or read otherwise), which typer then
parses: help and usage errors are always typer's own.
``invoke`` runs ``dispatch`` with what ``parse`` read; an error typer would have printed
itself (a usage error, typer's ``Abort`` or ``Exit``, Ctrl-C, end of input, a closed
pipe) is handed to typer's own command with the same arguments (``replay``; the other
commands read without typer, ``promoter.cli.quick_args``, hand theirs to it too), which
prints it and exits exactly as a command typer had parsed would.

This is the program's hot path: typer (its import, and the command it builds) was a
third of the start of ``promoter run``. The module imports nothing but the standard
library until ``dispatch`` runs; the options' table is checked against typer's command
by a test (``tests/unit/test_run_args.py``).

Deliberately not here: the flags' help (``promoter.cli.run_cmd``), the person at the
terminal (``promoter.cli.run_person``) or any step of a run (``promoter.cli.run_start``).
"""

from __future__ import annotations

import errno
import gc
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "FLAGS",
    "MANY",
    "VALUES",
    "Uncollected",
    "dispatch",
    "invoke",
    "parse",
    "replay",
    "typers",
]

# each option of ``run``: the parameter of ``run_cmd.run`` it sets
FLAGS = {
    "--yes": "yes",
    "--diff": "whole_diff",
    "--json": "json_output",
    "--keep": "keep",
    "--from-head": "from_head",
    "--list": "list_runs",
    "--prune": "prune",
    "--unconfined": "unconfined",
    "--network": "network",
}
VALUES = {
    "--repo": "repo",
    "--continue": "continue_run",
    "--older-than": "older_than",
    "--remove": "remove",
    "--timeout": "timeout",
    "--state-dir": "state_dir",
    "--url": "url",
    "--token-file": "token_file",
    "--memory": "memory",
    "--max-procs": "max_procs",
    "--max-file-size": "max_file_size",
    "--symlinks": "symlinks",
}
MANY = {"--allow": "allow", "--pass-env": "pass_env", "--hide": "hide"}
PATHS = frozenset({"state_dir", "token_file", "hide"})
DEFAULTS: dict[str, Any] = {  # ``run_cmd.run``'s own defaults (checked by the test)
    **dict.fromkeys(FLAGS.values(), False),
    **dict.fromkeys(VALUES.values()),
    **dict.fromkeys(MANY.values()),
    "command": None,
    "timeout": 3600.0,
    "memory": "8G",
    "max_procs": 1024,
    "max_file_size": "4G",
    "symlinks": "none",
}
_DECIMAL = re.compile(r"[0-9]{1,15}(\.[0-9]{1,15})?")
_DIGITS = re.compile(r"[0-9]{1,15}")


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The values typer would hand ``run_cmd.run`` for ``argv`` (the program's arguments),
    or None when this is not a ``promoter run`` of the shape read here."""
    if len(argv) < 2 or argv[0] != "run":
        return None
    if any(name.startswith("_") and name.endswith("_COMPLETE") for name in environ):
        return None  # shell completion: typer's
    command: list[str] | None = None
    options = argv[1:]
    if "--" in argv:
        cut = argv.index("--")
        options, command = argv[1:cut], list(argv[cut + 1 :])
        if not command:
            return None
    values: dict[str, Any] = {}
    given: set[str] = set()
    at = 0
    while at < len(options):
        word = options[at]
        at += 1
        name, equals, value = word.partition("=")
        if name in FLAGS and not equals:
            values[FLAGS[name]] = True
            continue
        param = VALUES.get(name) or MANY.get(name)
        if param is None or (param in given and name in VALUES):
            return None  # not run's own, or given twice
        if not equals:
            if at == len(options):
                return None
            value = options[at]
            at += 1
        read = _value(param, value)
        if read is None:
            return None
        given.add(param)
        if name in MANY:
            values.setdefault(param, []).append(read)
        else:
            values[param] = read
    if command is None and not (
        values.get("list_runs") or values.get("prune") or "remove" in values
    ):
        return None  # no command and no sandbox named: typer's (its own help or error)
    return {**DEFAULTS, **values, "command": command}


def _value(param: str, text: str) -> Any:
    """``text`` as typer reads it for ``param``, or None where typer might read it
    otherwise or refuse it."""
    if not text or text.startswith("-"):
        return None
    if param == "timeout":
        return float(text) if _DECIMAL.fullmatch(text) and float(text) >= 1 else None
    if param == "max_procs":
        return int(text) if _DIGITS.fullmatch(text) and int(text) >= 1 else None
    if param not in PATHS:
        return text
    try:
        os.stat(text)
    except OSError:
        return Path(text)  # absent: typer takes it as it is
    except ValueError:
        return None
    return Path(text) if os.access(text, os.R_OK) else None  # typer refuses an unreadable one


def dispatch(
    *,
    command: list[str] | None,
    repo: str | None,
    allow: list[str] | None,
    yes: bool,
    whole_diff: bool,
    json_output: bool,
    keep: bool,
    from_head: bool,
    continue_run: str | None,
    list_runs: bool,
    prune: bool,
    older_than: str | None,
    remove: str | None,
    timeout: float,
    state_dir: Path | None,
    url: str | None,
    token_file: Path | None,
    unconfined: bool,
    network: bool,
    memory: str,
    max_procs: int,
    max_file_size: str,
    pass_env: list[str] | None,
    hide: list[Path] | None,
    symlinks: str,
) -> None:
    """What ``promoter run``'s flags ask for: a listing, a pruning, a removal, or a run."""
    with Uncollected():
        from promoter.cli import userconfig

    target = userconfig.resolve(url, token_file, state_dir)
    state, address = target.state_dir, target.url
    if list_runs or prune or remove is not None:
        with Uncollected():
            from promoter.cli import run_manage as manage
            from promoter.cli.common import console
            from promoter.executor import sandbox as sandboxes

        if list_runs:
            manage.list_sandboxes(state, address, target.token)
        elif prune:
            manage.prune(state, address, target.token, manage.age(older_than))
        else:
            assert remove is not None
            console.print(f"removed {sandboxes.remove(state, remove)}", soft_wrap=True)
        return
    with Uncollected():
        from promoter.cli.run_person import TerminalPerson
        from promoter.cli.run_start import start

    start(
        target,
        command,
        repo=repo,
        allow=allow,
        person=TerminalPerson(yes=yes, whole_diff=whole_diff, json=json_output),
        keep=keep,
        from_head=from_head,
        continue_run=continue_run,
        timeout=timeout,
        unconfined=unconfined,
        network=network,
        memory=memory,
        max_procs=max_procs,
        max_file_size=max_file_size,
        pass_env=pass_env,
        hide=hide,
        symlinks=symlinks,
    )


class Uncollected:
    """Around the run's imports: the cyclic collector off while modules load (they live
    until the exit: its passes over them, 5-8 ms of a run's start, found nothing), then
    what they made frozen out of its later passes (``gc.freeze``; nor touched by them in
    the removal's fork) and the collector as it was again, however the imports ended (an
    import that fails or is interrupted by Ctrl-C leaves no process without it)."""

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        gc.freeze()
        if self._was:
            gc.enable()


def invoke(values: dict[str, Any]) -> None:
    """``dispatch`` with what ``parse`` read; an error typer prints itself is replayed
    through typer's command (``replay``), which exits."""
    try:
        dispatch(**values)
    except BaseException as exc:
        if typers(exc):
            replay(exc)
        raise


def typers(exc: BaseException) -> bool:
    """Whether typer's command would have printed ``exc`` and exited, not raised it."""
    if isinstance(exc, KeyboardInterrupt | EOFError):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        return True
    return type(exc).__module__.startswith("typer.")


def replay(exc: BaseException, words: Sequence[str] = ("run",)) -> None:
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
