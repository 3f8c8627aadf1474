"""``promoter run``: one command for a person, from a sandbox clone to a promoted change.

``promoter run --repo NAME [--allow PATTERN:OPS]… [--yes] -- CMD ARGS…`` makes a sandbox
(``promoter.executor.sandbox``: an isolated clone of the repository at HEAD under the
state directory, its worktree then made equal to the person's worktree as it is, unless
``--from-head``), registers a grant and a lease for it (its preconditions: that state)
and mints an executor token (one request, ``POST /v1/runs``), runs CMD in the clone,
confined (``promoter.executor.confine``: bubblewrap, no network but the way to the
daemon, none of the person's files or promoter's state visible, limits) with
``PROMOTER_URL``/``PROMOTER_TOKEN`` set (and ``--timeout``), takes the clone's ``.git``
back (``sandbox_repo.restore``), builds and submits the bundle (or takes the one CMD
submitted through ``promoter mcp`` when the sandbox still gives it), shows its summary
and diff (never paged with ``--yes``), runs the preflight (a refusal names every drifted
path, ``run_answers.py``), asks on a terminal (or takes ``--yes``; otherwise
``not_confirmed``), promotes and prints the receipt. A completed run's sandbox is then
removed unless ``--keep``; any other is kept and named. ``--continue RUN -- CMD`` runs
the next step in a kept sandbox, chained on the last completed promotion, so each step
hands in only its new edits; ``--continue RUN`` without CMD promotes the bundle its last
step submitted and did not promote (declined, or interrupted at the question).
``--list``, ``--prune`` (``run_manage.py``) and ``--remove RUN`` manage sandboxes and
never touch the user's worktree.

The daemon, the credential and the state directory come from the flags, the environment,
the daemon ``promoter serve`` recorded for this user, then ./.promoter
(``promoter.cli.userconfig``); inside a guarded worktree ``--repo`` may be left out. The
person's credential (the operator's, docs/decisions/persons-cli-credential.md) runs,
promotes and, confirmed at the terminal, approves; ``--yes`` never approves. The command's
own failure is ``command_failed``; Ctrl-C at any stage is ``interrupted`` (exit 130),
naming the sandbox and bundle kept and the next command.

CMD never writes to the person's terminal (SPEC §10.17): it runs on a pseudo-terminal of
its own whose output promoter shows filtered (``promoter.executor.pane``), and before the
review and the question promoter resets the terminal and draws both itself.

Where confinement cannot be set up, ``run`` refuses (``confinement_unavailable``) unless
the person passes ``--unconfined``; the grant's stage (``run:bwrap`` or
``run:unconfined``), and so every receipt's ``grant_sha256``, and the run record name
which ran. See docs/guide/sandbox.md.

A file the person saved during the run or at the question is offered the merge
(``run_drift.py``); a link the grant's policy refuses, the rest without it
(``run_links.py``).

Deliberately thin: every decision is the host's (grant checks, verification, the
preflight, the approval gate, the promotion); this module orchestrates and prints.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import sys
import termios
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click.exceptions import UsageError  # the click typer's own groups use
from typer.exceptions import Abort  # what typer.confirm raises on Ctrl-C

from promoter.cli import run_answers as answers
from promoter.cli import run_drift as drift
from promoter.cli import run_links as links
from promoter.cli import run_manage as manage
from promoter.cli import userconfig
from promoter.cli.bundle_cmd import diff_unseen, print_bundle, print_diff, print_receipt
from promoter.cli.common import UrlOpt, console, err_console, escape
from promoter.cli.lazy import deferred
from promoter.cli.status_cmd import worktree_here
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import rfc3339, utcnow
from promoter.errors import (
    CommandFailed,
    ConfigError,
    Interrupted,
    NotConfirmed,
    PromoterError,
    error_class,
)
from promoter.executor import confine, hidden, layers, removal, sandbox_repo
from promoter.executor import sandbox as sandboxes
from promoter.executor.terminal import RESET
from promoter.git.layout import discover

if TYPE_CHECKING:
    from promoter.cli.orchestrate_cmd import parse_allow
    from promoter.domain.models import GrantV1
    from promoter.executor import build_bundle, promote_with_evidence, upload_and_submit
else:  # the bundle models and the builder: loaded by a run, not by --list, --prune, --remove
    parse_allow = deferred("promoter.cli.orchestrate_cmd", "parse_allow")
    build_bundle = deferred("promoter.executor.builder", "build_bundle")
    upload_and_submit = deferred("promoter.executor.handover", "upload_and_submit")
    promote_with_evidence = deferred("promoter.executor.handover", "promote_with_evidence")

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
DEFAULT_ALLOW = [{"pattern": "**", "operations": ["create", "modify", "delete"]}]
LIMITS = {"max_changes": 10_000, "max_total_bytes": 1 << 30}
GRANT_HOURS = 24


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


def _grant(
    record: sandboxes.RunRecord,
    identity: str,
    number: int,
    base: str | None,
    preconditions: list[dict[str, Any]] | None = None,
    confinement: str = "bwrap",
    symlinks: str = "none",
) -> Any:
    now = utcnow()
    grant: dict[str, Any] = {
        "schema": "GrantV1",
        "grant_id": f"grt_{record.run_id.removeprefix('run_')}_{number}",
        "repository_identity": identity,
        "branch": record.branch,
        "base_commit": record.base_commit,
        "base_tree": record.base_tree,
        "executor_run_id": record.run_id,
        "workflow_id": f"wf_{record.run_id.removeprefix('run_')}",
        "stage": f"run:{confinement}",  # which confinement ran, bound by grant_sha256
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": number,
        "not_before": rfc3339(now - timedelta(minutes=1)),
        "expires_at": rfc3339(now + timedelta(hours=GRANT_HOURS)),
        "write_allowlist": record.allow,
        "target_preconditions": preconditions or [],
        "limits": LIMITS,
    }
    if base is not None:
        grant["base_operation"] = base
    if symlinks != "none":
        grant["symlinks"] = symlinks
    return grant


def _repository(client: PromoterClient, name: str) -> dict[str, Any]:
    for repository in client.repositories():
        if repository["name"] == name:
            return repository
    raise error_class("repository_unknown")(f"the daemon guards no repository {name!r}")


@dataclass(frozen=True)
class Confinement:
    """How ``run`` confines CMD: the person's flags."""

    unconfined: bool = False
    network: bool = False
    limits: confine.Limits = field(default_factory=confine.Limits)
    pass_env: tuple[str, ...] = ()
    hide: tuple[Path, ...] = ()
    symlinks: str = "none"  # the grant's link policy (run_links.py), not a confinement

    @property
    def kind(self) -> str:
        return "unconfined" if self.unconfined else "bwrap"


