"""Sandboxes of ``promoter run``: isolated clones under the state directory, and their record.

A sandbox is ``<state>/runs/<run_id>/``: ``clone/`` is ``git clone --local
--no-hardlinks --dissociate`` of the guarded repository at its HEAD (its own ``.git``
with its own copy of the objects, no hardlink or alternate into the person's; cloning
only reads the user's repository; ``sandbox_repo.seal`` keeps its config beside it), its
worktree then made equal to the person's worktree as it is (``start_state.py``; not with
``from_head``), ``home/`` is the command's private HOME, and ``run.json`` records the
repository, the base commit and every step (grant, bundle, operation, status), so that a
later ``--continue`` chains on the last completed promotion. ``remove`` deletes a
sandbox's directory only after checking that it is a sandbox directory under the runs
directory and holds no guarded worktree.

Reading records (``load``, ``list_runs``: ``promoter run --list``) loads none of the
modules that clone, write or remove; those are imported by the functions that do.
Deliberately not here: running the command and its confinement (``confine.py``), or
talking to the host.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promoter import faults
from promoter.domain.record_type import as_dict, field, record
from promoter.errors import ConfigError, NotFound, WriteFailed
from promoter.executor.run.status import RunStatus
from promoter.lazy_log import LazyLogger

if TYPE_CHECKING:
    from promoter.executor.start_watch import Asking, Watched
    from promoter.git.layout import RepoLayout

__all__ = [
    "RunRecord",
    "Step",
    "check_removable",
    "create",
    "list_runs",
    "load",
    "names_run",
    "remove",
    "runs_dir",
    "save",
]

RUN_PREFIX = "run_"
log = LazyLogger("promoter.run")


@record
class Step:
    """One step of a run: its grant, its bundle and operation once made, its status."""

    grant_id: str
    bundle_id: str | None = None
    operation_id: str | None = None
    status: RunStatus = RunStatus.STARTED  # on disk its string (run/state.py)
    base_operation: str | None = None
    confinement: str | None = None  # "bwrap" or "unconfined": how the step's command ran
    left_out: list[str] = field(default_factory=list)  # refused links, conflicted files
    code: str | None = None
    """The error code that ended the step ``refused`` or ``interrupted`` (``target_drift``,
    ``base_moved``, ``unauthenticated``); None otherwise, and in a record written before
    steps had it. Written only when set (``RunRecord.wire``)."""
    unknown: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The fields a later version wrote that this one has no place for, written back as
    they were (``load``, ``RunRecord.wire``)."""


@record
class RunRecord:
    """A sandbox as recorded on disk: where it came from, where it is, its steps."""

    run_id: str
    repository: str
    worktree: str
    branch: str
    base_commit: str
    base_tree: str
    clone: str
    created_at: str
    allow: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    start_tree: str | None = None
    """The person's worktree state the clone started from (None: HEAD, ``--from-head``)."""
    preconditions: list[dict[str, Any]] = field(default_factory=list)
    """That state's grant preconditions (``start_state.capture_into``)."""
    skipped: list[dict[str, str]] = field(default_factory=list)
    """Paths of the person's worktree the clone does not hold (gitlinks, nested repositories)."""
    layout: str = "copy"
    """``copy`` (a clone) or ``overlay`` (layers over a shared base: ``layered.py``)."""
    unknown: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """As ``Step.unknown``: a later version's fields of the run, written back as they were."""

    @property
    def last_completed(self) -> str | None:
        """The newest completed promotion of this sandbox: the next step's base."""
        for step in reversed(self.steps):
            if step.status is RunStatus.COMPLETED and step.operation_id:
                return step.operation_id
        return None

    def wire(self) -> dict[str, Any]:
        """The record as ``run.json`` holds it: a step's ``code`` only when set, so that a
        record with none is byte for byte what a version before the field wrote, and the
        fields a later version wrote (``unknown``) beside this version's, as they were."""
        fields: dict[str, Any] = _with_unknown(as_dict(self))
        for n, step in enumerate(fields["steps"]):
            if step["code"] is None:
                del step["code"]
            fields["steps"][n] = _with_unknown(step)
        return fields


