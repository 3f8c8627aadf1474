"""``promoter run``: the command line of a run, from a sandbox clone to a promoted change.

This module owns the flags (``--repo``, ``--allow``, ``--yes``, ``--diff``, ``--json``,
``--continue``, ``--list``, ``--prune``, ``--remove``, ``--unconfined``) and the person at
the terminal (``TerminalPerson``: progress, the review, questions, and the terminal reset
before them, protocol: runs#terminal-drawn-by-promoter); a run itself is
``promoter.cli.run_start``'s, imported only for one. The daemon and credential are found
as protocol: api#persons-command-line says; ``--yes`` never approves
(protocol: runs#approvals); Ctrl-C is ``interrupted`` (exit 130).
See docs/guide/sandbox.md.

Not here: any decision (the host's) or step of the workflow (``promoter.executor.run``);
this module parses, prints and asks.
"""

from __future__ import annotations

import contextlib
import sys
import termios
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click.exceptions import UsageError  # the click typer's own groups use

from promoter.cli import run_manage as manage
from promoter.cli import userconfig
from promoter.cli.bundle_cmd import (
    diff_summary,
    diff_unseen,
    print_bundle,
    print_diff,
    print_receipt,
)
from promoter.cli.common import UrlOpt, console, err_console
from promoter.cli.lazy import deferred
from promoter.cli.status_cmd import worktree_here
from promoter.client.sync import PromoterClient
from promoter.executor import sandbox as sandboxes
from promoter.executor.run.person import Consent, escape
from promoter.executor.terminal import RESET

# a run (``promoter.cli.run_start``, which imports this module): the confinement, layers
# and flow modules loaded by a run only, not by --list, --prune, --remove
start = deferred("promoter.cli.run_start", "start")

__all__ = ["register"]

HELP = (
    "Run CMD in an isolated clone of a guarded repository and promote what it changed.\n\n"
    "promoter run [--repo NAME] [--allow 'src/**:create,modify,delete']... [--yes] -- CMD ARGS...\n"
    "promoter run --continue RUN -- CMD ARGS...   (the next step, chained on the last one)\n"
    "promoter run --continue RUN [--yes]   (promote the bundle its last step left submitted)\n"
    "promoter run --list | --remove RUN | --prune [--older-than 7d]\n\n"
    "The sandbox starts from your worktree as it is (uncommitted and untracked files "
    "included; --from-head: from HEAD); your own edits are not part of what it promotes. "
    "A completed run's sandbox is removed unless --keep. Inside a guarded worktree --repo "
    "may be left out; the daemon and credential are the ones promoter serve recorded "
    "(promoter status shows them).\n\n"
    "CMD runs confined by bubblewrap: only the clone, a private HOME and /tmp writable; "
    "your worktree and promoter's state directory invisible; no network but the daemon "
    "(--network to allow it); --memory, --max-procs, --max-file-size and --timeout limit "
    "it. Without bubblewrap or user namespaces run refuses; --unconfined runs CMD with "
    "your permissions instead. See docs/guide/sandbox.md."
)


def _say(text: str) -> None:
    console.print(text, soft_wrap=True)


def _target(state_dir: Path | None, url: str | None, token_file: Path | None) -> userconfig.Target:
    """The daemon, the person's credential and the state directory (the sandboxes' home)."""
    return userconfig.resolve(url, token_file, state_dir)


def _token(target: userconfig.Target) -> str:
    if target.token is None:
        raise userconfig.no_token(target)
    return target.token


def _infer_repository(client: PromoterClient) -> str:
    """The repository whose worktree the current directory is in (``--repo`` left out)."""
    here = worktree_here()
    repositories = client.repositories()
    for repository in repositories:
        if here is not None and here == str(Path(str(repository["worktree"])).resolve()):
            return str(repository["name"])
    names = ", ".join(str(r["name"]) for r in repositories) or "none"
    where = f"{here} is not" if here is not None else "the current directory is not in"
    raise UsageError(
        f"name the repository: --repo NAME ({where} a worktree the daemon guards; "
        f"it guards: {names})"
    )