def _hidden(state_dir: Path, record: sandboxes.RunRecord, extra: tuple[Path, ...]) -> list[Path]:
    """What the sandbox must not see: the state directory, the worktree, its git dirs,
    and ``extra`` (``--hide`` and every directory ``hidden.secret_dirs`` names)."""
    hidden = [state_dir.resolve(), Path(record.worktree).resolve(), *extra]
    try:
        layout = discover(record.worktree)
        hidden += [Path(layout.git_dir), Path(layout.common_dir)]
    except PromoterError:
        pass  # the worktree itself stays hidden; the daemon will refuse what it cannot read
    return hidden


def _run_command(
    command: list[str],
    record: sandboxes.RunRecord,
    env: dict[str, str],
    timeout: float,
    *,
    how: Confinement,
    state_dir: Path,
    url: str,
) -> int:
    _say(f"[bold]running[/] {escape(' '.join(command))} in {record.clone} ({how.kind})")
    run_home = Path(record.clone).parent
    home = run_home / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    from promoter.executor import layered  # the builder: loaded by a run only

    overlay = layered.overlay_of(record) if record.layout == "overlay" else None
    if how.unconfined:
        argv = overlay.wrap(command) if overlay else command  # mounted, not confined
        return confine.run_unconfined(argv, Path(record.clone), {**base, **env}, timeout)
    box = confine.Sandbox(
        clone=Path(record.clone),
        home=home,
        hide=_hidden(state_dir, record, how.hide),
        network=how.network,
        limits=how.limits,
        overlay=overlay,
    )
    outcome = confine.run_confined(
        command,
        box,
        confine.sandbox_env(base, env, home, how.pass_env),
        url,
        timeout,
        record.run_id,
    )
    _say(f"confined by bubblewrap; processes limited by {outcome.procs_limit}")
    return outcome.returncode


