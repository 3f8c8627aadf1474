"""The read side the API and the console use: typed views of the journal, the ledger, the
watch feed and the guarded repositories.

Each function opens its own session (or runs its own read-only git) and returns records
or small frozen views, never a database row (``operation_summary`` makes a record the
entry of an operation list, which also heads its full view): ``promoter.api`` reads through here and
imports neither ``promoter.store`` nor ``promoter.git`` for a read
(``tests/contract/test_contracts.py``). Each takes only what it reads (the database, a
repository), not the whole ``Services``.

Deliberately not here: an operation's full view (``promoter.engine.operation.views``),
snapshots and reviews (``promoter.engine.snapshots``, ``promoter.engine.review``), and any
write.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from promoter.domain.records import Operation
from promoter.domain.status import OperationStatus
from promoter.domain.views import FeedEvent, OperationSummary
from promoter.engine.repos import Registry, Repository
from promoter.errors import OwnedByOtherHost
from promoter.git.head import read_head
from promoter.git.layout import repo_env
from promoter.git.runner import run_git
from promoter.store import feed, hosts, journal, step_rows, witness
from promoter.store.db import Database
from promoter.store.witness import Witness as Witness  # what ``watch`` gives

# --- operations -------------------------------------------------------------------------


def guarded_here(registry: Registry, host: str, row: Operation) -> Repository:
    """The repository of an operation, when this daemon guards it.

    An operation of a repository not configured here that another host owns is
    ``owned_by_other_host`` naming that host; with no other owner on record it stays
    ``repository_unknown``.
    """
    guarded = {repository.identity for repository in registry.all()}
    if row.repository_identity not in guarded and row.owner_host and row.owner_host != host:
        raise OwnedByOtherHost(
            f"operation {row.operation_id} is owned by host {row.owner_host}, not this one",
            operation_id=row.operation_id,
            owner_host=row.owner_host,
        )
    return registry.by_identity(row.repository_identity)


def list_operations(
    db: Database,
    *,
    status: str | None = None,
    repository: str | None = None,
    limit: int | None = None,
) -> list[Operation]:
    """The newest operations first, by status and repository (its name or identity)."""
    with journal.unit_of_work(db) as session:
        if limit is None:
            return journal.list_operations(session, status=status, repository=repository)
        return journal.list_operations(session, status=status, repository=repository, limit=limit)


def repository_known(db: Database, repository: str) -> bool:
    """Whether ``repository`` (a name or an identity) is one a host of the ledger guards
    or an operation names: a filter of the operations that could match one."""
    with journal.unit_of_work(db) as session:
        for host in hosts.all_hosts(session):
            if (
                repository in host.repositories
                or repository in (host.repository_names or {}).values()
            ):
                return True
        return bool(journal.list_operations(session, repository=repository, limit=1))


def operation_summary(row: Operation) -> OperationSummary:
    """One operation as the API's list and the console's lists show it (the first fields
    of ``promoter.engine.operation.views.operation_view``)."""
    return OperationSummary.model_construct(
        operation_id=row.operation_id,
        kind=row.kind,
        status=row.status,
        attempt=row.attempt,
        repository=row.repository_name,
        bundle_id=row.bundle_id,
        code=row.code,
        updated_at=row.updated_at,
    )


def count_by_status(db: Database, statuses: tuple[str, ...]) -> dict[str, int]:
    """How many operations have each of ``statuses`` now."""
    with journal.unit_of_work(db) as session:
        return {s: len(journal.operations_with_status(session, s)) for s in statuses}


@dataclass(frozen=True)
class SeenEvent:
    """One ledger event, as an outcome line tells it."""

    kind: str
    seq: int
    payload: Any


@dataclass(frozen=True)
class Outcome:
    """An operation as an attempt left it: its row's status, the events the attempt
    appended and, once completed, the files written by operation (``create``,
    ``modify``, …) and bytes."""

    operation: witness.Ended
    events: list[SeenEvent]
    files: dict[str, int]
    written: int


def watch(operation_id: str) -> AbstractContextManager[Witness]:
    """What an attempt started in the block commits to ``operation_id``, kept for
    ``outcome`` (``promoter.store.witness``)."""
    return witness.watch(operation_id)


def _written(steps: Iterable[tuple[str, Any]]) -> tuple[dict[str, int], int]:
    files: dict[str, int] = {}
    written = 0
    for operation, new_state in steps:
        files[operation] = files.get(operation, 0) + 1
        new = new_state if isinstance(new_state, dict) else {}
        if new.get("exists") and isinstance(new.get("bytes"), int):
            written += new["bytes"]
    return files, written


def outcome(db: Database, seen: Witness) -> Outcome | None:
    """The operation as the watched attempt left it (``None``: no such operation).

    What the attempt committed (``seen``) is the answer; the database is read only for
    what it did not commit itself: the row when the attempt set no status, the steps of
    a completed operation whose plan an earlier attempt committed."""
    events = [SeenEvent(kind, seq, payload) for kind, seq, payload in seen.events]
    ended, steps = seen.ended, seen.steps
    done = ended is not None and ended.status == OperationStatus.COMPLETED
    if ended is not None and (not done or steps is not None):
        files, written = _written(steps if done and steps else ())
        return Outcome(operation=ended, events=events, files=files, written=written)
    with journal.unit_of_work(db) as session:
        found = journal.get_operation(session, seen.operation_id)
        if found is None:
            return None
        ended = witness.Ended(
            found.kind,
            found.status,
            found.code,
            found.bundle_id,
            found.repository_name,
            found.attempt,
        )
        files, written = {}, 0
        if found.status == OperationStatus.COMPLETED:
            files, written = _written(
                (step.operation, step.new_state)
                for step in step_rows.steps(session, seen.operation_id)
            )
    return Outcome(operation=ended, events=events, files=files, written=written)


# --- the watch feed ---------------------------------------------------------------------


def feed_position(cursor: str | None) -> int:
    """The position an opaque cursor stands for (none: the start); ``BadRequest`` if malformed."""
    return feed.position(cursor)


def feed_cursor(position: int) -> str:
    """The opaque cursor of a feed position."""
    return feed.cursor(position)


@dataclass(frozen=True)
class FeedScan:
    """What a scan of the feed found: ``events`` (``None``: nothing after the start; empty:
    only filtered-out events) and the position read up to."""

    events: list[FeedEvent] | None
    position: int


def scan_feed(
    db: Database,
    start: int,
    limit: int,
    *,
    pages: int,
    repository: str | None = None,
    status: str | None = None,
) -> FeedScan:
    """The feed's entries after ``start`` that match, in its wire form, at most ``pages``
    pages of ``limit`` rows read; the position moves past every row read."""
    position = start
    with journal.unit_of_work(db) as session:
        for _page in range(pages):
            rows = feed.after(session, position, limit)
            if not rows:
                return FeedScan(None, position)
            position = rows[-1].position
            kept = [
                feed.as_event(row)
                for row in rows
                if (repository is None or row.repository_name == repository)
                and (status is None or row.status == status)
            ]
            if kept:
                return FeedScan(kept, position)
        return FeedScan([], position)


# --- repositories -----------------------------------------------------------------------


@dataclass(frozen=True)
class RepositoryHead:
    """A guarded repository as it reads now: its branch (``None``: detached) and HEAD
    (``None``: an unborn branch)."""

    name: str
    identity: str
    worktree: str
    branch: str | None
    head: str | None


def repository_head(repository: Repository) -> RepositoryHead:
    """``repository`` as it reads now: HEAD from its files where they answer as git would,
    else one ``git for-each-ref`` of the branch HEAD names (``read_head``); a HEAD moved
    since is read anew (its commit's tree not yet git's answer)."""
    now = read_head(repository.layout)
    return RepositoryHead(
        name=repository.name,
        identity=repository.identity,
        worktree=repository.worktree,
        branch=now.branch,
        head=now.commit,
    )


def dirty_paths(repository: Repository) -> int:
    """How many paths ``git status`` lists (read-only; the index file is not rewritten)."""
    args = ["--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all"]
    result = run_git(args, cwd=repository.worktree, env=repo_env(repository.layout))
    records = [r for r in result.stdout.split(b"\0") if r]
    renames = sum(1 for r in records if r[:1] in (b"R", b"C"))
    return len(records) - renames  # a rename's second record is its old name
