"""The workflow of ``promoter run``: from a sandbox to a promoted change, one step at a time.

``start`` makes the sandbox (a clone or layers over a shared base, its worktree the
person's as it is unless ``from_head``, read where the daemon's watch says it may have
changed: ``start_watch.py``); ``step`` (a new run's first one with the repository and
layout its start found, not asked of the daemon again, HEAD read again from the
worktree's files: ``state.Known``) registers the grant, lease and token in one request
(the grant then known by its hash, not read back: ``registered_grant``), runs the
command (confined unless ``Confinement.unconfined``; in the sandbox's counterpart of the
person's directory, ``where.py``), adopts or builds the bundle,
submits it and shows the review; ``promote`` runs the preflight (with ``drift.py``'s
offer), asks, promotes and fetches the receipt (after a conflicted merge, ``step`` submits
the rest of the bundle the person agreed to, ``rest.py``, and promotes it as any bundle);
``promote_submitted``, ``finish`` and ``interrupted`` continue, clean up and stop. A
bundle the builder or the host refuses ends its step ``refused`` (``_refused``, the one
place; ``status.refusal`` says which errors are refusals); any other error leaves it
``started``. Every move goes through ``state.Run``; everything shown or asked goes
through a ``person.Person``.

A repository another host of the daemon's cluster guards is read from that host; the
step's first write, answered 421, is followed once to the owner, and the rest of the step
goes to the owner (protocol: hosts#answers-that-route).

Not here: any decision the host makes, the command line (``promoter.cli.run_cmd``), and
how a person is shown things.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from promoter.client.sync import PromoterClient
from promoter.domain.canonical import now_rfc3339
from promoter.domain.hidden import one_line, visible
from promoter.errors import (
    CommandFailed,
    Interrupted,
    MergeConflict,
    NotConfirmed,
    PromoterError,
    error_class,
)
from promoter.executor import confine, removal
from promoter.executor import sandbox as sandboxes
from promoter.executor.run import answers, drift, links, rest, where
from promoter.executor.run.merged import followed
from promoter.executor.run.person import Person, escape
from promoter.executor.run.state import PROMOTABLE, Known, Run, RunStatus
from promoter.executor.run.status import ending, shown
from promoter.git.layout import RepoLayout, discover

if TYPE_CHECKING:
    from promoter.domain import answers as wire
    from promoter.domain.bundle_records import Grant
    from promoter.executor.handover import Promoted

__all__ = [
    "DEFAULT_ALLOW",
    "Confinement",
    "Host",
    "NothingToPromote",
    "Outcome",
    "finish",
    "interrupted",
    "promote_submitted",
    "registered_grant",
    "repository",
    "start",
    "step",
]

DEFAULT_ALLOW = [{"pattern": "**", "operations": ["create", "modify", "delete"]}]
LIMITS = {"max_changes": 10_000, "max_total_bytes": 1 << 30}
GRANT_HOURS = 24


class NothingToPromote(ValueError):
    """``--continue RUN`` without a command, and the last step left no bundle to promote."""


# the records of a step: made at each run's import, so no dataclass (whose methods are
# generated and compiled one by one as the class is made)


class Host(NamedTuple):
    """The daemon a run talks to, the person's credential, and its state directory."""

    url: str
    token: str
    state_dir: Path


class Confinement(NamedTuple):
    """How ``run`` confines CMD: the person's flags."""

    unconfined: bool = False
    network: bool = False
    limits: confine.Limits = confine.Limits()  # frozen: one for all
    pass_env: tuple[str, ...] = ()
    hide: tuple[Path, ...] = ()
    symlinks: str = "none"  # the grant's link policy (links.py), not a confinement

    @property
    def kind(self) -> str:
        return "unconfined" if self.unconfined else "bwrap"


class Outcome:
    """What a step came to: the bundle, the operation and the promotion receipt's hash."""

    __slots__ = ("bundle", "receipt_sha256", "targets")

    def __init__(
        self,
        bundle: dict[str, Any] | None = None,
        receipt_sha256: str | None = None,  # the promotion's receipt (completed only)
        targets: list[dict[str, Any]] | None = None,
    ) -> None:
        self.bundle = bundle
        self.receipt_sha256 = receipt_sha256
        self.targets: list[dict[str, Any]] = targets if targets is not None else []

    def wire(self, run: Run) -> dict[str, Any]:
        """The run's outcome as one JSON document (``promoter run --json``)."""
        record = run.record
        last = run.last
        bundle = self.bundle
        return {
            "schema": "RunOutcomeV1",
            "run_id": record.run_id,
            "repository": record.repository,
            "sandbox": record.clone,
            "status": str(last.status) if last is not None else None,
            "steps": [
                {
                    "grant_id": s.grant_id,
                    "status": str(s.status),
                    "bundle_id": s.bundle_id,
                    "operation_id": s.operation_id,
                    "base_operation": s.base_operation,
                    "confinement": s.confinement,
                    "left_out": list(s.left_out),
                    "code": s.code,
                }
                for s in record.steps
            ],
            "bundle": None
            if bundle is None
            else {
                "bundle_id": bundle["bundle_id"],
                "bundle_sha256": bundle.get("bundle_sha256"),
                "change_count": bundle.get("change_count"),
                "total_bytes": bundle.get("total_bytes"),
                "changes": [
                    {"path": c["path"], "operation": c["operation"]} for c in bundle["changes"]
                ],
            },
            "operation_id": last.operation_id if last is not None else None,
            "receipt_sha256": self.receipt_sha256,
            "targets": self.targets,
        }