def _fresh_screen() -> None:
    """The person's terminal to a known state before promoter draws a review or a question
    (SPEC §10.17): whatever the command left of scroll regions, modes or the alternate
    screen is undone, and keys typed before the question are discarded. Off a terminal,
    nothing."""
    sys.stdout.flush()
    if sys.stdout.isatty():
        sys.stdout.write(RESET)
        sys.stdout.flush()
    if sys.stdin.isatty():
        with contextlib.suppress(termios.error, OSError, ValueError):
            termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)


def _approve_here(yes: bool, unseen: list[dict[str, Any]]) -> str | None:
    """``"yes"`` (the flag), ``"asked"`` (confirmed at the terminal), or None (declined).

    When the diff shown was cut (``unseen``: the files it did not show in full), the
    person confirms those files too, listed again at the question (SPEC §10 item 18)."""
    if yes:
        return "yes"
    if not sys.stdin.isatty():
        err_console.print("not a terminal: pass --yes to promote without asking")
        return None
    _fresh_screen()
    if not typer.confirm("Promote these changes into the worktree?"):
        return None
    if unseen:
        console.print(diff_unseen({"unseen": unseen}, "promoter bundle diff BUNDLE"), end="")
        question = f"Promote the {len(unseen)} file(s) not shown in full, as they are?"
        return "asked" if typer.confirm(question) else None
    return "asked"


def _refresh(orch: PromoterClient, state_dir: Path, record: sandboxes.RunRecord) -> None:
    """Steps left waiting (approval, a running attempt) take their operation's status now."""
    for step in record.steps:
        if step.operation_id and step.status in ("awaiting_approval", "in_progress"):
            step.status = str(orch.get_operation(step.operation_id)["status"])
    sandboxes.save(state_dir, record)


def _step(
    url: str,
    token: str,
    state_dir: Path,
    record: sandboxes.RunRecord,
    command: list[str],
    *,
    yes: bool,
    timeout: float,
    how: Confinement | None = None,
) -> None:
    how = how or Confinement()
    orch = PromoterClient(url, token, timeout=660.0)
    with orch:
        _refresh(orch, state_dir, record)
        repository = _repository(orch, record.repository)
        if repository["head"] != record.base_commit:
            raise error_class("target_drift")(
                f"{record.repository}'s HEAD moved from {record.base_commit[:12]} to "
                f"{str(repository['head'])[:12]} since run {record.run_id} began; start a new "
                f"run with promoter run --repo {record.repository}"
            )
        base = record.last_completed
        number = len(record.steps) + 1
        preconditions = answers.chained_preconditions(orch, record)
        grant_doc = _grant(
            record,
            repository["repository_identity"],
            number,
            base,
            preconditions,
            how.kind,
            how.symlinks,
        )
        lease = {k: grant_doc[k] for k in ("attempt", "generation", "resume_epoch", "fence")}
        opened = orch.open_run(  # the grant, its lease and the run's token: one request
            grant_doc,
            {"run_id": record.run_id, **lease, "expires_at": grant_doc["expires_at"]},
            int(timeout) + 3600,
        )
        minted = opened["token"]
        step = sandboxes.Step(
            grant_id=grant_doc["grant_id"], base_operation=base, confinement=how.kind
        )
        record.steps.append(step)
        sandboxes.save(state_dir, record)
        env = {
            "PROMOTER_URL": url,
            "PROMOTER_TOKEN": str(minted["token"]),
            "PROMOTER_GRANT": grant_doc["grant_id"],
            "PROMOTER_RUN": record.run_id,
            **answers.agent_env(record),
        }
        code = _run_command(command, record, env, timeout, how=how, state_dir=state_dir, url=url)
        if record.layout == "copy":  # an overlay's .git is never read by promoter's git
            sandbox_repo.restore(Path(record.clone).parent, Path(record.clone))
        if code != 0:
            step.status = "command_failed"
            sandboxes.save(state_dir, record)
            raise CommandFailed(
                f"the command exited with status {code}; nothing was submitted; the "
                f"sandbox is kept: {record.clone} (the next step: promoter run --continue "
                f"{record.run_id} -- CMD)",
                status=code,
                run_id=record.run_id,
            )
        executor = orch.with_token(str(minted["token"]))
        with executor:
            grant = executor.get_grant(grant_doc["grant_id"])
            since = executor.grant_base(grant.grant_id) if base else None
            requested: dict[str, Any] | None = None  # promoted with its evidence (--yes)
            adopted = answers.agent_bundle(executor, record, grant, since)
            if adopted is not None:
                bundle, receipt = adopted
                _say(f"promoting the bundle the command submitted: {bundle['bundle_id']}")
            else:
                with links.build(state_dir, record, step, grant, since, yes=yes) as built:
                    if not built.bundle["changes"]:
                        step.status = "no_changes"
                        sandboxes.save(state_dir, record)
                        _say("no changes since the last promotion: nothing to promote")
                        return
                    if yes:  # nobody is asked: blobs, bundle and promotion, one request
                        token = str(minted["token"])
                        receipt, requested = promote_with_evidence(orch, token, built, grant.fence)
                    else:
                        receipt = upload_and_submit(executor, built)
                    bundle = built.bundle
        step.bundle_id = str(bundle["bundle_id"])
        step.status = "submitted"
        sandboxes.save(state_dir, record)
        _fresh_screen()
        print_bundle(bundle)
        diff = orch.bundle_diff(step.bundle_id)
        print_diff(diff, pager=not yes, hint=f"promoter bundle diff {step.bundle_id}")
        print_receipt(receipt.wire())
        unseen = list(diff.get("unseen") or [])
        _promote(
            orch,
            state_dir,
            record,
            step,
            grant,
            receipt.receipt_sha256,
            yes=yes,
            unseen=unseen,
            requested=requested,
        )


