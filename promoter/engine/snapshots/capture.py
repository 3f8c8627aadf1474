"""Shadow snapshots of a worktree: capture, list, diff, operation trees, retention.

This module owns what a snapshot means to promoter (protocol: snapshots#shadow-repository):
one ``SnapshotRow`` per capture, captures under the repository lock, the ``pre``/``post``
trees an operation records (watched captures where ``snapshot_watch`` is on, else a
post snapshot from the targets where protocol: snapshots#incremental-post-snapshot
allows), the diff between two known trees, and retention (``gc_snapshots``). It also
holds the helpers the restore modules share (``resolve``, ``shadow_for``, ``tree_id``,
``known_tree``, ``lock_repository``).

Not here: restoring (``promoter.engine.operation.restore``), git plumbing
(``promoter.git.shadow``), HTTP and the CLI; nothing here writes to a worktree.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Literal

from promoter.domain.status import OperationKind, OperationStatus
from promoter.engine.intake.bundles import load_bundle
from promoter.engine.locking import repo_lock
from promoter.engine.ports import (
    Capturing,
    Catalogue,
    Configured,
    Guarding,
    Loading,
    Locking,
    Repositories,
)
from promoter.engine.repos import Repository
from promoter.errors import NotFound, OperationUnknown, PromoterError, ValidationFailed
from promoter.fs.lock import RepoLock
from promoter.git.records import require_oid
from promoter.git.shadow import DIFF_LIMIT, Capture, ShadowRepository
from promoter.git.shadow_diff import TreeDiffWire
from promoter.git.shadow_watch import SnapshotWatch
from promoter.store import journal, snapshot_log

__all__ = [
    "MAX_LABEL",
    "capture",
    "capture_for_operation",
    "diff",
    "gc_snapshots",
    "known_tree",
    "list_snapshots",
    "lock_repository",
    "resolve",
    "shadow_for",
    "tree_id",
]

log = logging.getLogger("promoter.snapshots")

MAX_LABEL = 200


@dataclass(frozen=True)
class _Fresh:
    """The last capture of a repository in this process, when it was a promotion's pre."""

    operation_id: str
    attempt: int
    tree: str
    thread: int


_fresh: dict[str, _Fresh] = {}  # repository identity -> its last capture, if a pre
_fresh_lock = threading.Lock()


# --- shared helpers --------------------------------------------------------------------------


def resolve(services: Repositories, repository: Repository | str) -> Repository:
    """A configured repository, given as itself, its name or its identity."""
    if isinstance(repository, Repository):
        return repository
    return services.registry.lookup(repository)


def shadow_for(services: Configured, repository: Repository) -> ShadowRepository:
    """The shadow repository of ``repository`` (created on first use)."""
    snapshots_dir = os.fspath(services.settings.snapshots_dir)
    return ShadowRepository.open(repository.layout, snapshots_dir, repository.identity)


def tree_id(value: object, what: str = "tree") -> str:
    """``value`` if it is a full lowercase tree id; else ``ValidationFailed``."""
    try:
        return require_oid(value if isinstance(value, str) else "", what)
    except ValueError:
        raise ValidationFailed(f"{what} must be 40 lowercase hex digits", field=what) from None


def known_tree(shadow: ShadowRepository, tree: str, what: str = "tree") -> str:
    """``tree`` if the shadow holds it; ``NotFound`` otherwise."""
    if not shadow.has_tree(tree_id(tree, what)):
        raise NotFound(f"{what} {tree} is not a snapshot of this repository", tree=tree)
    return tree


def lock_repository(services: Locking, repository: Repository) -> RepoLock:
    """The repository lock, acquired (``LockUnavailable`` after ``lock_timeout``)."""
    lock = repo_lock(services, repository)
    lock.acquire()
    return lock


# --- capture -----------------------------------------------------------------------------------


def capture(services: Capturing, repository: Repository | str, label: str = "") -> dict[str, str]:
    """Capture the worktree now, under the repository lock: ``{tree, label, captured_at}``."""
    if not isinstance(label, str) or len(label) > MAX_LABEL or not label.isprintable():
        raise ValidationFailed(f"label must be printable text of at most {MAX_LABEL} characters")
    repo = resolve(services, repository)
    lock = lock_repository(services, repo)
    try:
        return _capture_locked(services, repo, label)
    finally:
        lock.release()


def capture_for_operation(
    services: Capturing,
    repository: Repository | str,
    operation_id: str,
    which: Literal["pre", "post"],
    *,
    holding_lock: bool = True,
) -> str:
    """Capture and store the tree as the operation's ``pre_snapshot`` or ``post_snapshot``.

    Meant for the promotion flow, which already holds the repository lock: with
    ``holding_lock=True`` (the default) the lock is not taken again (it is not
    reentrant: taking it twice in one thread waits for the timeout). The capture is also
    listed as a snapshot labelled ``pre:<operation_id>`` or ``post:<operation_id>``.
    Returns the tree id.
    """
    if which not in ("pre", "post"):
        raise ValueError("which must be 'pre' or 'post'")
    repo = resolve(services, repository)
    lock = None if holding_lock else lock_repository(services, repo)
    try:
        label = f"{which}:{operation_id}"
        return _capture_locked(services, repo, label, (operation_id, which))["tree"]
    finally:
        if lock is not None:
            lock.release()


