"""Shadow snapshots of a worktree: capture, list, diff, restore, retention (SPEC §8).

This module owns what a snapshot means to promoter: a ``SnapshotRow`` per capture (the
tree is kept reachable in the shadow repository), the ``pre``/``post`` trees of an
operation, retention, and ``restore`` as a journaled operation of kind ``restore``.

Restore, under the repository lock: capture the worktree; unless that tree equals
``expected_current_tree`` refuse with ``SnapshotStale`` and write nothing. Otherwise plan
per-file steps from the current tree to the target (regular files only: a symlink or
gitlink on either side of a change is refused), journal them with the ``decision`` and
``action`` events, then write through the descriptor-chain writer with a per-file
compare-and-swap, exactly as rollback does: deletions (checked unlinks), directories left
empty by them and absent from the target, then creations and modifications (temp file
from the shadow's blob, atomic replace), one directory fsync per directory. Every step
is read back; the operation ends ``completed``, ``refused`` (a compare-and-swap failed
before anything changed) or ``needs_reconciliation``, and a ``post`` capture records
what the worktree holds afterwards. ``recover_restore`` reclassifies an interrupted
restore (SPEC §5.5) and finishes it or fails closed.

Deliberately not here: git plumbing (``promoter.git.shadow``), the file-system
primitives (``promoter.fs``), HTTP and the CLI. Never ``read-tree -u``,
``checkout-index``, ``checkout``, ``reset``, ``stash`` or ``clean``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import select

from promoter.domain.canonical import canonical_bytes, content_id, sha256_hex
from promoter.engine import ledger
from promoter.engine.ownership import Owner
from promoter.engine.promote import repo_lock
from promoter.engine.repos import Repository
from promoter.engine.services import Services
from promoter.errors import (
    NotFound,
    OperationConflict,
    OperationUnknown,
    PathUnsafe,
    PromoterError,
    SnapshotStale,
    TargetDrift,
    ValidationFailed,
    WriteFailed,
)
from promoter.fs.chain import ExpectedState, Root
from promoter.fs.leaf import split_rel
from promoter.fs.lock import RepoLock
from promoter.git.objects import CatFile
from promoter.git.records import require_oid
from promoter.git.shadow import DIFF_LIMIT, ShadowRepository
from promoter.store import journal
from promoter.store.repo import now
from promoter.store.tables import OperationRow, SnapshotRow

log = logging.getLogger("promoter.snapshots")

MAX_LABEL = 200
RESTARTABLE = {"completed", "refused", "abandoned", "rolled_back", "rollback_partial"}
_MODES = {"100644", "100755"}
_KINDS = {"120000": "symbolic link", "160000": "gitlink (submodule)", "040000": "directory"}
_OPERATIONS = {"A": "create", "D": "delete", "M": "modify", "T": "modify"}
_MISSING: dict[str, Any] = {
    "exists": False,
    "sha256": None,
    "mode": None,
    "bytes": None,
    "blob_ref": None,
}


def _repository(services: Services, repository: Repository | str) -> Repository:
    return (
        repository if isinstance(repository, Repository) else services.registry.lookup(repository)
    )


def shadow_for(services: Services, repository: Repository) -> ShadowRepository:
    """The shadow repository of ``repository`` (created on first use)."""
    snapshots_dir = os.fspath(services.settings.snapshots_dir)
    return ShadowRepository.open(repository.layout, snapshots_dir, repository.identity)


def tree_id(value: object, what: str = "tree") -> str:
    """``value`` if it is a full lowercase tree id; else ``ValidationFailed``."""
    try:
        return require_oid(value if isinstance(value, str) else "", what)
    except ValueError:
        raise ValidationFailed(f"{what} must be 40 lowercase hex digits", field=what) from None


def _locked(services: Services, repository: Repository) -> RepoLock:
    lock = repo_lock(services, repository)
    lock.acquire()
    return lock


# --- capture, list, diff, retention ------------------------------------------------------------


def capture(services: Services, repository: Repository | str, label: str = "") -> dict[str, str]:
    """Capture the worktree now (under the repository lock); ``{tree, label, captured_at}``."""
    if not isinstance(label, str) or len(label) > MAX_LABEL or not label.isprintable():
        raise ValidationFailed(f"label must be printable text of at most {MAX_LABEL} characters")
    repo = _repository(services, repository)
    lock = _locked(services, repo)
    try:
        return _capture_locked(services, repo, label)
    finally:
        lock.release()


def _capture_locked(
    services: Services, repo: Repository, label: str, operation: tuple[str, str] | None = None
) -> dict[str, str]:
    shadow = shadow_for(services, repo)
    captured = shadow.capture()
    shadow.keep(captured.tree)
    if captured.nested_repositories:
        log.info(
            "snapshot of %s left out nested repositories %s",
            repo.name,
            list(captured.nested_repositories),
        )
    row = SnapshotRow(
        repository_identity=repo.identity, tree=captured.tree, label=label, captured_at=now()
    )
    with services.db.session() as session:
        if operation is not None:
            op = journal.get_operation(session, operation[0])
            if op is None:
                raise OperationUnknown(f"no operation {operation[0]!r}", operation_id=operation[0])
            setattr(op, f"{operation[1]}_snapshot", captured.tree)
        session.add(row)
    return {"tree": row.tree, "label": row.label, "captured_at": row.captured_at}


def capture_for_operation(
    services: Services,
    repository: Repository | str,
    operation_id: str,
    which: Literal["pre", "post"],
    *,
    holding_lock: bool = True,
) -> str:
    """Capture and store the tree as the operation's ``pre_snapshot`` or ``post_snapshot``.

    Meant for the promotion flow, which already holds the repository lock
    (``holding_lock=True``: the lock is not taken again; it is not reentrant). The
    capture is also listed as a snapshot labelled ``pre:<operation_id>``/``post:…``.
    """
    if which not in ("pre", "post"):
        raise ValueError("which must be 'pre' or 'post'")
    repo = _repository(services, repository)
    lock = None if holding_lock else _locked(services, repo)
    try:
        label = f"{which}:{operation_id}"
        return _capture_locked(services, repo, label, (operation_id, which))["tree"]
    finally:
        if lock is not None:
            lock.release()


def list_snapshots(services: Services, repository: Repository | str) -> list[dict[str, str]]:
    """Every recorded snapshot of the repository, oldest first."""
    repo = _repository(services, repository)
    query = (
        select(SnapshotRow)
        .where(SnapshotRow.repository_identity == repo.identity)
        .order_by(SnapshotRow.captured_at, SnapshotRow.id)
    )
    with services.db.session() as session:
        return [
            {"tree": r.tree, "label": r.label, "captured_at": r.captured_at}
            for r in session.scalars(query)
        ]


def _known(shadow: ShadowRepository, tree: str, what: str) -> str:
    if not shadow.has_tree(tree_id(tree, what)):
        raise NotFound(f"{what} {tree} is not a snapshot of this repository", tree=tree)
    return tree


def diff(
    services: Services,
    repository: Repository | str,
    from_tree: str,
    to_tree: str,
    *,
    limit: int = DIFF_LIMIT,
) -> dict[str, Any]:
    """``{added, modified, deleted, unified_diff, truncated}`` from one tree to another."""
    tree_id(from_tree, "from")
    tree_id(to_tree, "to")
    shadow = shadow_for(services, _repository(services, repository))
    _known(shadow, from_tree, "from")
    _known(shadow, to_tree, "to")
    return shadow.diff(from_tree, to_tree, limit=limit).wire()


def gc_snapshots(services: Services, repository: Repository | str, keep: int) -> dict[str, int]:
    """Keep the newest ``keep`` snapshots and every tree an operation refers to; prune."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValidationFailed("keep must be a non-negative integer")
    repo = _repository(services, repository)
    lock = _locked(services, repo)
    try:
        rows_query = (
            select(SnapshotRow)
            .where(SnapshotRow.repository_identity == repo.identity)
            .order_by(SnapshotRow.captured_at.desc(), SnapshotRow.id.desc())
        )
        ops_query = select(OperationRow).where(OperationRow.repository_identity == repo.identity)
        with services.db.session() as session:
            rows = list(session.scalars(rows_query))
            for row in rows[keep:]:
                session.delete(row)
            wanted: set[Any] = {row.tree for row in rows[:keep]}
            for op in session.scalars(ops_query):
                wanted |= {op.pre_snapshot, op.post_snapshot}
                if op.kind == "restore" and op.report:
                    wanted |= {op.report.get("from"), op.report.get("restore_to")}
        shadow = shadow_for(services, repo)
        forgotten = sorted(shadow.kept_trees() - wanted)
        for tree in forgotten:
            shadow.forget(tree)
        shadow.collect_garbage()
    finally:
        lock.release()
    return {"removed_snapshots": max(0, len(rows) - keep), "forgotten_trees": len(forgotten)}


