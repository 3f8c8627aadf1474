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
hands in only its new edits. ``--list``, ``--prune`` (``run_manage.py``) and ``--remove
RUN`` manage sandboxes and never touch the user's worktree.

Where confinement cannot be set up, ``run`` refuses (``confinement_unavailable``) unless
the person passes ``--unconfined``; the grant's stage (``run:bwrap`` or
``run:unconfined``), and so every receipt's ``grant_sha256``, and the run record name
which ran. See docs/guide/sandbox.md.

Deliberately thin: every decision is the host's (grant checks, verification, the
preflight, the approval gate, the promotion); this module orchestrates and prints.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from promoter.cli import run_answers as answers
from promoter.cli import run_manage as manage
from promoter.cli.bundle_cmd import print_bundle, print_diff, print_receipt
from promoter.cli.common import UrlOpt, console, err_console, server_url
from promoter.cli.orchestrate_cmd import parse_allow
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import rfc3339, utcnow
from promoter.domain.models import GrantV1
from promoter.errors import ConfigError, NotConfirmed, PromoterError, error_class
from promoter.executor import (
    confine,
    layered,
    layers,
    removal,
    sandbox_repo,
    upload_and_submit,
)
from promoter.executor import sandbox as sandboxes
from promoter.git.layout import discover

__all__ = ["register"]

