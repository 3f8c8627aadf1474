"""``promoter run``'s arguments, read without typer in their common shape, and what they ask.

``dispatch`` is what a run's flags ask for, whoever read them (typer's ``run_cmd.run``
hands it the same values): the sandboxes listed, pruned or one removed
(``run_manage``), else a run (``run_start``). ``RUN`` is ``run``'s table for the shared
reader (``promoter.cli.args_reader``): a command line ``run [OPTION]... -- CMD [ARG]...``
(or ``run [OPTION]...`` with ``--list``, ``--prune`` or ``--remove RUN`` among them)
whose every option is one of ``run``'s own spelled in full, a valued option given once,
a number plain decimal digits within its range, a path absent or readable (as typer
checks it), is read without typer; anything else (``--help``, ``-h``, an unknown or
repeated option, a value typer would refuse or read otherwise) is typer's, and an error
typer would have printed itself is replayed through typer's own command
(``args_reader.replay``), which prints it and exits as it would have.

This is the program's hot path: typer (its import, and the command it builds) was a
third of the start of ``promoter run``. The module imports nothing but the standard
library and the shared reader until ``dispatch`` runs; the table is checked against
typer's command by a test (``tests/unit/test_run_args.py``).

Deliberately not here: the flags' help (``promoter.cli.run_cmd``), the person at the
terminal (``promoter.cli.run_person``) or any step of a run (``promoter.cli.run_start``).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from promoter.cli import args_reader
from promoter.cli.args_reader import Table, flag, many, path, value

__all__ = [
    "NOT_REPEATED",
    "REPEATED",
    "RUN",
    "TABLES",
    "Uncollected",
    "dispatch",
    "invoke",
    "parse",
    "repeated",
]

_DECIMAL = re.compile(r"[0-9]{1,15}(\.[0-9]{1,15})?")
_DIGITS = re.compile(r"[0-9]{1,15}")


def _seconds(text: str) -> float | None:
    """A timeout typer reads as this float: plain decimal digits, at least one second."""
    return float(text) if _DECIMAL.fullmatch(text) and float(text) >= 1 else None


def _count(text: str) -> int | None:
    """A count typer reads as this integer: plain decimal digits, at least one."""
    return int(text) if _DIGITS.fullmatch(text) and int(text) >= 1 else None


def _asks_nothing(values: dict[str, Any]) -> bool:
    """No command and no sandbox named: typer's (its own help or error)."""
    named = values["list_runs"] or values["prune"] or values["remove"] is not None
    return values["command"] is None and not named


RUN = Table(  # each option of ``run``: the parameter of ``run_cmd.run`` it sets
    ("run",),
    {
        "--yes": flag("yes"),
        "--diff": flag("whole_diff"),
        "--json": flag("json_output"),
        "--keep": flag("keep"),
        "--from-head": flag("from_head"),
        "--list": flag("list_runs"),
        "--prune": flag("prune"),
        "--unconfined": flag("unconfined"),
        "--network": flag("network"),
        "--repo": value("repo"),
        "--continue": value("continue_run"),
        "--older-than": value("older_than"),
        "--remove": value("remove"),
        "--timeout": value("timeout", _seconds),
        "--state-dir": value("state_dir", path),
        "--url": value("url"),
        "--token-file": value("token_file", path),
        "--memory": value("memory"),
        "--max-procs": value("max_procs", _count),
        "--max-file-size": value("max_file_size"),
        "--symlinks": value("symlinks"),
        "--allow": many("allow"),
        "--pass-env": many("pass_env"),
        "--hide": many("hide", path),
    },
    rest="command",
    defaults={  # ``run_cmd.run``'s own where not False or None (checked by the test)
        "timeout": 3600.0,
        "memory": "8G",
        "max_procs": 1024,
        "max_file_size": "4G",
        "symlinks": "none",
    },
    refused=_asks_nothing,
    runs=lambda values: dispatch(**values),
)
TABLES = (RUN,)

# A next command a step names (``promoter run --continue RUN ...``) repeats these as the
# step was given them: how its command runs and whether its sandbox stays, which the run's
# record does not hold (docs/guide/sandbox.md). Every other option is in NOT_REPEATED, with
# why (checked against RUN by ``tests/unit/test_run_args.py``).
REPEATED = (
    "--keep",
    "--unconfined",
    "--network",
    "--timeout",
    "--memory",
    "--max-procs",
    "--max-file-size",
    "--symlinks",
    "--pass-env",
    "--hide",
)
NOT_REPEATED = {
    "--repo": "the record's",
    "--allow": "the record's (a step given it saves it there)",
    "--from-head": "a new run's start only",
    "--continue": "the next command's own",
    "--yes": "the person's answer at that step (named where it is the remedy)",
    "--diff": "the person's way to read that step",
    "--json": "the person's way to read that step",
    "--state-dir": "the daemon's, found as for any command (flag, environment, daemon.json)",
    "--url": "the daemon's, found as for any command (flag, environment, daemon.json)",
    "--token-file": "the daemon's, found as for any command (flag, environment, daemon.json)",
    "--list": "another command",
    "--prune": "another command",
    "--older-than": "another command",
    "--remove": "another command",
}


def _word(given: Any) -> str:
    """An option's value as typed again: a path resolved (the next command may be typed
    elsewhere), a whole number of seconds without its ``.0``."""
    if isinstance(given, Path):
        return str(given.resolve())
    if isinstance(given, float):
        return str(int(given)) if given.is_integer() else repr(given)
    return str(given)


def repeated(values: Mapping[str, Any]) -> tuple[str, ...]:
    """The words of the ``REPEATED`` options ``values`` (``run_cmd.run``'s parameters, by
    name) give other than their defaults, in ``REPEATED``'s order."""
    words: list[str] = []
    for name in REPEATED:
        option = RUN.options[name]
        given = values.get(option.param, RUN.defaults[option.param])
        if option.kind == args_reader.FLAG:
            words += [name] if given else []
        elif option.kind == args_reader.MANY:
            for each in given or ():
                words += [name, _word(each)]
        elif given != RUN.defaults[option.param]:
            words += [name, _word(given)]
    return tuple(words)


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The values typer would hand ``run_cmd.run`` for ``argv`` (the program's arguments),
    or None when this is not a ``promoter run`` of the shape read here."""
    found = args_reader.find(TABLES, argv, environ)
    return None if found is None else found[1]


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

    given = {  # what a next command this step names gives again
        "keep": keep, "timeout": timeout, "unconfined": unconfined, "network": network,
        "memory": memory, "max_procs": max_procs, "max_file_size": max_file_size,
        "symlinks": symlinks, "pass_env": pass_env, "hide": hide,
    }  # fmt: skip
    again = repeated(given)
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
        again=again,
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
    through typer's command (``args_reader.replay``), which exits."""
    args_reader.invoke(RUN, values)