def _fresh_screen() -> None:
    """The person's terminal to a known state before promoter draws a review or a question
    (protocol: runs#terminal-drawn-by-promoter): whatever the command left of scroll regions, modes
    or the alternate screen is undone, and keys typed before the question are discarded. Off a
    terminal, nothing."""
    sys.stdout.flush()
    if sys.stdout.isatty():
        sys.stdout.write(RESET)
        sys.stdout.flush()
    if sys.stdin.isatty():
        with contextlib.suppress(termios.error, OSError, ValueError):
            termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)


def _approve_here(yes: bool, unseen: Sequence[Mapping[str, Any]]) -> Consent:
    """``"yes"`` (the flag), ``"asked"`` (confirmed at the terminal), or None (declined).

    When the diff shown was cut (``unseen``: the files it did not show in full), the
    person confirms those files too, listed again at the question
    (protocol: api#every-byte-reviewable)."""
    return _approve_at(yes, unseen, stderr=False)


def _approve_at(yes: bool, unseen: Sequence[Mapping[str, Any]], *, stderr: bool) -> Consent:
    """``_approve_here`` with the questions on stderr when ``stderr`` (``--json``)."""
    if yes:
        return "yes"
    if not sys.stdin.isatty():
        err_console.print("not a terminal: pass --yes to promote without asking")
        return None
    _fresh_screen()
    if not typer.confirm("Promote these changes into the worktree?", err=stderr):
        return None
    if unseen:
        out = err_console if stderr else console
        out.print(diff_unseen({"unseen": unseen}, "promoter bundle diff BUNDLE"), end="")
        question = f"Promote the {len(unseen)} file(s) not shown in full, as they are?"
        return "asked" if typer.confirm(question, err=stderr) else None
    return "asked"


@dataclass(frozen=True)
class TerminalPerson:
    """The person at this command line (``promoter.executor.run.person.Person``): progress
    on stdout (stderr with ``--json``), questions at the terminal, ``--yes`` a flag."""

    yes: bool = False
    whole_diff: bool = False  # --diff: the whole diff even with --yes
    json: bool = False

    def say(self, text: str) -> None:
        out = err_console if self.json else console
        out.print(text, soft_wrap=True, highlight=False)

    def warn(self, text: str) -> None:
        err_console.print(text, soft_wrap=True, highlight=False)

    def review(
        self,
        bundle: dict[str, Any] | None,
        diff: Mapping[str, Any],
        receipt: dict[str, Any] | None,
        *,
        hint: str | None,
    ) -> None:
        """At a terminal without ``--yes``: the bundle, its diff (paged) and the receipt.
        With ``--yes`` (or ``--json``) the summary of the diff instead, unless ``--diff``."""
        _fresh_screen()
        hint = hint or (f"promoter bundle diff {bundle['bundle_id']}" if bundle else "")
        if self.json:
            err_console.print(
                diff_summary(diff, hint) if not self.whole_diff else diff_text_of(diff),
                end="",
                soft_wrap=True,
                highlight=False,
            )
            return
        summary = self.yes and not self.whole_diff
        if bundle is not None:
            print_bundle(bundle, paths=not summary)  # the summary names every path
        if summary:
            console.print(diff_summary(diff, hint), end="", soft_wrap=True, highlight=False)
        else:
            print_diff(diff, pager=not self.yes, hint=hint)
        if receipt is not None:
            print_receipt(receipt)

    def approve(self, unseen: Sequence[Mapping[str, Any]]) -> Consent:
        if self.json:
            return _approve_at(self.yes, unseen, stderr=True)
        return _approve_here(self.yes, unseen)

    def agree(self, question: str, *, no_terminal: str) -> Consent:
        if self.yes:
            self.say(f"{escape(question)} yes (--yes)")
            return "yes"
        if not sys.stdin.isatty():
            err_console.print(no_terminal, soft_wrap=True, highlight=False)
            return None
        return "asked" if typer.confirm(question, default=True, err=self.json) else None

    def agree_to_part(self, question: str) -> bool:
        if self.yes:
            err_console.print(
                "--yes never promotes a part: answer at a terminal to promote the rest"
            )
            return False
        if not sys.stdin.isatty():
            return False
        return typer.confirm(question, default=True, err=self.json)