def _confirmed_note() -> str:
    """The note an approval at the terminal carries: who confirmed (never the approver)."""
    try:
        return f"confirmed at the terminal by {getpass.getuser()}"
    except (KeyError, OSError):
        return "confirmed at the terminal"


def _promote(
    orch: PromoterClient,
    state_dir: Path,
    record: sandboxes.RunRecord,
    step: sandboxes.Step,
    grant: GrantV1,
    receipt_sha256: str,
    *,
    yes: bool,
    unseen: list[dict[str, Any]] | None = None,
    requested: dict[str, Any] | None = None,
) -> None:
    """Preflight, ask, promote; ``requested``: the operation a ``--yes`` run's one request
    already promoted with its evidence (docs/protocol.md), whose outcome stands for both."""
    assert step.bundle_id is not None
    if requested is None:
        preflight = orch.preflight(step.bundle_id, grant.fence)
        _say(f"preflight {preflight['status']}")
    else:  # a drift or a refusal is the operation's own (target_drift: merged below)
        preflight = {"status": "passed"}
        _say("requested with its evidence in one request; the promotion checked it")
    drifted = preflight["status"] != "passed"
    if drifted:  # a drift a merge can mend is offered the merge (run_drift.py)
        step.status = "preflight_refused"
        sandboxes.save(state_dir, record)
        consent: str | None = drift.offer(preflight, record, step.bundle_id, yes=yes)
    else:
        consent = _approve_here(yes, unseen or [])
    if consent is None:
        step.status = "declined"
        sandboxes.save(state_dir, record)
        raise NotConfirmed(
            f"not promoted; bundle {step.bundle_id} stays submitted (the sandbox is kept: "
            f"{record.clone}); promote that bundle with promoter run --continue "
            f"{record.run_id} --yes, or without --yes to answer at a terminal",
            bundle_id=step.bundle_id,
            run_id=record.run_id,
        )
    view = requested or orch.promote(step.bundle_id, receipt_sha256, grant.fence, wait=True)
    step.operation_id = str(view["operation_id"])
    if view.get("status") == "awaiting_approval":
        # the gate wants a person: a confirmation at the terminal is one, --yes is not;
        # the approver is the person's own credential (an operator's), never another
        if consent != "asked" or orch.whoami().get("role") != "operator":
            step.status = "awaiting_approval"
            sandboxes.save(state_dir, record)
            _say(f"awaiting approval: promoter approve {step.operation_id}")
            return
        seen = [str(u["path"]) for u in unseen or []]  # confirmed at the question
        view = orch.approve(step.operation_id, _confirmed_note(), wait=True, seen=seen)
    merged = drift.merged(  # refused target_drift: merged into a new bundle (run_drift.py)
        orch,
        state_dir,
        record,
        step,
        view,
        consent=consent,
        agreed=drifted,
        note=_confirmed_note(),
    )
    if merged is None:
        return
    view = merged
    step.status = str(view["status"])
    sandboxes.save(state_dir, record)
    if step.status != "completed":
        raise error_class(str(view.get("code") or "internal"))(
            f"operation {step.operation_id} is {step.status}: {view.get('detail') or ''}"
        )
    promoted = json.loads(orch.get_receipt(step.operation_id))
    _say(
        f"promoted: operation [bold]{step.operation_id}[/] completed, receipt "
        f"{promoted['receipt_sha256']}"
        + (f", chained on {promoted['base_operation']}" if promoted.get("base_operation") else "")
    )
    for target in promoted["targets"]:
        state = f"{target['sha256'][:12]} {target['mode']}" if target["exists"] else "deleted"
        _say(f"  {escape(target['path'])}  {state}")


