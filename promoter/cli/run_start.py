"""``promoter run`` of a command: the sandbox made or continued, the step run and promoted.

``start`` is the run path of ``promoter.cli.run_args.dispatch`` (the flags read by typer
or by ``run_args.parse``; the person asked by ``run_person.TerminalPerson``): the
confinement the flags ask for, checked before a sandbox or a grant exists (bubblewrap
probed while the repository is looked up and its worktree read); a new sandbox (``flow.start``) or a
continued one; the step (``flow.step``) or the promotion a continued run's last step
left submitted, started in the sandbox's counterpart of the current directory; the
outcome ``--json`` prints and Ctrl-C as ``interrupted`` (exit 130).
It is imported only by a run, so ``run --list``, ``--prune`` and ``--remove`` load none
of the confinement, layers or flow modules. A usage error (no command, no repository
named outside a guarded worktree) is typer's, which is imported for it.

Not here: the flags, the person at the terminal, or any step of the workflow
(``promoter.executor.run``); this module wires them together.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shlex
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from promoter.cli import userconfig
from promoter.cli.common import err_console
from promoter.cli.run_person import TerminalPerson, interrupted
from promoter.cli.startup import deferred
from promoter.client.sync import PromoterClient
from promoter.errors import CommandFailed, ConfigError, Interrupted, PromoterError
from promoter.executor import confine, hidden, layers, removal
from promoter.executor import sandbox as sandboxes
from promoter.executor.run import answers, flow, links
from promoter.executor.run.state import Run

if TYPE_CHECKING:
    from promoter.cli.orchestrate_cmd import parse_allow
else:  # the bundle models: loaded when --allow is given
    parse_allow = deferred("promoter.cli.orchestrate_cmd", "parse_allow")

__all__ = ["infer_repository", "start"]


def _usage_error(message: str) -> Exception:
    """The usage error typer's command prints (exit 2); typer is loaded only for one."""
    from typer._click.exceptions import UsageError  # the click typer's own groups use

    return UsageError(message)


def _token(target: userconfig.Target) -> str:
    if target.token is None:
        raise userconfig.no_token(target)
    return target.token


def _hidden_dir(given: Path) -> Path:
    """A ``--hide`` directory, resolved; a file, or nothing, would be silently left as it
    is (a whole directory is hidden, docs/guide/sandbox.md): refused before anything."""
    resolved = given.resolve()
    if not resolved.exists():
        raise ConfigError(f"--hide {given}: no such directory; nothing was made")
    if not resolved.is_dir():
        raise ConfigError(
            f"--hide {given}: not a directory; a whole directory is hidden, never a single "
            "file: hide the directory that holds it; nothing was made"
        )
    if resolved == Path("/"):
        raise ConfigError(
            f"--hide {given}: the root is what the sandbox is made of; hide a "
            "directory below it; nothing was made"
        )
    return resolved


def infer_repository(client: PromoterClient) -> str:
    """The repository whose worktree the current directory is in (``--repo`` left out)."""
    from promoter.cli.status_cmd import worktree_here

    here = worktree_here()
    repositories = client.repositories()
    for repository in repositories:
        if here is not None and here == str(Path(str(repository["worktree"])).resolve()):
            return str(repository["name"])
    names = ", ".join(str(r["name"]) for r in repositories) or "none"
    where = f"{here} is not" if here is not None else "the current directory is not in"
    guard = ""
    if here is not None:  # a worktree of its own: how the daemon comes to guard it too
        guard = (  # the command that started the daemon (its state, its port) is not known here
            "; to guard it too, start the daemon again with --repo "
            f"{shlex.quote(f'{Path(here).name}={here}')} added to the command that started it "
            "(docs/guide/getting-started.md#more-than-one-repository)"
        )
    raise _usage_error(
        f"name the repository: --repo NAME ({where} a worktree the daemon guards; "
        f"it guards: {names}{guard})"
    )