def diff_text_of(diff: Mapping[str, Any]) -> Any:
    """The whole answer as ``print_diff`` shows it, for stderr (``--json --diff``)."""
    from promoter.cli.bundle_cmd import diff_flags, diff_text

    return diff_flags(diff) + diff_unseen(diff) + diff_text(diff["unified_diff"])


def run(
    command: Annotated[
        list[str] | None, typer.Argument(help="The command to run in the clone (after --).")
    ] = None,
    repo: Annotated[str | None, typer.Option("--repo", help="The guarded repository.")] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option("--allow", help="PATTERN:OPS the run may write (default all paths)."),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option("--yes", help="Promote without asking; show a summary, not the diff."),
    ] = False,
    whole_diff: Annotated[
        bool, typer.Option("--diff", help="With --yes or --json: print the whole diff too.")
    ] = False,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print the run's outcome as JSON on stdout (words: stderr)."),
    ] = False,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the sandbox after a completed promotion.")
    ] = False,
    from_head: Annotated[
        bool,
        typer.Option("--from-head", help="Start the sandbox at HEAD, not at your worktree."),
    ] = False,
    continue_run: Annotated[
        str | None, typer.Option("--continue", help="Continue this run's sandbox.")
    ] = None,
    list_runs: Annotated[bool, typer.Option("--list", help="List the sandboxes.")] = False,
    prune: Annotated[
        bool, typer.Option("--prune", help="Remove finished or abandoned sandboxes.")
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="With --prune: only those older than this (7d, 12h)."),
    ] = None,
    remove: Annotated[
        str | None, typer.Option("--remove", help="Delete this run's sandbox.")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds the command may run.")
    ] = 3600.0,
    state_dir: Annotated[
        Path | None, typer.Option("--state-dir", help="The daemon's state directory.")
    ] = None,
    url: UrlOpt = None,
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help="Token file (default: the one promoter serve recorded)."),
    ] = None,
    unconfined: Annotated[
        bool, typer.Option("--unconfined", help="Run CMD with your permissions, unconfined.")
    ] = False,
    network: Annotated[
        bool, typer.Option("--network", help="Let the confined CMD use the network.")
    ] = False,
    memory: Annotated[
        str, typer.Option("--memory", help="Address space CMD may map (RLIMIT_AS), e.g. 8G.")
    ] = "8G",
    max_procs: Annotated[
        int, typer.Option("--max-procs", min=1, help="Processes CMD may run at once.")
    ] = 1024,
    max_file_size: Annotated[
        str, typer.Option("--max-file-size", help="Largest file CMD may write, e.g. 4G.")
    ] = "4G",
    pass_env: Annotated[
        list[str] | None,
        typer.Option("--pass-env", help="An environment variable the confined CMD gets."),
    ] = None,
    hide: Annotated[
        list[Path] | None, typer.Option("--hide", help="A directory the confined CMD must not see.")
    ] = None,
    symlinks: Annotated[
        str,
        typer.Option(
            "--symlinks", help="Links the bundle may carry: none, inside (the worktree), any."
        ),
    ] = "none",
) -> None:
    target = _target(state_dir, url, token_file)
    state, address = target.state_dir, target.url
    if list_runs:
        manage.list_sandboxes(state, address, target.token)
        return
    if prune:
        manage.prune(state, address, target.token, manage.age(older_than))
        return
    if remove is not None:
        _say(f"removed {sandboxes.remove(state, remove)}")
        return
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


def register(app: typer.Typer) -> None:
    """Attach ``run`` to the main app."""
    app.command("run", help=HELP)(run)