HELP = (
    "Run CMD in an isolated clone of a guarded repository and promote what it changed.\n\n"
    "promoter run --repo NAME [--allow 'src/**:create,modify,delete']... [--yes] -- CMD ARGS...\n"
    "promoter run --continue RUN -- CMD ARGS...   (the next step, chained on the last one)\n"
    "promoter run --list | --remove RUN | --prune [--older-than 7d]\n\n"
    "The sandbox starts from your worktree as it is (uncommitted and untracked files "
    "included; --from-head: from HEAD); your own edits are not part of what it promotes. "
    "A completed run's sandbox is removed unless --keep.\n\n"
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


def _state_dir(state_dir: Path | None) -> Path:
    return state_dir or Path(os.environ.get("PROMOTER_STATE_DIR") or ".promoter")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _token_or_none(state_dir: Path, token_file: Path | None) -> str | None:
    try:
        return _orchestrator_token(state_dir, token_file)
    except ConfigError:
        return None


def _orchestrator_token(state_dir: Path, token_file: Path | None) -> str:
    if token_file is not None:
        token = _read(token_file)
        if token is None:
            raise ConfigError(f"cannot read token file {token_file}")
        return token
    token = _read(state_dir / "credentials" / "orchestrator.token")
    if token is None:
        raise ConfigError(
            f"no orchestrator token: pass --token-file FILE (none in {state_dir}/credentials)"
        )
    return token


def _grant(
    record: sandboxes.RunRecord,
    identity: str,
    number: int,
    base: str | None,
    preconditions: list[dict[str, Any]] | None = None,
    confinement: str = "bwrap",
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

    @property
    def kind(self) -> str:
        return "unconfined" if self.unconfined else "bwrap"


def _hidden(state_dir: Path, record: sandboxes.RunRecord, extra: tuple[Path, ...]) -> list[Path]:
    """What the sandbox must not see: the state directory, the worktree, its git dirs."""
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


def _approve_here(yes: bool) -> str | None:
    """``"yes"`` (the flag), ``"asked"`` (confirmed at the terminal), or None (declined)."""
    if yes:
        return "yes"
    if not sys.stdin.isatty():
        err_console.print("not a terminal: pass --yes to promote without asking")
        return None
    return "asked" if typer.confirm("Promote these changes into the worktree?") else None


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
            record, repository["repository_identity"], number, base, preconditions, how.kind
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
            raise ConfigError(
                f"the command exited with status {code}; nothing was submitted "
                f"(continue with promoter run --continue {record.run_id} -- CMD)"
            )
        executor = orch.with_token(str(minted["token"]))
        with executor:
            grant = executor.get_grant(grant_doc["grant_id"])
            since = executor.grant_base(grant.grant_id) if base else None
            adopted = answers.agent_bundle(executor, record, grant, since)
            if adopted is not None:
                bundle, receipt = adopted
                _say(f"promoting the bundle the command submitted: {bundle['bundle_id']}")
            else:
                with layered.build(record, grant, since=since) as built:
                    if not built.bundle["changes"]:
                        step.status = "no_changes"
                        sandboxes.save(state_dir, record)
                        _say("no changes since the last promotion: nothing to promote")
                        return
                    receipt = upload_and_submit(executor, built)
                    bundle = built.bundle
        step.bundle_id = str(bundle["bundle_id"])
        step.status = "submitted"
        sandboxes.save(state_dir, record)
        print_bundle(bundle)
        print_diff(orch.bundle_diff(step.bundle_id), pager=not yes)
        print_receipt(receipt.wire())
        _promote(orch, state_dir, record, step, grant, receipt.receipt_sha256, yes=yes)


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
) -> None:
    assert step.bundle_id is not None
    preflight = orch.preflight(step.bundle_id, grant.fence)
    _say(f"preflight {preflight['status']}")
    if preflight["status"] != "passed":
        step.status = "preflight_refused"
        sandboxes.save(state_dir, record)
        raise answers.refusal(preflight, record, step.bundle_id)
    consent = _approve_here(yes)
    if consent is None:
        step.status = "declined"
        sandboxes.save(state_dir, record)
        raise NotConfirmed(
            f"not promoted; bundle {step.bundle_id} stays submitted (the sandbox is kept: "
            f"{record.clone}); promote it with promoter run --continue {record.run_id} --yes "
            "-- true, or answer yes at a terminal",
            bundle_id=step.bundle_id,
            run_id=record.run_id,
        )
    view = orch.promote(step.bundle_id, receipt_sha256, grant.fence, wait=True)
    step.operation_id = str(view["operation_id"])
    if view.get("status") == "awaiting_approval":
        # the gate wants a person: a confirmation at the terminal is one, --yes is not
        operator = _read(state_dir / "credentials" / "operator.token")
        if operator is None or consent != "asked":
            step.status = "awaiting_approval"
            sandboxes.save(state_dir, record)
            _say(f"awaiting approval: promoter approve {step.operation_id}")
            return
        with orch.with_token(operator) as approver:  # the approver is this credential
            view = approver.approve(step.operation_id, _confirmed_note(), wait=True)
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
        Path | None, typer.Option("--token-file", help="Orchestrator token file.")
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
) -> None:
    state = _state_dir(state_dir)
    if list_runs:
        manage.list_sandboxes(state, server_url(url), _token_or_none(state, token_file))
        return
    if prune:
        manage.prune(
            state, server_url(url), _token_or_none(state, token_file), manage.age(older_than)
        )
        return
    if remove is not None:
        _say(f"removed {sandboxes.remove(state, remove)}")
        return
    if not command:
        raise ConfigError("no command: promoter run --repo NAME -- CMD ARGS...")
    how = Confinement(
        unconfined=unconfined,
        network=network,
        limits=confine.Limits(_size(memory), max_procs, _size(max_file_size)),
        pass_env=tuple(pass_env or ()),
        hide=tuple(p.resolve() for p in hide or ()),
    )
    confine.sandbox_env({}, {}, Path(), how.pass_env)  # a bad --pass-env: refused now
    if not unconfined:
        confine.probe(confine.bwrap_path())  # refuse before a sandbox or a grant exists
    address = server_url(url)
    token = _orchestrator_token(state, token_file)
    if continue_run is not None:
        record = sandboxes.load(state, continue_run)
        if allow:
            record.allow = [parse_allow(a).wire() for a in allow]
    else:
        if repo is None:
            raise ConfigError("name the repository: --repo NAME (or --continue RUN)")
        removal.sweep(state)  # removals whose process was killed
        with PromoterClient(address, token) as client:
            repository = _repository(client, repo)
        record = sandboxes.create(
            state,
            repository=repo,
            worktree=str(repository["worktree"]),
            branch=str(repository["branch"]),
            head=str(repository["head"]),
            created_at=rfc3339(utcnow()),
            allow=[parse_allow(a).wire() for a in allow] if allow else DEFAULT_ALLOW,
            from_head=from_head,
            layout=layers.chosen_layout(unconfined, sandboxes.runs_dir(state)),
        )
        _say(answers.started(record))
    try:
        _step(address, token, state, record, command, yes=yes, timeout=timeout, how=how)
    except PromoterError:
        err_console.print(f"sandbox kept: {record.clone}", soft_wrap=True, highlight=False)
        raise
    _finish(state, record, keep=keep)


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