def repository(client: PromoterClient, name: str) -> wire.RepositoryInfo:
    """The guarded repository ``name`` as the daemon lists it, or as the host of the same
    cluster that guards it lists it (``locate``)."""
    return locate(client, name)[1]


def locate(client: PromoterClient, name: str) -> tuple[str, wire.RepositoryInfo]:
    """The base URL of the host guarding repository ``name`` and the repository as that
    host lists it: this daemon, else the host the cluster's map names (``GET
    /v1/repositories``' ``cluster``), asked there only when it is a host of the cluster
    (the rule a 421 is followed by: the credential goes nowhere else)."""
    for found in client.repositories():
        if found["name"] == name:
            return client.url, found
    for entry in client.guardians() or []:
        address = entry.get("address")
        if entry.get("name") != name or entry.get("this_host") or not isinstance(address, str):
            continue
        if client.in_cluster(address):
            with client.with_token(client.token, url=address) as owner:
                for found in owner.repositories():
                    if found["name"] == name:
                        return owner.url, found
    raise error_class("repository_unknown")(f"the daemon guards no repository {name!r}")


def start(
    host: Host,
    name: str,
    *,
    allow: list[dict[str, Any]] | None,
    from_head: bool,
    layout: str | Callable[[], str] = "copy",
    ready: Callable[[], None] | None = None,
    loaded: Callable[[], None] | None = None,
) -> Run:
    """A new sandbox of the guarded repository ``name`` (its record saved); ``layout``:
    a clone (``copy``) or layers over a shared base (``overlay``, ``layers.chosen_layout``),
    or what makes that choice (it may write its probe's answer in the state directory), asked
    once the worktree is known not to hold the state directory.
    ``ready`` is called once the repository is found and its worktree's layout and HEAD
    read, before anything is made (it may refuse: the confinement's probe,
    ``confine.probing``). ``loaded`` is called once the repository is found and the
    worktree's layout read, before the start imports a module (another thread may be
    importing them meanwhile: no module is imported by two threads at once). The run
    holds the repository as found and the layout (``state.Known``): its first step does
    not look them up again."""
    with PromoterClient(host.url, host.token) as client:
        url, found = locate(client, name)
        sandboxes.refuse_state_inside(host.state_dir, str(found["worktree"]))
        chosen = layout() if callable(layout) else layout
        discovered = _discovered(str(found["worktree"]))
        if loaded is not None:
            loaded()
        from promoter.executor.start_watch import Watched

        def ask(positions: list[tuple[str, int]]) -> Mapping[str, Any]:
            # a client of the asking thread's own: a start that fails or is interrupted
            # leaves the thread to its answer, never waits for it (``sandboxes.create``)
            with client.with_token(client.token, url=url) as owner:
                return owner.worktree_changes(name, positions)

        record = sandboxes.create(
            host.state_dir,
            repository=name,
            worktree=str(found["worktree"]),
            branch=str(found["branch"]),
            head=str(found["head"]),
            created_at=now_rfc3339(),
            allow=allow if allow else DEFAULT_ALLOW,
            from_head=from_head,
            layout=chosen,
            watched=Watched(host.state_dir, ask),
            found=discovered,
            ready=ready,
        )
    return Run(host.state_dir, record, known=Known(found, discovered))


def grant_document(
    record: sandboxes.RunRecord,
    identity: str,
    number: int,
    base: str | None,
    preconditions: list[dict[str, Any]] | None = None,
    confinement: str = "bwrap",
    symlinks: str = "none",
) -> dict[str, Any]:
    """Step ``number``'s grant: the sandbox's base, its allowlist, its preconditions."""
    now = int(time.time())  # the current second, as ``canonical.utcnow`` reads it
    grant: dict[str, Any] = {
        "schema": "GrantV1",
        "grant_id": grant_id(record, number),
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
        "not_before": _rfc3339(now - 60),
        "expires_at": _rfc3339(now + GRANT_HOURS * 3600),
        "write_allowlist": record.allow,
        "target_preconditions": preconditions or [],
        "limits": LIMITS,
    }
    if base is not None:
        grant["base_operation"] = base
    if symlinks != "none":
        grant["symlinks"] = symlinks
    return grant


