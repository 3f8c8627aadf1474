"""``promoter run``'s flags as typer reads them: the command's help, options and errors.

This module owns the flags (``--repo``, ``--allow``, ``--yes``, ``--diff``, ``--json``,
``--continue``, ``--list``, ``--prune``, ``--remove``, ``--unconfined``, ...) and their
help; ``run`` hands their values to ``promoter.cli.run_args.dispatch``, which a command
line of the common shape reaches without typer (``run_args.parse``, checked against
this module's options by a test). The person at the terminal is
``promoter.cli.run_person``'s, a run itself ``promoter.cli.run_start``'s, ``--list`` and
``--prune`` ``promoter.cli.run_manage``'s. The daemon and credential are found as
protocol: api#persons-command-line says; ``--yes`` never approves
(protocol: runs#approvals); Ctrl-C is ``interrupted`` (exit 130).
See docs/guide/sandbox.md.

Not here: any decision (the host's) or step of the workflow (``promoter.executor.run``);
this module only declares the flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import typer.core
from typer._click.core import Context  # typer's own click, which its commands use

from promoter.cli.common import UrlOpt
from promoter.cli.run_args import dispatch

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
    "may be left out, and CMD starts in the sandbox's copy of your current directory; the "
    "daemon and credential are the ones promoter serve recorded (promoter status shows "
    "them).\n\n"
    "CMD runs confined by bubblewrap: only the clone, a private HOME and /tmp writable; "
    "your worktree and promoter's state directory invisible; no network but the daemon "
    "(--network to allow it); --memory, --max-procs, --max-file-size and --timeout limit "
    "it. Without bubblewrap or user namespaces run refuses; --unconfined runs CMD with "
    "your permissions instead. See docs/guide/sandbox.md."
)


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
    dispatch(
        command=command,
        repo=repo,
        allow=allow,
        yes=yes,
        whole_diff=whole_diff,
        json_output=json_output,
        keep=keep,
        from_head=from_head,
        continue_run=continue_run,
        list_runs=list_runs,
        prune=prune,
        older_than=older_than,
        remove=remove,
        timeout=timeout,
        state_dir=state_dir,
        url=url,
        token_file=token_file,
        unconfined=unconfined,
        network=network,
        memory=memory,
        max_procs=max_procs,
        max_file_size=max_file_size,
        pass_env=pass_env,
        hide=hide,
        symlinks=symlinks,
    )


class RunCommand(typer.core.TyperCommand):
    """``run`` as typer parses it, with one hint: an unknown option after the command's
    first word (``promoter run sh -c …``, the ``--`` left out) is the command's own, and
    the error says where it goes."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        from typer._click.exceptions import NoSuchOption

        given = list(args)  # the parser consumes the list it is handed
        try:
            return super().parse_args(ctx, args)
        except NoSuchOption as exc:
            valued = {
                name
                for param in self.params
                if param.param_type_name == "option"
                and not getattr(param, "is_flag", False)
                and not getattr(param, "count", False)
                for name in param.opts
            }
            word, k = None, 0
            while k < len(given) and given[k].split("=")[0] not in ("--", exc.option_name):
                if given[k] in valued:
                    k += 2
                    continue
                if not given[k].startswith("-"):
                    word = given[k]
                    break
                k += 1
            if word is None:
                raise
            exc.message = (
                f"No such option: {exc.option_name}. The command and its own options go "
                f"after --: promoter run [OPTIONS] -- {word} {exc.option_name} ..."
            )
            exc.possibilities = None  # promoter's own options are not what was meant
            raise


def register(app: typer.Typer) -> None:
    """Attach ``run`` to the main app."""
    app.command("run", help=HELP, cls=RunCommand)(run)