def _capture_locked(
    services: Capturing,
    repo: Repository,
    label: str,
    operation: tuple[str, Literal["pre", "post"]] | None = None,
) -> dict[str, str]:
    shadow = shadow_for(services, repo)
    with _fresh_lock:
        fresh = _fresh.pop(repo.identity, None)
    watch = _watch_for(services.snapshot_watches, repo, shadow) if operation is not None else None
    captured: Capture | None = None
    full = False
    if watch is not None:
        captured = watch.capture(shadow)
    if captured is None and operation is not None and operation[1] == "post" and fresh is not None:
        captured = _post_from_pre(services, shadow, operation[0], fresh)
    if captured is None:
        if watch is not None:
            watch.before_full(shadow)
        captured = shadow.capture()
        full = True
        if watch is not None:
            watch.after_full(shadow, captured.tree)
    shadow.keep(captured.tree)
    if captured.nested_repositories:
        nested = list(captured.nested_repositories)
        log.info("the snapshot of %s leaves out nested repositories %s", repo.name, nested)
    with journal.unit_of_work(services.db) as session:
        if operation is not None:
            operation_id, which = operation
            op = journal.get_operation(session, operation_id)
            if op is None:
                raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
            journal.set_snapshot(session, operation_id, which, captured.tree)
            if which == "pre" and full:  # the shadow index holds exactly this tree
                mark = _Fresh(operation_id, op.attempt, captured.tree, threading.get_ident())
                with _fresh_lock:
                    _fresh[repo.identity] = mark
        return snapshot_log.add(session, repo.identity, captured.tree, label)


def _watch_for(
    watches: dict[str, SnapshotWatch], repo: Repository, shadow: ShadowRepository
) -> SnapshotWatch | None:
    """The watch of the repository's worktree (made on first use), if it is to be watched."""
    if not repo.config.snapshot_watch or not SnapshotWatch.possible():
        return None
    with _fresh_lock:
        watch = watches.get(shadow.path)
        if watch is None:
            watch = watches[shadow.path] = SnapshotWatch(repo.worktree)
    return watch


def _post_from_pre(
    services: Loading, shadow: ShadowRepository, operation_id: str, fresh: _Fresh
) -> Capture | None:
    """The post capture from the pre one by the module docstring's rule; ``None``: no."""
    if fresh.operation_id != operation_id or fresh.thread != threading.get_ident():
        return None
    with journal.unit_of_work(services.db) as session:
        op = journal.get_operation(session, operation_id)
        if op is None or op.kind != OperationKind.PROMOTION or op.bundle_id is None:
            return None
        if op.attempt != fresh.attempt or op.pre_snapshot != fresh.tree:
            return None
        if op.status != OperationStatus.COMPLETED or (op.report or {}).get("kept"):
            return None
        bundle_id = op.bundle_id
    try:
        paths = [change.path for change in load_bundle(services, bundle_id).changes]
        return shadow.capture_paths(paths)
    except PromoterError as exc:
        log.info("the post snapshot of %s is captured in full: %s", operation_id, exc.detail)
        return None


# --- reading -----------------------------------------------------------------------------------


def list_snapshots(services: Catalogue, repository: Repository | str) -> list[dict[str, str]]:
    """Every recorded snapshot of the repository, oldest first."""
    repo = resolve(services, repository)
    with journal.unit_of_work(services.db) as session:
        return snapshot_log.entries(session, repo.identity)


def diff(
    services: Guarding,
    repository: Repository | str,
    from_tree: str,
    to_tree: str,
    *,
    limit: int = DIFF_LIMIT,
) -> TreeDiffWire:
    """``{added, modified, deleted, unified_diff, truncated}`` from one tree to another."""
    tree_id(from_tree, "from")
    tree_id(to_tree, "to")
    shadow = shadow_for(services, resolve(services, repository))
    known_tree(shadow, from_tree, "from")
    known_tree(shadow, to_tree, "to")
    return shadow.diff(from_tree, to_tree, limit=limit).wire()


# --- retention ---------------------------------------------------------------------------------


def gc_snapshots(services: Capturing, repository: Repository | str, keep: int) -> dict[str, int]:
    """Keep the newest ``keep`` snapshots and every tree an operation refers to; prune.

    Runs under the repository lock, so no capture writes objects while git prunes.
    Returns ``{removed_snapshots, forgotten_trees}``.
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValidationFailed("keep must be a non-negative integer")
    repo = resolve(services, repository)
    lock = lock_repository(services, repo)
    try:
        with journal.unit_of_work(services.db) as session:
            removed, wanted = snapshot_log.prune(session, repo.identity, keep)
        shadow = shadow_for(services, repo)
        watch = services.snapshot_watches.get(shadow.path)
        if watch is not None:
            watch.forget()
        forgotten = sorted(tree for tree in shadow.kept_trees() if tree not in wanted)
        for tree in forgotten:
            shadow.forget(tree)
        shadow.collect_garbage()
    finally:
        lock.release()
    return {"removed_snapshots": removed, "forgotten_trees": len(forgotten)}