def grant_id(record: sandboxes.RunRecord, number: int) -> str:
    """The id of step ``number``'s grant."""
    return f"grt_{record.run_id.removeprefix('run_')}_{number}"


def _rfc3339(second: int) -> str:
    """``canonical.rfc3339`` of the UTC ``second`` since the epoch, without ``datetime``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))


def _head_now(known: Known) -> wire.RepositoryInfo | None:
    """The repository as its start found it, with HEAD read now from the worktree's files
    as the daemon reads it (``read_head``; a git process only where the files do not
    answer); None when the layout is unknown or HEAD cannot be read (the daemon is asked)."""
    if known.layout is None:
        return None
    from promoter.git.head import read_head

    try:
        now = read_head(known.layout, known.repository["branch"])
    except PromoterError:
        return None
    found = known.repository.copy()
    found["head"] = now.commit
    return found


def _discovered(worktree: str) -> RepoLayout | None:
    """The layout of the run's worktree, discovered once before its command (by the
    start, for a new run); None when it cannot be (the worktree itself stays hidden; the
    daemon will refuse what it cannot read; a start that needs it discovers it again and
    refuses)."""
    try:
        return discover(worktree)
    except PromoterError:
        return None


def _hidden(
    state_dir: Path,
    record: sandboxes.RunRecord,
    extra: tuple[Path, ...],
    layout: RepoLayout | None,
) -> list[Path]:
    """What the sandbox must not see: the state directory, the worktree, its git dirs
    (``layout``'s), and ``extra`` (``--hide`` and every directory ``hidden.secret_dirs``
    names)."""
    hidden = [state_dir.resolve(), Path(record.worktree).resolve(), *extra]
    if layout is not None:
        hidden += [Path(layout.git_dir), Path(layout.common_dir)]
    return hidden


class _Command:
    """A step's command, made ready before the step's grant is registered (a confined one
    as far as the sandbox's entry, which waits: ``confine.prepare_confined``) and started
    by ``start`` once the step's token is known; one never started is ended on the way
    out (the context). Unconfined, it is only started by ``start``."""

    def __init__(
        self,
        command: list[str],
        host: Host,
        record: sandboxes.RunRecord,
        env: dict[str, str],
        how: Confinement,
        person: Person,
        known: Known | None,
        stem: confine.Stem | None,
        here: str | None = None,
    ) -> None:
        self.command, self.record, self.how, self.person = command, record, how, person
        self.env = env  # the command's variables but the step's own (``confine.STEP_ENV``)
        self.home = Path(record.clone).parent / "home"
        self.home.mkdir(mode=0o700, exist_ok=True)
        self.base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
        from promoter.executor import layered  # the builder: loaded by a run only

        found = known.layout if known is not None else _discovered(record.worktree)
        self.overlay = (
            layered.overlay_of(record, found=found) if record.layout == "overlay" else None
        )
        self.hide = _hidden(host.state_dir, record, how.hide, found)
        # the person's directory in the sandbox, or the root and why (run/where.py)
        stack = self.overlay.layers.all() if self.overlay is not None else None
        rel = where.relative(record.worktree, here)
        self.start_dir = where.start_dir(Path(record.clone), rel, stack=stack, layout=found)
        self.url = host.url
        self._prepared = None if how.unconfined else self._prepare(host.url, stem)

    def _prepare(self, url: str, stem: confine.Stem | None) -> confine.Prepared:
        box = confine.Sandbox(
            clone=Path(self.record.clone),
            home=self.home,
            hide=self.hide,
            network=self.how.network,
            limits=self.how.limits,
            overlay=self.overlay,
            workdir=self.start_dir.rel,
        )
        env = confine.sandbox_env(
            self.base, {**self.env, "PROMOTER_URL": url}, self.home, self.how.pass_env
        )
        return confine.prepare_confined(self.command, box, env, url, self.record.run_id, stem)

    def __enter__(self) -> _Command:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._prepared is not None:
            self._prepared.close()

    def start(self, url: str, token: str, timeout: float) -> int:
        """Run the command with the step's ``token`` against the daemon at ``url`` (another
        than it was made ready for: made ready again); its exit status."""
        record, how, rel = self.record, self.how, self.start_dir.rel
        if self.start_dir.note is not None:
            self.person.say(escape(self.start_dir.note))
        inside = os.path.join(record.clone, rel) if rel else record.clone
        self.person.say(
            f"[bold]running[/] {escape(_echoed(self.command))} in {escape(one_line(inside))} "
            f"({how.kind})"
        )
        env = {**self.env, "PROMOTER_URL": url, "PROMOTER_TOKEN": token}
        if how.unconfined:
            clone = Path(record.clone)  # mounted, not confined
            if self.overlay is not None:  # entered in the mount's namespace, by descriptor
                argv = self.overlay.wrap(self.command, into=rel)
                return confine.run_unconfined(argv, clone, {**self.base, **env}, timeout)
            start = where.opened(clone, rel) if rel else None
            try:
                return confine.run_unconfined(
                    self.command, clone, {**self.base, **env}, timeout, start
                )
            finally:
                if start is not None:
                    os.close(start)
        assert self._prepared is not None
        if url != self.url:  # a 421 followed: the relay and the variables are the owner's
            self._prepared.close()
            self._prepared, self.url = self._prepare(url, None), url
        limit = self._prepared.procs_limit
        self.person.say(f"confined by bubblewrap; processes limited by {limit}")
        step_env = {k: env[k] for k in confine.STEP_ENV}
        return self._prepared.run(step_env, timeout).returncode


# inside $'…': a backslash and a quote escaped, a newline, tab and CR written as \n \t \r
_ANSI_C = str.maketrans({"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"})


def _echoed(command: Sequence[str]) -> str:
    """The person's command as one line, as a shell reads it: each argument with its
    hidden characters shown (``visible``) and quoted (``shlex.quote``), one holding a
    newline, tab or carriage return as ``$'…'`` with those written ``\\n``, ``\\t``,
    ``\\r``, so that no argument prints what looks like a line of its own."""
    words = []
    for argument in command:
        shown = visible(argument)
        if any(c in shown for c in "\n\t\r"):
            words.append(f"$'{shown.translate(_ANSI_C)}'")
        else:
            words.append(shlex.quote(shown))
    return " ".join(words)


def _ended_how(code: int) -> str:
    """How a command that failed ended: its exit status, or the signal that killed its
    first process (a negative status; not one promoter sent: a timeout is said apart)."""
    if code >= 0:
        return f"exited with status {code}"
    import signal  # a failure's words only

    try:
        name = f" ({signal.Signals(-code).name})"
    except ValueError:
        name = ""
    return f"was killed by signal {-code}{name}"


def _refresh(orch: PromoterClient, run: Run) -> None:
    """Steps left waiting (approval, a running attempt) take their operation's status now;
    a refused one that was merged since (``promoter merge``) takes the merged promotion's
    operation, bundle and status, as the run's own merge records them (``merged.py``)."""
    for step in run.record.steps:
        waiting = (RunStatus.AWAITING_APPROVAL, RunStatus.IN_PROGRESS, RunStatus.REFUSED)
        if step.operation_id and step.status in waiting:
            view = followed(orch.get_operation(step.operation_id), orch.get_operation)
            moved = view["operation_id"] != step.operation_id and view.get("bundle_id")
            ids = {"operation_id": view["operation_id"], "bundle_id": view["bundle_id"]}
            run.move(step, str(view["status"]), **(ids if moved else {}))