def _finish(state_dir: Path, record: sandboxes.RunRecord, *, keep: bool) -> None:
    """A completed run's sandbox is removed (unless ``keep``); any other is kept and named."""
    last = record.steps[-1].status if record.steps else "new"
    if last == "completed" and not keep:  # off the critical path: after the answer
        going = removal.remove_later(state_dir, record.run_id)
        _say(
            f"sandbox {record.run_id} removed: its files go in the background ({going}); "
            "--keep keeps it for --continue"
        )
        return
    _say(
        f"sandbox kept: {record.clone}\n"
        f"next step in the same sandbox: promoter run --continue {record.run_id} -- CMD"
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
        bool, typer.Option("--yes", help="Promote without asking (and never page).")
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
    if not command and continue_run is None:
        raise UsageError("no command: promoter run [--repo NAME] -- CMD ARGS...")
    # every directory holding promoter's credentials, state or keys (unconfined: none)
    credential = target.token_path
    secrets = [] if unconfined else hidden.secret_dirs(state, credential, address, os.environ)
    how = Confinement(
        unconfined=unconfined,
        network=network,
        limits=confine.Limits(_size(memory), max_procs, _size(max_file_size)),
        pass_env=tuple(pass_env or ()),
        hide=(*(p.resolve() for p in hide or ()), *secrets),
        symlinks=links.policy(symlinks),
    )
    confine.sandbox_env({}, {}, Path(), how.pass_env)  # a bad --pass-env: refused now
    token = _token(target)
    if continue_run is not None and not command:
        record = sandboxes.load(state, continue_run)
        with _kept_on_interrupt(state, record):
            _promote_submitted(address, token, state, record, yes=yes)
        _finish(state, record, keep=keep)
        return
    assert command is not None
    if not unconfined:
        confine.probe(confine.bwrap_path())  # refuse before a sandbox or a grant exists
        # each hidden, or nothing made: the sandboxes' directory and the interpreter are
        # bound back into the sandbox over what is hidden
        bound = [sandboxes.runs_dir(state), confine.interpreter_prefix()]
        hidden.check_hidden(secrets, [credential] if credential else [], bound)
    if continue_run is not None:
        record = sandboxes.load(state, continue_run)
        if allow:
            record.allow = [parse_allow(a).wire() for a in allow]
    else:
        removal.sweep(state)  # removals whose process was killed
        try:
            with PromoterClient(address, token) as client:
                name = repo if repo is not None else _infer_repository(client)
                repository = _repository(client, name)
            record = sandboxes.create(
                state,
                repository=name,
                worktree=str(repository["worktree"]),
                branch=str(repository["branch"]),
                head=str(repository["head"]),
                created_at=rfc3339(utcnow()),
                allow=[parse_allow(a).wire() for a in allow] if allow else DEFAULT_ALLOW,
                from_head=from_head,
                layout=layers.chosen_layout(unconfined, sandboxes.runs_dir(state)),
            )
        except (KeyboardInterrupt, Abort):
            raise Interrupted(
                "interrupted before the sandbox was ready: nothing was run or promoted, and "
                "nothing of yours was changed"
            ) from None
        _say(answers.started(record))
    with _kept_on_interrupt(state, record):
        try:
            _step(address, token, state, record, command, yes=yes, timeout=timeout, how=how)
        except PromoterError:
            err_console.print(f"sandbox kept: {record.clone}", soft_wrap=True, highlight=False)
            raise
    _finish(state, record, keep=keep or links.keep_sandbox(record))


@contextmanager
def _kept_on_interrupt(state_dir: Path, record: sandboxes.RunRecord) -> Iterator[None]:
    """Ctrl-C (SIGINT) at any stage: the step is marked ``interrupted`` and the error names
    the sandbox and the bundle kept and the next command (exit 130)."""
    try:
        yield
    except (KeyboardInterrupt, Abort) as exc:
        if isinstance(exc, Abort):
            err_console.print()  # the question's line ends here
        raise _interrupted(state_dir, record) from None


def _interrupted(state_dir: Path, record: sandboxes.RunRecord) -> Interrupted:
    step = record.steps[-1] if record.steps else None
    if step is not None and step.status in ("started", "submitted", "declined"):
        step.status = "interrupted"
        sandboxes.save(state_dir, record)
    kept = f"interrupted: nothing was promoted; the sandbox is kept: {record.clone}"
    if step is not None and step.bundle_id is not None and step.operation_id is None:
        return Interrupted(
            f"{kept}; bundle {step.bundle_id} stays submitted: promote it with "
            f"promoter run --continue {record.run_id} --yes",
            run_id=record.run_id,
            bundle_id=step.bundle_id,
            sandbox=record.clone,
        )
    if step is not None and step.operation_id is not None:
        return Interrupted(
            f"interrupted while operation {step.operation_id} ran at the host, which finishes "
            f"it; the sandbox is kept: {record.clone}; its status: promoter run --list",
            run_id=record.run_id,
            operation_id=step.operation_id,
            sandbox=record.clone,
        )
    return Interrupted(
        f"{kept}; run the step again with promoter run --continue {record.run_id} -- CMD",
        run_id=record.run_id,
        sandbox=record.clone,
    )


PROMOTABLE = ("declined", "interrupted", "submitted")


def _promote_submitted(
    url: str, token: str, state_dir: Path, record: sandboxes.RunRecord, *, yes: bool
) -> None:
    """``--continue RUN`` without CMD: promote the bundle the last step left submitted."""
    step = record.steps[-1] if record.steps else None
    if step is None or step.bundle_id is None or step.status not in PROMOTABLE:
        last = step.status if step is not None else "nothing yet"
        raise UsageError(
            f"run {record.run_id} has no submitted bundle to promote (its last step: {last}); "
            f"give the next command: promoter run --continue {record.run_id} -- CMD"
        )
    with PromoterClient(url, token, timeout=660.0) as orch:
        grant = orch.get_grant(step.grant_id)
        receipt = orch.get_verification(step.bundle_id)
        _say(f"promoting the bundle step {len(record.steps)} submitted: {step.bundle_id}")
        print_bundle(orch.get_bundle(step.bundle_id).wire())
        print_diff(orch.bundle_diff(step.bundle_id), pager=not yes)
        print_receipt(receipt.wire())
        _promote(orch, state_dir, record, step, grant, receipt.receipt_sha256, yes=yes)


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _size(text: str) -> int:
    """``512M``, ``8G``, ``1048576``: a byte count (binary units)."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[: len(value) - len(unit)]
    if not number.isdigit() or int(number) == 0:
        raise ConfigError(f"not a size: {text!r} (e.g. 512M, 8G)")
    return int(number) * _UNITS[unit]


def register(app: typer.Typer) -> None:
    """Attach ``run`` to the main app."""
    app.command("run", help=HELP)(run)