# --- restore ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Step:
    path: str
    operation: str
    old: dict[str, Any]
    new: dict[str, Any]
    oid: str | None  # the target blob (None for a delete)


@dataclass
class _Progress:
    touched: bool = False
    created: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failure: PromoterError | None = None


def restore_id(repository_identity: str, current: str, target: str) -> str:
    document = {"restore_to": target, "from": current, "repository_identity": repository_identity}
    return content_id("op", sha256_hex(canonical_bytes(document)))


def restore(
    services: Services, repository: Repository | str, tree: str, expected_current_tree: str
) -> dict[str, str]:
    """Bring the worktree to snapshot ``tree``; ``{operation_id, status}``."""
    tree_id(tree)
    tree_id(expected_current_tree, "expected_current_tree")
    repo = _repository(services, repository)
    shadow = shadow_for(services, repo)
    _known(shadow, tree, "tree")
    lock = _locked(services, repo)
    try:
        current = shadow.capture().tree
        shadow.keep(current)
        if current != expected_current_tree:
            raise SnapshotStale(
                "the worktree is not at the expected tree; review the diff again",
                expected_current_tree=expected_current_tree,
                current_tree=current,
            )
        steps = _plan(shadow, current, tree)
        operation_id = _journal(services, repo, current, tree, steps)
        with Root.open(repo.worktree) as root:
            status = _apply(
                services, operation_id, root, lock, shadow, tree, steps, set(range(len(steps)))
            )
        _post_capture(services, shadow, operation_id, tree)
    finally:
        lock.release()
    return {"operation_id": operation_id, "status": status}