def _refuse_after_merge(
    orch: PromoterClient, record: sandboxes.RunRecord, base: str | None
) -> None:
    """No step chains on a merged promotion: the sandbox holds the agent's file, not the
    merged one, and a step built there against the merged bytes would undo the person's
    edit (``TargetDrift``, naming a new run)."""
    bundle_id = next(
        (s.bundle_id for s in reversed(record.steps) if base and s.operation_id == base), None
    )
    if bundle_id is None or "merge" not in orch.bundle_document(bundle_id):
        return
    raise error_class("target_drift")(
        f"run {record.run_id}'s last promotion {base} merged your edit with the agent's; its "
        "sandbox holds the agent's files without your edit, and a step there would undo it; "
        f"start a new run from your files as they are: promoter run --repo "
        f"{record.repository} -- CMD",
        run_id=record.run_id,
        operation_id=base,
    )


def step(
    host: Host,
    run: Run,
    command: list[str],
    *,
    person: Person,
    timeout: float,
    how: Confinement | None = None,
    outcome: Outcome | None = None,
    stem: confine.Stem | None = None,
    here: str | None = None,
) -> Outcome:
    """One step of ``run``: CMD run in the sandbox, its changes reviewed and promoted.

    ``outcome`` is filled as the step goes, so that a caller holds it when the step ends
    in an error too. ``stem``: the confined command's first process, started as the run
    began (``confine.Stem``; the caller ends it when the step ends without its command).
    ``here``: the person's current directory; the command starts in its counterpart in
    the sandbox (``where.py``; None: at the sandbox's root)."""
    how = how or Confinement()
    outcome = outcome if outcome is not None else Outcome()
    record = run.record
    orch = PromoterClient(host.url, host.token, timeout=660.0)
    with contextlib.ExitStack() as clients:
        clients.enter_context(orch)
        known = run.take_known()  # a new run's first step: as its start found them
        number = len(record.steps) + 1
        env = {
            "PROMOTER_GRANT": grant_id(record, number),
            "PROMOTER_RUN": record.run_id,
            **answers.agent_env(record),
        }
        # the command made ready first, while the step is checked and its grant registered
        # (the longer way to its start); it starts with the step's token
        with _Command(command, host, record, env, how, person, known, stem, here) as ready:
            from promoter.executor.handover import (  # the builder: a run's
                fetched_base,
                fetched_grant,
                promote_with_evidence,
                submitted_receipt,
            )

            _refresh(orch, run)
            found = _head_now(known) if known is not None else None
            found = found or repository(orch, record.repository)
            if found["head"] != record.base_commit:
                raise error_class("target_drift")(
                    f"{record.repository}'s HEAD moved from {record.base_commit[:12]} to "
                    f"{str(found['head'])[:12]} since run {record.run_id} began; start a new "
                    f"run with promoter run --repo {record.repository}"
                )
            base = record.last_completed
            _refuse_after_merge(orch, record, base)
            preconditions = answers.chained_preconditions(orch, record)
            grant_doc = grant_document(
                record,
                found["repository_identity"],
                number,
                base,
                preconditions,
                how.kind,
                how.symlinks,
            )
            lease = {k: grant_doc[k] for k in ("attempt", "generation", "resume_epoch", "fence")}
            orch.followed = None
            opened = orch.open_run(  # the grant, its lease and the run's token: one request
                grant_doc,
                {"run_id": record.run_id, **lease, "expires_at": grant_doc["expires_at"]},
                int(timeout) + 3600,
            )
            if orch.followed is not None:  # a 421, followed once: the step goes on there
                host = Host(orch.followed, host.token, host.state_dir)
                orch = clients.enter_context(orch.with_token(host.token, url=host.url))
                person.say(
                    f"{record.repository} is guarded by {escape(host.url)}: the step goes on "
                    "there"
                )
            minted = opened["token"]
            current = sandboxes.Step(
                grant_id=grant_doc["grant_id"], base_operation=base, confinement=how.kind
            )
            run.begin(current)
            try:
                code: int | None = ready.start(host.url, str(minted["token"]), timeout)
            except confine.TimedOut:  # ended with every process of it: the step's failure
                code = None
        if record.layout == "copy":  # an overlay's .git is never read by promoter's git
            from promoter.executor import sandbox_repo

            sandbox_repo.restore(Path(record.clone).parent, Path(record.clone))
        if code != 0:
            run.move(current, RunStatus.COMMAND_FAILED)
            why, context = (
                (f"did not finish within {timeout:g} s and was ended with every process of "
                 "it", {"timeout": timeout})
                if code is None
                else (_ended_how(code), {"status": code})
            )  # fmt: skip
            raise CommandFailed(
                f"the command {why}; nothing was submitted; the sandbox is kept: "
                f"{record.clone} (the next step: promoter run --continue {record.run_id}"
                f"{run.options()} -- CMD)",
                run_id=record.run_id,
                **context,
            )
        executor = orch.with_token(str(minted["token"]))
        with executor, _refused(run, current):
            grant = registered_grant(grant_doc, opened["grant"]) or fetched_grant(
                executor, grant_doc["grant_id"]
            )
            since = fetched_base(executor, grant.grant_id) if base else None
            requested: dict[str, Any] | None = None  # promoted with its evidence (--yes)
            carried: Promoted | None = None  # and what its answer carried for the review
            adopted = answers.agent_bundle(executor, record, grant, since, person)
            if adopted is not None:
                bundle, receipt = adopted[0], adopted[1].wire()
                person.say(f"promoting the bundle the command submitted: {bundle['bundle_id']}")
            else:
                with links.build(run, current, grant, since, person) as built:
                    if not built.bundle["changes"]:
                        run.move(current, RunStatus.NO_CHANGES)
                        since_what = "since the last promotion" if base else "by the command"
                        person.say(f"no changes {since_what}: nothing to promote")
                        return outcome
                    if person.yes:  # nobody is asked: blobs, bundle and promotion, one request
                        token = str(minted["token"])
                        run.promoting = str(built.bundle["bundle_id"])  # asked from here on
                        carried = promote_with_evidence(orch, token, built, grant.fence)
                        receipt, requested = carried.receipt, carried.operation
                    else:
                        receipt = submitted_receipt(executor, built)
                    bundle = built.bundle
        while True:  # the step's bundle, then the rest of it after a conflicted merge
            run.move(current, RunStatus.SUBMITTED, bundle_id=str(bundle["bundle_id"]))
            assert current.bundle_id is not None
            diff = _carried_diff(carried, current.bundle_id) or orch.bundle_diff(current.bundle_id)
            person.review(bundle, diff, receipt, hint=f"promoter bundle diff {current.bundle_id}")
            unseen = list(diff.get("unseen") or [])
            outcome.bundle = bundle
            try:
                promote(
                    orch,
                    run,
                    current,
                    grant,
                    str(receipt["receipt_sha256"]),
                    person,
                    outcome,
                    unseen=unseen,
                    requested=requested,
                    promoted=carried.promotion_receipt if carried is not None else None,
                )
            except MergeConflict as exc:
                leave_out = rest.offer(exc, run, current, bundle, person)
                if leave_out is None:
                    raise
                with (
                    orch.with_token(str(minted["token"])) as executor,
                    rest.build(run, current, grant, since, leave_out, person) as built,
                ):
                    receipt = submitted_receipt(executor, built)
                    bundle = built.bundle
                requested = carried = None  # never under --yes: a part is asked for
                continue
            return outcome