def start(
    target: userconfig.Target,
    command: list[str] | None,
    *,
    repo: str | None,
    allow: list[str] | None,
    person: TerminalPerson,
    keep: bool,
    from_head: bool,
    continue_run: str | None,
    timeout: float,
    unconfined: bool,
    network: bool,
    memory: str,
    max_procs: int,
    max_file_size: str,
    pass_env: list[str] | None,
    hide: list[Path] | None,
    symlinks: str,
    again: tuple[str, ...] = (),
) -> None:
    """Run ``command`` in a new sandbox (or ``continue_run``'s) and promote what it changed.

    ``again``: the options a next command this step names gives again
    (``run_args.repeated``)."""
    state, address = target.state_dir, target.url
    if not command and continue_run is None:
        raise _usage_error("no command: promoter run [--repo NAME] -- CMD ARGS...")
    if unconfined:  # what only confinement does, asked of a run without it: refused now
        for given, flag in ((network, "--network"), (hide, "--hide"), (pass_env, "--pass-env")):
            if given:
                raise ConfigError(
                    f"{flag} confines the command, and --unconfined runs it without "
                    "confinement (your permissions, environment and network); give one of "
                    "them; nothing was made"
                )
    # every directory holding promoter's credentials, state or keys (unconfined: none)
    credential = target.token_path
    secrets = [] if unconfined else hidden.secret_dirs(state, credential, address, os.environ)
    hidden_dirs = [_hidden_dir(p) for p in hide or ()]
    how = flow.Confinement(
        unconfined=unconfined,
        network=network,
        limits=confine.Limits(_size(memory), max_procs, _size(max_file_size)),
        pass_env=tuple(pass_env or ()),
        hide=(*hidden_dirs, *secrets),
        symlinks=links.policy(symlinks),
    )
    confine.sandbox_env({}, {}, Path(), how.pass_env)  # a bad --pass-env: refused now
    host = flow.Host(address, _token(target), state)
    if continue_run is not None and not command:
        run = Run(state, sandboxes.load(state, continue_run))
        run.again = again
        with _outcome_printed(run, person.json) as outcome, _kept_on_interrupt(run):
            try:
                flow.promote_submitted(host, run, person, outcome)
            except flow.NothingToPromote as exc:
                raise _usage_error(str(exc)) from None
        flow.finish(run, person, keep=keep)
        return
    assert command is not None
    with contextlib.ExitStack() as held:
        # every process of the command has ended before the step's end is told (its
        # cgroup is removed in the background while the bundle is built and promoted)
        held.callback(confine.settle_cgroups)
        stem: confine.Stem | None = None
        with contextlib.ExitStack() as probes:
            probed = _no_probe
            if not unconfined:
                # refuse before a sandbox or a grant exists: bwrap tries the namespaces while
                # the repository is looked up, and is waited for before anything is made
                # (a passing answer kept among the sandboxes for the next runs)
                kept = sandboxes.runs_dir(state)
                probed = probes.enter_context(confine.probing(confine.bwrap_path(), kept))
                # each hidden, or nothing made: the sandboxes' directory and the interpreter
                # are bound back into the sandbox over what is hidden
                bound = [sandboxes.runs_dir(state), confine.interpreter_prefix()]
                hidden.check_hidden(secrets, [credential] if credential else [], bound)
                # the command's first process starts now and waits for it (``confine.Stem``)
                stem = held.enter_context(confine.Stem(how.limits.procs))
            if continue_run is not None:
                probed()
                run = Run(state, sandboxes.load(state, continue_run))
                if allow:
                    run.record.allow = [parse_allow(a).wire() for a in allow]
            else:
                run = _new_sandbox(host, repo, allow, from_head, unconfined, probed)
                person.say(answers.started(run.record))
        run.again = again
        with _outcome_printed(run, person.json) as outcome, _kept_on_interrupt(run):
            try:
                flow.step(
                    host, run, command, person=person, timeout=timeout, how=how,
                    outcome=outcome, stem=stem, here=_here(),
                )  # fmt: skip
            except PromoterError as exc:
                if isinstance(exc, CommandFailed) and not unconfined:
                    # bubblewrap's own failure ends the command too: probed again next time
                    confine.forget_probe(sandboxes.runs_dir(state))
                err_console.print(
                    f"sandbox kept: {run.record.clone}", soft_wrap=True, highlight=False
                )
                raise
    flow.finish(run, person, keep=keep or links.keep_sandbox(run.record))


def _here() -> str | None:
    """The current directory, where the command starts in the sandbox (``run.where``);
    None when it is gone (the command then starts at the sandbox's root)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _no_probe() -> None:
    """Nothing to wait for: an unconfined run probes no confinement."""


def _new_sandbox(
    host: flow.Host,
    repo: str | None,
    allow: list[str] | None,
    from_head: bool,
    unconfined: bool,
    probed: Callable[[], None],
) -> Run:
    """A new sandbox of ``repo`` (else of the worktree the current directory is in), made
    once ``probed`` has said that the confinement works."""
    state = host.state_dir
    removal.sweep(state)  # removals whose process was killed
    try:
        if repo is not None:
            name = repo
        else:
            with PromoterClient(host.url, host.token) as client:
                name = infer_repository(client)
        wanted = [parse_allow(a).wire() for a in allow] if allow else None

        def layout() -> str:  # once the worktree is known not to hold the state directory
            return layers.chosen_layout(unconfined, sandboxes.runs_dir(state))

        # the start's modules load while the daemon and git answer the look-up
        loaded = _preloading("promoter.executor.layered", "promoter.store.durable")
        return flow.start(
            host, name, allow=wanted, from_head=from_head, layout=layout, ready=probed,
            loaded=loaded,
        )  # fmt: skip
    except BaseException as exc:
        if not interrupted(exc):
            raise
        raise Interrupted(
            "interrupted before the sandbox was ready: nothing was run or promoted, and "
            "nothing of yours was changed"
        ) from None


def _preloading(*modules: str) -> Callable[[], None]:
    """``modules`` imported by a thread of their own; what this returns waits for it,
    and is called before this thread imports anything again (no module is imported by two
    threads at once). An import that fails there is left for this thread's own import to
    raise."""

    def load() -> None:
        with contextlib.suppress(BaseException):
            for module in modules:
                importlib.import_module(module)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    return thread.join


@contextmanager
def _outcome_printed(run: Run, json_output: bool) -> Iterator[flow.Outcome]:
    """With ``--json``: the run's outcome as one JSON document on stdout when the step ends,
    also when it ends in an error (the error's code and detail then on stderr as always).
    The outcome is filled by the flow, whatever the step came to."""
    outcome = flow.Outcome()
    try:
        yield outcome
    finally:
        if json_output:
            document = outcome.wire(run)
            sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
            sys.stdout.flush()


@contextmanager
def _kept_on_interrupt(run: Run) -> Iterator[None]:
    """Ctrl-C (SIGINT) at any stage: the step is marked ``interrupted`` and the error names
    the sandbox and the bundle kept and the next command (exit 130)."""
    try:
        yield
    except BaseException as exc:
        if not interrupted(exc):
            raise
        if not isinstance(exc, KeyboardInterrupt):
            err_console.print()  # the question's line ends here (typer's Abort)
        raise flow.interrupted(run) from None


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _size(text: str) -> int:
    """``512M``, ``8G``, ``1048576``: a byte count (binary units)."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[: len(value) - len(unit)]
    if not number.isdigit() or int(number) == 0:
        raise ConfigError(f"not a size: {text!r} (e.g. 512M, 8G)")
    return int(number) * _UNITS[unit]