def _plan(shadow: ShadowRepository, current: str, target: str) -> list[_Step]:
    entries = shadow.diff_entries(current, target)
    refused: dict[str, str] = {}
    for entry in entries:
        for side, mode in (("current", entry.old_mode), ("target", entry.new_mode)):
            if mode is not None and mode not in _MODES:
                kind = _KINDS.get(mode, f"mode {mode} entry")
                refused.setdefault(entry.path, f"it is a {kind} in the {side} tree")
        try:
            split_rel(entry.path)
        except PathUnsafe:
            refused.setdefault(entry.path, "the path has a component promoter never writes")
    if refused:
        raise PathUnsafe(
            "restore writes regular files only; these paths cannot be restored",
            paths=dict(sorted(refused.items())),
        )
    oids = [oid for e in entries for oid in (e.old_oid, e.new_oid) if oid is not None]
    with shadow.reader() as cat:
        hashes = cat.blob_sha256(oids)

    def state(mode: str | None, oid: str | None) -> dict[str, Any]:
        if oid is None:
            return dict(_MISSING)
        sha256, size = hashes[oid]
        return {"exists": True, "sha256": sha256, "mode": mode, "bytes": size, "blob_ref": None}

    steps = [
        _Step(
            e.path,
            _OPERATIONS[e.status],
            state(e.old_mode, e.old_oid),
            state(e.new_mode, e.new_oid),
            e.new_oid,
        )
        for e in entries
    ]
    return sorted(steps, key=lambda s: (s.operation != "delete", *_dir_key(s.path)))


def _dir_key(path: str) -> tuple[bytes, bytes]:
    directory, _, name = path.rpartition("/")
    return os.fsencode(directory), os.fsencode(name)


def _journal(
    services: Services, repo: Repository, current: str, target: str, steps: list[_Step]
) -> str:
    operation_id = restore_id(repo.identity, current, target)
    owner = Owner.me()
    with services.db.session() as session:
        row = journal.get_operation(session, operation_id)
        if row is not None and row.status not in RESTARTABLE:
            raise OperationConflict(
                f"restore {operation_id} is {row.status}; recover or reconcile it first",
                operation_id=operation_id,
                status=row.status,
            )
        if row is None:
            row = OperationRow(
                operation_id=operation_id,
                kind="restore",
                attempt=1,
                repository_identity=repo.identity,
                repository_name=repo.name,
                created_at=now(),
            )
            session.add(row)
        else:
            row.attempt += 1
            journal.delete_steps(session, operation_id)
        row.status, row.code, row.detail = "in_progress", None, None
        row.owner_pid, row.owner_start, row.owner_boot = owner.pid, owner.start, owner.boot
        row.pre_snapshot, row.post_snapshot, row.updated_at = current, None, now()
        session.flush()
        journal.start_attempt(session, row)
        journal.add_steps(
            session,
            operation_id,
            [{"path": s.path, "operation": s.operation, "old": s.old, "new": s.new} for s in steps],
        )
        decision = ledger.append(
            session,
            operation_id,
            "decision",
            {
                "allowed": True,
                "restore_to": target,
                "from": current,
                "attempt": row.attempt,
            },
        )
        action = ledger.append(
            session,
            operation_id,
            "action",
            {
                "targets": [
                    {
                        "path": s.path,
                        "operation": s.operation,
                        "new": {k: s.new[k] for k in ("exists", "sha256", "mode")},
                    }
                    for s in steps
                ]
            },
        )
        row.report = {
            "restore_to": target,
            "from": current,
            "events": {"decision": decision, "action": action},
        }
    return operation_id