@contextlib.contextmanager
def _refused(run: Run, current: sandboxes.Step) -> Iterator[None]:
    """The one place a step's bundle is refused, from the command's end until the bundle
    is at the host: the builder's refusal, or the host's answer to the bundle, that is a
    refusal (``status.refusal``: a definite answer about the change) moves the step, still
    ``started``, to ``refused`` before it is raised; a refused credential or a file
    changed while read moves it to ``interrupted`` (``status.ending``), raised naming the
    next command; either records the code. Any other error (a crash, a daemon not
    reached) leaves it ``started``, which ``run --list`` calls ``interrupted``."""
    try:
        yield
    except PromoterError as exc:
        status = ending(exc) if current.status is RunStatus.STARTED else None
        if status is not None:  # nothing submitted, nothing runs
            run.move(current, status, code=exc.code)
        if status is RunStatus.INTERRUPTED:  # nothing was decided: say what to do
            raise _retry(exc, run) from exc
        raise


def _retry(error: PromoterError, run: Run) -> PromoterError:
    """``error`` (a refused credential, a file changed while read) with what was kept
    and the next command: the step again in its sandbox, with a credential that is let
    in for a refused one."""
    record = run.record
    again = f"promoter run --continue {record.run_id}{run.options()} -- true"
    if error.code == "source_changed":
        nxt = f"build and offer it again once the command's processes are done: {again}"
    else:
        nxt = f"with a credential the daemon accepts, build and offer it again: {again}"
    return type(error)(
        f"{error.detail}; nothing was decided about the change; the sandbox is kept: "
        f"{record.clone}; {nxt}",
        **error.context,
    )