def _with_unknown(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with its ``unknown`` ones put back beside the known (never over one)."""
    unknown: dict[str, Any] = fields.pop("unknown")
    return {**unknown, **fields}


def runs_dir(state_dir: Path) -> Path:
    return state_dir / "runs"


def refuse_state_inside(state_dir: Path, worktree: str) -> None:
    """Refuse (``ConfigError``) a state directory whose sandboxes would land inside
    ``worktree``: asked before anything of a run is made, the layout's probe included."""
    real = Path(worktree).resolve()
    if real == runs_dir(state_dir).resolve() or real in runs_dir(state_dir).resolve().parents:
        raise ConfigError(
            f"the state directory {state_dir} is inside the worktree {worktree}; "
            "sandboxes would land in the user's files"
        )


def _record_path(state_dir: Path, run_id: str) -> Path:
    if not run_id.startswith(RUN_PREFIX) or not run_id[len(RUN_PREFIX) :].isalnum():
        raise NotFound(f"{run_id!r} is not a run id", run_id=run_id)
    return runs_dir(state_dir) / run_id / "run.json"


def new_run_id() -> str:
    # ``secrets.token_hex(8)`` is ``os.urandom(8).hex()``; ``secrets`` brings base64 and hmac
    return RUN_PREFIX + os.urandom(8).hex()


def create(
    state_dir: Path,
    *,
    repository: str,
    worktree: str,
    branch: str,
    head: str,
    created_at: str,
    allow: list[dict[str, Any]],
    from_head: bool = False,
    layout: str = "copy",
    watched: Watched | None = None,
    found: RepoLayout | None = None,
    ready: Callable[[], None] | None = None,
) -> RunRecord:
    """Clone ``worktree``'s repository at ``head`` into a new sandbox; record it.

    Unless ``from_head``, the clone's worktree is then made equal to the person's
    worktree as it is (``start_state.capture_into``). ``layout="overlay"`` lays an
    overlay sandbox instead of a clone (``layered.create``). ``watched``: the daemon's
    watch may narrow the reading of the person's worktree (``start_watch.py``).
    ``found``: the worktree's layout, when the caller discovered it already. ``ready``
    is called after the reads, before anything is made (it may refuse: the
    confinement's probe, ``confine.probing``).
    """
    from promoter.git.runner import run_git

    refuse_state_inside(state_dir, worktree)
    run_id = new_run_id()
    home = runs_dir(state_dir) / run_id
    from promoter.executor import layered  # the builder's models: not for --list, --prune
    from promoter.executor.start_watch import Asking
    from promoter.git.layout import discover

    clone = home / "clone"
    if layout == "overlay":
        # the worktree's layout, discovered once for the head's tree and the layers
        overlay = found or discover(worktree)
        faults.point("start_head_read")  # the daemon's HEAD in hand, its tree not yet read
        tree = layered.head_tree(worktree, head, found=overlay, branch=branch)
        _made(home, ready)
        # the daemon's watch asked while the record is saved and the layers are made
        asking = None if watched is None or from_head else Asking(watched, overlay)
        record = RunRecord(
            run_id=run_id, repository=repository, worktree=worktree, branch=branch,
            base_commit=head, base_tree=tree, clone=str(clone), created_at=created_at,
            allow=allow, layout="overlay",
        )  # fmt: skip
        # a start that fails or is interrupted (Ctrl-C) does not wait for the answer: the
        # asking thread holds its own client and reads only (``start_watch.Asking``)
        _lay_overlay(state_dir, record, home, from_head, overlay, watched, asking)
        return record
    _made(home, ready)
    local = ["-c", "protocol.file.allow=always"]  # the one transport a local clone needs
    short = branch.removeprefix("refs/heads/")
    # the clone's own checkout of the branch (never a checkout command in any worktree)
    # objects copied, never hardlinked or borrowed (protocol: runs#sandbox-boundary): nothing the
    # command can write is shared with the person's repository (docs/decisions/sandbox-objects.md)
    copy = ["--local", "--no-hardlinks", "--dissociate"]
    from promoter.executor import sandbox_repo  # a clone's, not an overlay's

    run_git(
        [*local, "clone", "--quiet", *copy, "--branch", short, worktree, str(clone)], timeout=600
    )
    sandbox_repo.seal(home, clone)
    cloned = run_git(["rev-parse", "HEAD"], cwd=clone).stdout.decode().strip()
    if cloned != head:
        raise ConfigError(
            f"branch {short} is at {cloned[:12]}, not at the worktree's HEAD {head[:12]}; "
            "the sandbox starts from HEAD only (commit or switch, then run again)"
        )
    tree = run_git(["rev-parse", "HEAD^{tree}"], cwd=clone).stdout.decode().strip()
    record = RunRecord(
        run_id=run_id,
        repository=repository,
        worktree=worktree,
        branch=branch,
        base_commit=head,
        base_tree=tree,
        clone=str(clone),
        created_at=created_at,
        allow=allow,
    )
    save(state_dir, record)
    if not from_head:
        _start_from_person(state_dir, record, home, watched, found)
    return record


def _made(home: Path, ready: Callable[[], None] | None) -> None:
    """The sandbox's directory made, once ``ready`` has answered (it may refuse)."""
    if ready is not None:
        ready()  # nothing is made before it has answered
    home.mkdir(parents=True, mode=0o700)


def _lay_overlay(
    state_dir: Path,
    record: RunRecord,
    home: Path,
    from_head: bool,
    found: RepoLayout,
    watched: Watched | None,
    asking: Asking | None,
) -> None:
    """``layered.create`` (``found``: the worktree's layout; ``watched``: the daemon's
    watch, which may narrow the start's status pass, ``asking``: asked already); a
    sandbox that could not be laid is removed."""
    from promoter.executor import layered

    try:
        state = layered.create(
            state_dir, record, home, from_head=from_head,
            save=lambda: save(state_dir, record), used=lambda: used_bases(state_dir),
            found=found, watched=watched, asking=asking,
        )  # fmt: skip
    except OSError as exc:
        _remove_unfinished(state_dir, record.run_id)
        raise WriteFailed(
            f"your worktree could not be laid into the sandbox: {exc.strerror or exc}; "
            "the sandbox was removed",
            run_id=record.run_id,
        ) from exc
    except BaseException:
        _remove_unfinished(state_dir, record.run_id)
        raise
    if state is not None:
        record.start_tree = state.tree
        record.preconditions = state.preconditions
        record.skipped = state.skipped
    save(state_dir, record)


def _remove_unfinished(state_dir: Path, run_id: str) -> None:
    """Remove a sandbox whose making failed (its record may not be written yet)."""
    home = runs_dir(state_dir) / run_id
    if not (home / "run.json").is_file():
        try:
            home.rmdir()  # nothing made in it yet
        except OSError:
            log.warning("an unfinished sandbox was kept: %s", home)
        return
    remove(state_dir, run_id)


def used_bases(state_dir: Path) -> set[str]:
    """The base trees the overlay sandboxes on record use."""
    return {r.base_tree for r in list_runs(state_dir) if r.layout == "overlay" and r.base_tree}


def _start_from_person(
    state_dir: Path,
    record: RunRecord,
    home: Path,
    watched: Watched | None,
    found: RepoLayout | None,
) -> None:
    """Lay the person's worktree into the clone; a sandbox that could not is removed."""
    from promoter.executor.start_state import capture_into  # not for --list, --prune

    try:
        state = capture_into(
            record.worktree, Path(record.clone), home, record.base_tree,
            watched=watched, found=found,
        )  # fmt: skip
    except OSError as exc:
        remove(state_dir, record.run_id)
        raise WriteFailed(
            f"your worktree could not be laid into the sandbox: {exc.strerror or exc}; "
            "the sandbox was removed",
            run_id=record.run_id,
        ) from exc
    except BaseException:
        remove(state_dir, record.run_id)
        raise
    record.start_tree = state.tree
    record.preconditions = state.preconditions
    record.skipped = state.skipped
    save(state_dir, record)


def save(state_dir: Path, record: RunRecord) -> None:
    """Replace the sandbox's ``run.json`` durably (``promoter.store.durable``: no temp
    name is left behind by a kill)."""
    from promoter.store.durable import write_replace

    path = _record_path(state_dir, record.run_id)
    data = json.dumps(record.wire(), indent=2, sort_keys=True) + "\n"
    write_replace(path, data.encode("utf-8"), fault="run_record")


def load(state_dir: Path, run_id: str) -> RunRecord:
    path = _record_path(state_dir, run_id)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise NotFound(
            f"no run {run_id!r} under {runs_dir(state_dir)} (a completed step removes its "
            "sandbox unless given --keep; promoter run --list shows the sandboxes left)",
            run_id=run_id,
        ) from exc
    steps = [_step(s) for s in data.pop("steps", [])]
    return RunRecord(**_known(RunRecord, data), steps=steps)


def _known(cls: type[Step | RunRecord], data: dict[str, Any]) -> dict[str, Any]:
    """``data``'s fields of ``cls``, and the keys it has no field for as its ``unknown``:
    a later version's additions are kept and written back as they were, never a reason
    to refuse the record (docs/decisions/a-step-ends-saying-what-happened.md)."""
    names = set(cls.__match_args__) - {"unknown"}  # made by @record
    known = {key: value for key, value in data.items() if key in names}
    known["unknown"] = {key: value for key, value in data.items() if key not in names}
    return known


def _step(data: dict[str, Any]) -> Step:
    """A step as ``run.json`` holds it; its status string read as a ``RunStatus``."""
    status = data.pop("status", RunStatus.STARTED.value)
    try:
        return Step(**_known(Step, data), status=RunStatus(status))
    except ValueError as exc:
        raise ConfigError(f"a run step has an unknown status {status!r}") from exc


def list_runs(state_dir: Path) -> list[RunRecord]:
    root = runs_dir(state_dir)
    if not root.is_dir():
        return []
    found = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(RUN_PREFIX) and (entry / "run.json").is_file():
            found.append(load(state_dir, entry.name))
    return sorted(found, key=lambda r: (r.created_at, r.run_id))


def remove(state_dir: Path, run_id: str) -> Path:
    """Delete a sandbox directory; refuses anything that is not exactly one.

    The directory is removed by descriptors (``promoter.fs.own_tree``) and only when the
    ``run.json`` read through the opened directory names this very run; a bind mount
    inside the sandbox is kept and named, never emptied.
    """
    from promoter.executor import layers
    from promoter.fs.own_tree import remove_own_tree

    record = load(state_dir, run_id)
    check_removable(state_dir, record)
    home = runs_dir(state_dir) / run_id
    if record.layout == "overlay":
        layers.prepare_removal(home)
    return remove_own_tree(runs_dir(state_dir), run_id, lambda fd: names_run(fd, run_id))


def check_removable(state_dir: Path, record: RunRecord) -> None:
    """``ConfigError`` unless ``record``'s sandbox is a directory right under the runs
    directory that does not overlap the guarded worktree."""
    root = runs_dir(state_dir).resolve()
    home = (runs_dir(state_dir) / record.run_id).resolve()
    worktree = Path(record.worktree).resolve()
    if home.parent != root or home.is_symlink():
        raise ConfigError(f"{home} is not a sandbox directory under {root}")
    if worktree == home or home in worktree.parents or worktree in home.parents:
        raise ConfigError(f"the sandbox {home} overlaps the guarded worktree {worktree}")


def names_run(home_fd: int, run_id: str) -> bool:
    """Whether the sandbox open at ``home_fd`` holds the record of run ``run_id``."""
    try:
        fd = os.open("run.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=home_fd)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = json.loads(handle.read(1 << 20))
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)
    return isinstance(data, dict) and data.get("run_id") == run_id