def _apply(
    services: Services,
    operation_id: str,
    root: Root,
    lock: RepoLock,
    shadow: ShadowRepository,
    target: str,
    steps: list[_Step],
    todo: set[int],
) -> str:
    """Write the steps in ``todo`` (deletions, emptied directories, writes); read back all."""
    progress = _Progress()
    deletes = [s for i, s in enumerate(steps) if i in todo and s.operation == "delete"]
    writes = [s for i, s in enumerate(steps) if i in todo and s.operation != "delete"]
    try:
        lock.check_held()
        _grouped(deletes, lambda step, sync: _delete(root, step, sync, progress))
        _remove_emptied(root, deletes, shadow.tree_dirs(target), progress)
        with shadow.reader() as cat:
            _grouped(writes, lambda step, sync: _write(root, cat, step, sync, progress))
    except (PromoterError, OSError) as exc:
        progress.failure = exc if isinstance(exc, PromoterError) else WriteFailed(str(exc))
    return _finish(services, operation_id, root, steps, progress)


def _grouped(steps: list[_Step], run: Callable[[_Step, bool], None]) -> None:
    """Run each step; ``sync`` is true on the last step of each directory (fsync once)."""
    for index, step in enumerate(steps):
        nxt = steps[index + 1] if index + 1 < len(steps) else None
        run(step, nxt is None or _dir_key(nxt.path)[0] != _dir_key(step.path)[0])


def _delete(root: Root, step: _Step, sync: bool, progress: _Progress) -> None:
    try:
        parent = root.open_parent(step.path, create=False)
    except TargetDrift as exc:
        if exc.context.get("found") == "missing_parent":
            return  # already gone, with its directory
        raise
    with parent:
        parent.unlink_checked(_expected(step.old))
        progress.touched = True
        if sync:
            parent.fsync()


def _remove_emptied(root: Root, deletes: list[_Step], keep: set[str], progress: _Progress) -> None:
    parts = [step.path.split("/")[:-1] for step in deletes]
    candidates = {"/".join(p[: i + 1]) for p in parts for i in range(len(p))} - keep
    for directory in sorted(candidates, key=lambda d: (d.count("/"), d), reverse=True):
        try:
            if root.remove_dir_if_empty(directory):
                progress.removed.append(directory)
                progress.touched = True
        except PromoterError as exc:
            log.warning("could not remove emptied directory %s: %s", directory, exc.detail)


def _write(root: Root, cat: CatFile, step: _Step, sync: bool, progress: _Progress) -> None:
    assert step.oid is not None
    try:
        parent = root.open_parent(step.path, create=True)
    except PromoterError as exc:
        progress.created.extend(exc.context.get("created_dirs", []))
        raise
    with parent:
        progress.created.extend(parent.created_dirs)
        progress.touched = progress.touched or bool(parent.created_dirs)
        temp = parent.write_temp(cat.read_blob(step.oid), step.new["mode"])
        parent.replace(temp, expected_old=_expected(step.old), new=_expected(step.new))
        progress.touched = True
        if sync:
            parent.fsync()


def _expected(state: dict[str, Any]) -> ExpectedState:
    return ExpectedState(bool(state["exists"]), state["sha256"], state["mode"])