def _carried_diff(carried: Promoted | None, bundle_id: str) -> wire.BundleDiffView | None:
    """The diff page the one request's answer carried for ``bundle_id`` (exactly what
    ``GET /v1/bundles/{id}/diff`` answers), or None: then it is asked for."""
    diff = carried.diff if carried is not None else None
    if diff is None or diff.get("bundle_id") != bundle_id:
        return None
    return cast("wire.BundleDiffView", diff)


def registered_grant(document: dict[str, Any], registered: Mapping[str, Any]) -> Grant | None:
    """The grant the host registered, known without reading it back: the record of the
    ``document`` sent, when the host's ``grant_sha256`` for it is that document's own (the
    host holds exactly these bytes) and the validator accepts it sealed; else None, and
    the grant is read back (``handover.fetched_grant``)."""
    from promoter.domain import wirecheck
    from promoter.domain.bundle_records import grant_record
    from promoter.domain.documents import grant_sha256

    sealed = grant_sha256(grant_record(document))
    if sealed != registered.get("grant_sha256"):
        return None
    held = {**document, "grant_sha256": sealed}
    return grant_record(held) if wirecheck.problem("GrantV1", held) is None else None


def _confirmed_note() -> str:
    """The note an approval at the terminal carries: who confirmed (never the approver)."""
    try:
        import getpass  # at a terminal only

        return f"confirmed at the terminal by {getpass.getuser()}"
    except (KeyError, OSError):
        return "confirmed at the terminal"


def _gate(
    orch: PromoterClient,
    repository: str,
    grant: Grant,
    person: Person,
    caller: Callable[[], Mapping[str, Any]],
) -> str:
    """What a yes at the question does when the promotion will be held for approval (the
    grant or the repository requires it): the approval itself, with an operator's
    credential, or only the request; empty when nothing holds it or no one is asked
    (``--yes`` never approves; protocol: runs#approvals)."""
    if person.yes:
        return ""
    required = grant.wire().get("approval") == "required"
    if not required and orch.repository_approval(repository)["approval"] != "required":
        return ""
    who = caller()
    if who.get("role") == "operator":
        return (
            f"{repository} requires approval: your yes is the approval, recorded for "
            f"credential {who.get('name')}, and promotes at once"
        )
    return (
        f"{repository} requires approval: your yes only asks for it; nothing is written "
        "until an operator approves"
    )


