"""Trace a commit (or what is staged) to the promotion receipts that wrote its bytes.

For each path a commit changed against its first parent (or the index against HEAD) the
committed bytes are hashed and matched with the receipts' targets: ``promoted``,
``changed_after_promotion``, ``not_promoted`` or ``untouched`` (protocol: api#trace).
Paths are wire forms (protocol: documents#byte-paths). It only reads: git through the
hermetic runner with no optional locks, the journal in one session.

Not here: writing trailers or commits, checking signatures
(``promoter.engine.receipts.signing``), the HTTP and CLI shapes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from promoter.domain import wirepath
from promoter.domain.answers import (
    TraceChange,
    TracePath,
    TracePromotion,
    TraceReport,
    TraceVerdict,
)
from promoter.engine.intake.grants import load_grant
from promoter.engine.ports import Provenance
from promoter.engine.repos import Repository
from promoter.errors import CommitUnknown, GitError, PromoterError
from promoter.git.layout import RepoLayout, repo_env
from promoter.git.readback import blob_sha256
from promoter.git.records import EMPTY_TREE, DiffEntry, parse_diff_raw
from promoter.git.runner import GitResult, run_git
from promoter.store import journal

__all__ = ["PathTrace", "Promotion", "Trace", "trace_commit", "trace_staged"]

# A revision the caller may name: a commit id or a ref-like name, never an option and
# never a ``rev:path`` expression. Whatever it names must peel to a commit.
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/~^@{}-]{0,199}")
_GITLINK = "160000"


@dataclass(frozen=True)
class Promotion:
    """One promotion receipt, as a trace names it."""

    operation_id: str
    status: str
    bundle_id: str
    grant_id: str
    executor_run_id: str | None
    promoted_at: str
    receipt_sha256: str

    def wire(self) -> TracePromotion:
        return {
            "operation_id": self.operation_id,
            "status": self.status,
            "bundle_id": self.bundle_id,
            "grant_id": self.grant_id,
            "executor_run_id": self.executor_run_id,
            "promoted_at": self.promoted_at,
            "receipt_sha256": self.receipt_sha256,
        }


@dataclass(frozen=True)
class PathTrace:
    """One path: what the commit holds there, and which receipts wrote it."""

    path: str  # wire form (protocol: documents#byte-paths), as receipts name it
    change: TraceChange | None  # None when untouched
    exists: bool | None  # None when untouched
    sha256: str | None
    mode: str | None
    verdict: TraceVerdict
    promotions: tuple[Promotion, ...]  # the receipts that wrote exactly these bytes
    last_promotion: Promotion | None  # changed_after_promotion: the last one that wrote it

    def wire(self) -> TracePath:
        last = self.last_promotion
        return {
            "path": self.path,
            "change": self.change,
            "exists": self.exists,
            "sha256": self.sha256,
            "mode": self.mode,
            "verdict": self.verdict,
            "promotions": [p.wire() for p in self.promotions],
            "last_promotion": None if last is None else last.wire(),
        }


@dataclass(frozen=True)
class Trace:
    """A commit (or the index: ``commit`` is None) against ``parent``, path by path."""

    repository: str
    commit: str | None
    parent: str | None
    paths: tuple[PathTrace, ...]

    def wire(self) -> TraceReport:
        return {
            "repository": self.repository,
            "commit": self.commit,
            "parent": self.parent,
            "paths": [p.wire() for p in self.paths],
        }


def trace_commit(
    services: Provenance, repository: Repository, revision: str, paths: Sequence[str] = ()
) -> Trace:
    """Trace ``revision`` (a commit) against its first parent; ``CommitUnknown`` if none."""
    layout = repository.layout
    commit = _resolve(layout, revision)
    parent = _peel(layout, f"{commit}^1")
    raw = _git(
        layout,
        ["diff-tree", "-r", "-z", "--no-renames", "--no-abbrev", parent or EMPTY_TREE, commit],
    ).stdout
    return _trace(services, repository, commit, parent, parse_diff_raw(raw), paths)


def trace_staged(services: Provenance, repository: Repository, paths: Sequence[str] = ()) -> Trace:
    """Trace what is staged: the index against HEAD (an empty tree on an unborn branch)."""
    layout = repository.layout
    head = _peel(layout, "HEAD")
    raw = _git(
        layout,
        ["diff-index", "--cached", "-z", "--no-renames", "--no-abbrev", head or EMPTY_TREE],
    ).stdout
    return _trace(services, repository, None, head, parse_diff_raw(raw), paths)


def _trace(
    services: Provenance,
    repository: Repository,
    commit: str | None,
    parent: str | None,
    changes: list[DiffEntry],
    asked: Sequence[str],
) -> Trace:
    for path in asked:
        wirepath.decode(path)  # a path asked for is wire form: ``PathInvalid`` otherwise
    named = [(wirepath.from_disk(c.path), c) for c in changes]
    if asked:
        wanted = set(asked)
        named = [(path, c) for path, c in named if path in wanted]
    changes = [c for _, c in named]
    oids = [c.new_oid for c in changes if c.new_oid and c.new_mode != _GITLINK]
    hashes = blob_sha256(repository.layout, oids) if oids else {}
    written = _receipt_targets(services, repository.identity)
    found: dict[str, PathTrace] = {}
    for path, change in named:
        exists = change.new_mode is not None
        sha = None
        if exists and change.new_oid and change.new_mode != _GITLINK:
            sha = hashes[change.new_oid][0]
        found[path] = _judge(path, change, exists, sha, written.get(path, []))
    for path in asked:
        if path not in found:
            found[path] = PathTrace(path, None, None, None, None, "untouched", (), None)
    ordered = sorted(found.values(), key=lambda p: wirepath.decode(p.path))
    return Trace(repository.name, commit, parent, tuple(ordered))


def _judge(
    path: str,
    change: DiffEntry,
    exists: bool,
    sha: str | None,
    written: list[tuple[Promotion, Any]],
) -> PathTrace:
    exact = tuple(
        promotion
        for promotion, target in written
        if target.get("exists") is exists and (not exists or target.get("sha256") == sha)
    )
    verdict: TraceVerdict = "not_promoted"
    if written:
        verdict = "promoted" if exact else "changed_after_promotion"
    last = written[-1][0] if written and not exact else None
    return PathTrace(path, change.status, exists, sha, change.new_mode, verdict, exact, last)


def _receipt_targets(
    services: Provenance, repository_identity: str
) -> dict[str, list[tuple[Promotion, Any]]]:
    """Path -> (promotion, its receipt's target for the path), oldest promotion first."""
    with journal.unit_of_work(services.db) as session:
        operations = journal.receipted_promotions(session, repository_identity)
    runs: dict[str, str | None] = {}
    by_path: dict[str, list[tuple[Promotion, Any]]] = {}
    for op in operations:
        receipt = op.receipt or {}
        grant_id = str(receipt.get("grant_id") or op.grant_id or "")
        if grant_id not in runs:
            runs[grant_id] = _executor_run(services, grant_id)
        promotion = Promotion(
            operation_id=op.operation_id,
            status=op.status.value,
            bundle_id=str(receipt.get("bundle_id") or op.bundle_id or ""),
            grant_id=grant_id,
            executor_run_id=runs[grant_id],
            promoted_at=str(receipt.get("promoted_at", "")),
            receipt_sha256=op.receipt_sha256 or "",
        )
        for target in receipt.get("targets") or []:
            if isinstance(target, dict) and isinstance(target.get("path"), str):
                by_path.setdefault(target["path"], []).append((promotion, target))
    return by_path


def _executor_run(services: Provenance, grant_id: str) -> str | None:
    """The grant's executor run, or None when the grant can no longer be read."""
    try:
        return load_grant(services, grant_id).executor_run_id
    except PromoterError:
        return None


def _resolve(layout: RepoLayout, revision: str) -> str:
    if REVISION.fullmatch(revision) is None:
        raise CommitUnknown(f"{revision!r} is not a revision name", commit=revision)
    commit = _peel(layout, revision)
    if commit is None:
        raise CommitUnknown(f"no commit {revision!r} in the repository", commit=revision)
    return commit


def _peel(layout: RepoLayout, revision: str) -> str | None:
    """The commit ``revision`` names, or None (unknown, or no commit)."""
    result = _git(
        layout,
        ["rev-parse", "-q", "--verify", "--end-of-options", f"{revision}^{{commit}}"],
        check=False,
    )
    if result.returncode != 0:
        return None
    oid = result.stdout.decode("ascii", "replace").strip()
    if re.fullmatch(r"[0-9a-f]{40}", oid) is None:
        raise GitError(f"git rev-parse answered {oid!r} for {revision!r}")
    return oid


def _git(layout: RepoLayout, args: list[str], *, check: bool = True) -> GitResult:
    return run_git(args, cwd=layout.worktree, env=repo_env(layout), check=check)