def _finish(
    services: Services, operation_id: str, root: Root, steps: list[_Step], progress: _Progress
) -> str:
    verdicts: list[str] = []
    problems: list[dict[str, Any]] = []
    for step in steps:
        try:
            leaf = root.read_state(step.path)
            actual: dict[str, Any] = leaf.to_dict()
            verdict = (
                "new"
                if leaf.matches(_expected(step.new))
                else "old"
                if leaf.matches(_expected(step.old))
                else "neither"
            )
        except PromoterError as exc:
            verdict, actual = "neither", {"error": exc.code, "detail": exc.detail}
        verdicts.append(verdict)
        if verdict != "new":
            problems.append(
                {
                    "path": step.path,
                    "verdict": verdict,
                    "actual": actual,
                    "expected_old": step.old,
                    "expected_new": step.new,
                }
            )
    failure = progress.failure
    ok = failure is None and not problems
    status = "completed" if ok else "needs_reconciliation" if progress.touched else "refused"
    code = None if ok else failure.code if failure else "target_drift"
    detail = None if ok else failure.detail if failure else "a target did not read back as new"
    with services.db.session() as session:
        row = journal.get_operation(session, operation_id)
        assert row is not None
        for step_row, verdict in zip(journal.steps(session, operation_id), verdicts, strict=True):
            step_row.status = {"new": "completed", "old": "pending"}.get(verdict, "failed")
        journal.add_created_dirs(session, operation_id, progress.created)
        outcome = ledger.append(
            session,
            operation_id,
            "outcome",
            {
                "status": status,
                "code": code,
                "removed_directories": progress.removed,
                "created_directories": progress.created,
            },
        )
        report = dict(row.report or {})
        report["events"] = {**report.get("events", {}), "outcome": outcome}
        report.update(
            paths=problems,
            removed_directories=progress.removed,
            created_directories=progress.created,
        )
        if code is not None:
            report["error"] = {"code": code, "detail": detail}
        journal.set_status(session, row, status, code=code, detail=detail, report=report)
    return status


def _post_capture(
    services: Services, shadow: ShadowRepository, operation_id: str, target: str
) -> None:
    """Record what the worktree holds after the restore (``post_snapshot``)."""
    try:
        post = shadow.capture().tree
        shadow.keep(post)
    except PromoterError as exc:
        log.warning("post-restore capture of %s failed: %s", operation_id, exc.detail)
        return
    with services.db.session() as session:
        row = journal.get_operation(session, operation_id)
        assert row is not None
        row.post_snapshot = post
        row.report = {**(row.report or {}), "post_tree_matches": post == target}


def recover_restore(services: Services, operation_id: str) -> str:
    """Finish an interrupted restore or fail closed (SPEC §5.5); returns the new status.

    Each step is re-read under the lock: exactly new is confirmed, exactly old is applied
    again, anything else leaves the operation ``needs_reconciliation``. Serves both
    ``needs_recovery`` and an operator's ``continue`` on ``needs_reconciliation``.
    """
    with services.db.session() as session:
        row = journal.get_operation(session, operation_id)
        if row is None or row.kind != "restore":
            raise OperationUnknown(
                f"no restore operation {operation_id!r}", operation_id=operation_id
            )
        if row.status not in ("needs_recovery", "needs_reconciliation"):
            raise OperationConflict(f"restore {operation_id} is {row.status}", status=row.status)
        target = str((row.report or {})["restore_to"])
        journaled = [
            (s.path, s.operation, s.old_state, s.new_state)
            for s in journal.steps(session, operation_id)
        ]
        identity = row.repository_identity
    repo = services.registry.by_identity(identity)
    shadow = shadow_for(services, repo)
    files = shadow.tree_files(target)
    steps = [
        _Step(p, op, old, new, files[p].oid if new["exists"] else None)
        for p, op, old, new in journaled
    ]
    lock = _locked(services, repo)
    try:
        owner = Owner.me()
        with services.db.session() as session:
            row = journal.get_operation(session, operation_id)
            assert row is not None
            row.owner_pid, row.owner_start, row.owner_boot = owner.pid, owner.start, owner.boot
            journal.set_status(session, row, "in_progress")
        with Root.open(repo.worktree) as root:
            _remove_orphan_temps(root, steps)
            todo: set[int] = set()
            blocked = False
            for index, step in enumerate(steps):
                leaf = root.read_state(step.path)
                if leaf.matches(_expected(step.new)):
                    continue
                todo.add(index)
                blocked = blocked or not leaf.matches(_expected(step.old))
            if blocked:
                drift = TargetDrift("a target is neither its old nor its new state")
                status = _finish(
                    services, operation_id, root, steps, _Progress(touched=True, failure=drift)
                )
            else:
                status = _apply(services, operation_id, root, lock, shadow, target, steps, todo)
        _post_capture(services, shadow, operation_id, target)
    finally:
        lock.release()
    return status


def _remove_orphan_temps(root: Root, steps: list[_Step]) -> None:
    for directory in sorted({step.path.rpartition("/")[0] for step in steps}):
        try:
            names = root.list_temp_files(directory)
        except PromoterError:
            continue
        for name in names:
            with root.open_parent(
                f"{directory}/{name}" if directory else name, create=False
            ) as parent:
                parent.remove_temp(name)