def promote(
    orch: PromoterClient,
    run: Run,
    current: sandboxes.Step,
    grant: Grant,
    receipt_sha256: str,
    person: Person,
    outcome: Outcome,
    *,
    unseen: Sequence[Mapping[str, Any]] | None = None,
    requested: dict[str, Any] | None = None,
    promoted: Mapping[str, Any] | None = None,
) -> None:
    """The preflight, the person's answer, the promotion (and its approval), the receipt.

    ``requested``: the operation a ``--yes`` step's one request already promoted with its
    evidence (docs/protocol.md); its outcome stands for the preflight and the promotion.
    ``promoted``: the promotion receipt that request's answer carried, read instead of
    asking for it when it is the completed operation's (its id and receipt hash)."""
    record = run.record
    assert current.bundle_id is not None
    preflight: Mapping[str, Any]
    if requested is None:
        preflight = orch.preflight(current.bundle_id, grant.fence)
        person.say(f"preflight {preflight['status']}")
    else:  # a drift or a refusal is the operation's own (target_drift: merged below)
        preflight = {"status": "passed"}
        person.say("requested with its evidence in one request; the promotion checked it")
    drifted = preflight["status"] != "passed"
    # who the credential is, asked at most once a promotion (its role does not change), and
    # the gate's words, read once, only for a question asked
    caller = functools.cache(orch.whoami)
    gate = functools.cache(lambda: _gate(orch, record.repository, grant, person, caller))

    if drifted and answers.moved(preflight) is not None:  # no merge mends a base gone
        run.move(current, RunStatus.REFUSED, code="base_moved")
        raise answers.refusal(preflight, record, current.bundle_id, person)
    if drifted:  # a drift a merge can mend is offered the merge (drift.py)
        code = preflight.get("code")  # an answer without one records none, never "None"
        run.move(current, RunStatus.PREFLIGHT_REFUSED, code=None if code is None else str(code))
        consent = drift.offer(preflight, record, current.bundle_id, person, gate=gate)
    else:
        consent = person.approve(unseen or [], gate=gate(), bundle=str(current.bundle_id))
    if consent is None:
        run.move(current, RunStatus.DECLINED)
        raise NotConfirmed(
            f"not promoted; bundle {current.bundle_id} stays submitted (the sandbox is kept: "
            f"{record.clone}); promote that bundle with promoter run --continue "
            f"{record.run_id} --yes{run.options()}, or without --yes to answer at a terminal",
            bundle_id=current.bundle_id,
            run_id=record.run_id,
        )
    run.promoting = current.bundle_id  # from here a Ctrl-C leaves the host promoting it
    view: Mapping[str, Any] = requested or orch.promote(
        current.bundle_id, receipt_sha256, grant.fence, wait=True
    )
    run.promoting = None
    current.operation_id = str(view["operation_id"])  # saved with the status it comes to
    if view.get("status") == "awaiting_approval":
        # the gate wants a person: a confirmation at the terminal is one, --yes is not;
        # the approver is the person's own credential (an operator's), never another
        if consent != "asked" or caller().get("role") != "operator":
            run.move(current, RunStatus.AWAITING_APPROVAL)
            person.say(f"awaiting approval: promoter approve {current.operation_id}")
            return
        seen = [str(u["path"]) for u in unseen or []]  # confirmed at the question
        view = orch.approve(current.operation_id, _confirmed_note(), wait=True, seen=seen)
    refused_drift = (view.get("status"), view.get("code")) == ("refused", "target_drift")
    merged = drift.merged(  # refused target_drift: merged into a new bundle (drift.py)
        orch,
        run,
        current,
        view,
        person,
        consent=consent,
        agreed=drifted,
        note=_confirmed_note() if refused_drift else "",  # read by a merge only
        gate=gate,
        caller=caller,
    )
    if merged is None:
        return
    view = merged
    refused = view["status"] == RunStatus.REFUSED and view.get("code")
    run.move(current, str(view["status"]), **({"code": str(refused)} if refused else {}))
    if current.status is not RunStatus.COMPLETED:
        raise error_class(str(view.get("code") or "internal"))(
            f"operation {current.operation_id} is {shown(current.status)}: "
            f"{view.get('detail') or ''}"
        )
    assert current.operation_id is not None
    carried = (promoted or {}).get("operation_id"), (promoted or {}).get("receipt_sha256")
    if promoted is None or carried != (current.operation_id, view.get("receipt_sha256")):
        promoted = json.loads(orch.get_receipt(current.operation_id))
    outcome.receipt_sha256 = str(promoted["receipt_sha256"])
    outcome.targets = list(promoted["targets"])
    person.say(
        f"promoted: operation [bold]{current.operation_id}[/] completed, receipt "
        f"{promoted['receipt_sha256']}"
        + (f", chained on {promoted['base_operation']}" if promoted.get("base_operation") else "")
    )
    for target in promoted["targets"]:
        state = f"{target['sha256'][:12]} {target['mode']}" if target["exists"] else "deleted"
        person.say(f"  {escape(visible(target['path']))}  {state}")


def promote_submitted(
    host: Host, run: Run, person: Person, outcome: Outcome | None = None
) -> Outcome:
    """``--continue RUN`` without CMD: promote the bundle the last step left submitted.

    Raises ``NothingToPromote`` (the CLI's usage error) when the last step left none."""
    record = run.record
    current = run.last
    if current is None or current.bundle_id is None or current.status not in PROMOTABLE:
        last = shown(current.status) if current is not None else "nothing yet"
        raise NothingToPromote(
            f"run {record.run_id} has no submitted bundle to promote (its last step: {last}); "
            f"give the next command: promoter run --continue {record.run_id}{run.options()} "
            "-- CMD"
        )
    with PromoterClient(host.url, host.token, timeout=660.0) as orch:
        grant = orch.get_grant(current.grant_id)
        receipt = orch.get_verification(current.bundle_id)
        person.say(f"promoting the bundle step {len(record.steps)} submitted: {current.bundle_id}")
        bundle = orch.get_bundle(current.bundle_id).wire()
        outcome = outcome if outcome is not None else Outcome()
        outcome.bundle = bundle
        diff = orch.bundle_diff(current.bundle_id)
        person.review(bundle, diff, receipt.wire(), hint=None)
        unseen = list(diff.get("unseen") or [])  # confirmed at the question, as a new step's
        try:
            promote(
                orch, run, current, grant, receipt.receipt_sha256, person, outcome, unseen=unseen
            )
        except MergeConflict as exc:  # no credential here builds the rest: named, not asked
            rest.offer(exc, run, current, bundle, person, ask=False)
            raise
        return outcome


def finish(run: Run, person: Person, *, keep: bool) -> None:
    """A completed run's sandbox is removed (unless ``keep``); any other is kept and named."""
    record = run.record
    last = run.last
    if last is not None and last.status is RunStatus.COMPLETED and not keep:
        confine.settle_cgroups()  # long removed by now: this process's threads are done
        going = removal.remove_later(run.state_dir, record.run_id)  # after the answer
        person.say(
            f"sandbox {record.run_id} removed: its files go in the background ({going}); "
            "--keep keeps it for --continue"
        )
        return
    if run.merged:  # the sandbox does not hold the merged files: no step chains there
        person.say(
            f"sandbox kept: {record.clone}\n"
            "your edit was merged, and the sandbox does not hold it: the next step is a new "
            f"run: promoter run --repo {record.repository} -- CMD"
        )
        return
    person.say(
        f"sandbox kept: {record.clone}\n"
        f"next step in the same sandbox: promoter run --continue {record.run_id}"
        f"{run.options()} -- CMD"
    )


def interrupted(run: Run) -> Interrupted:
    """Ctrl-C at any stage: the step marked ``interrupted``; the error names the sandbox and
    the bundle kept and the next command (exit 130)."""
    record = run.record
    current = run.last
    resumable = (RunStatus.STARTED, RunStatus.SUBMITTED, RunStatus.DECLINED)
    if current is not None and current.status in resumable:
        asked = run.promoting if current.bundle_id is None else None  # sent in one request
        run.move(current, RunStatus.INTERRUPTED, **({"bundle_id": asked} if asked else {}))
    kept = f"interrupted: nothing was promoted; the sandbox is kept: {record.clone}"
    if current is not None and current.status is RunStatus.PREFLIGHT_REFUSED:
        return Interrupted(  # stopped at the merge's question: asked again, at a terminal
            f"{kept}; bundle {current.bundle_id} stays submitted: the merge of your edit and "
            f"the agent's is offered again with promoter run --continue {record.run_id}"
            f"{run.options()}",
            run_id=record.run_id,
            bundle_id=current.bundle_id,
            sandbox=record.clone,
        )
    if current is not None and current.status is RunStatus.MERGE_CONFLICT:  # at the rest's
        return Interrupted(  # question: its refused operation runs nowhere
            f"{kept}; the merge conflicted, your files as they are; the rest of the agent's "
            f"changes is offered again with promoter run --continue {record.run_id}"
            f"{run.options()} -- true",
            run_id=record.run_id,
            sandbox=record.clone,
        )
    if current is not None and current.operation_id is None and run.promoting is not None:
        return Interrupted(
            f"interrupted after the host was asked to promote bundle {run.promoting}: it "
            "finishes that promotion, so your worktree may still change; the sandbox is kept: "
            f"{record.clone}; its outcome: promoter run --continue {record.run_id} --yes"
            f"{run.options()}",
            run_id=record.run_id,
            bundle_id=run.promoting,
            sandbox=record.clone,
        )
    if current is not None and current.bundle_id is not None and current.operation_id is None:
        return Interrupted(
            f"{kept}; bundle {current.bundle_id} stays submitted: promote it with "
            f"promoter run --continue {record.run_id} --yes{run.options()}",
            run_id=record.run_id,
            bundle_id=current.bundle_id,
            sandbox=record.clone,
        )
    if current is not None and current.operation_id is not None:
        return Interrupted(
            f"interrupted while operation {current.operation_id} ran at the host, which "
            f"finishes it; the sandbox is kept: {record.clone}; its status: promoter run --list",
            run_id=record.run_id,
            operation_id=current.operation_id,
            sandbox=record.clone,
        )
    return Interrupted(
        f"{kept}; run the step again with promoter run --continue {record.run_id}"
        f"{run.options()} -- CMD",
        run_id=record.run_id,
        sandbox=record.clone,
    )
