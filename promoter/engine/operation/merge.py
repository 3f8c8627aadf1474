"""Merge a drifted promotion away from the worktree into a new bundle.

``merge_operation`` merges, with ``git merge-file`` in a scratch directory
(``promoter.git.merge_file``), each target of a promotion refused ``target_drift`` that
the person changed, reading their bytes through ``Root.read_content``; it makes and holds
the merged bundle's promotion, or raises ``MergeConflict`` or ``MergeUnsupported``
(protocol: runs#merges-are-new-bundles, runs#how-a-merge-is-made). Once the original
bundle was merged (from this promotion, or from another merge of it) into a promotion
that completed or is writing, the merge is refused (``OperationConflict``) before the
worktree is read. Fault points: ``merge_checked``, ``merge_inputs_read``.

Left open, by design (no lock is taken): a merged promotion that completes after the
check. Read before it, the merge makes that promotion's own bundle again and answers it
as it stands. Read after, a second bundle is held whose old states are that promotion's
result: the carried-over targets already read as new and a merged path's merge is
that result again (dropped), so its attempt writes nothing, or refuses a moved file
(``target_drift``); after a rollback of the first it would write the original's other
changes, once a person approves it.

Not here: the promotion protocol, which never merges, the approval
(``promoter.engine.review.approval``), how a merged bundle is verified
(``promoter.engine.intake.merged``), roles (the route admits the operator only).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row

from promoter import faults
from promoter.domain.documents import seal_bundle
from promoter.domain.models import Change, FileState, MergedPath, MergeOrigin, PatchBundleV1
from promoter.domain.path_state import SYMLINK_MODE, Verdict, classify
from promoter.domain.paths import disk_path
from promoter.domain.status import OperationKind, OperationStatus
from promoter.domain.views import HeldPromotion, MergePathReport, MergeResult, MergeSide
from promoter.engine.intake.bundles import load_bundle, submit_bundle
from promoter.engine.intake.grants import load_grant
from promoter.engine.operation import requests
from promoter.engine.operation.preconditions import read_back
from promoter.engine.ports import Archive, Contents, Promoting, Provenance, Routing
from promoter.engine.queries import guarded_here
from promoter.engine.repos import Repository
from promoter.errors import (
    MergeConflict,
    MergeUnsupported,
    OperationConflict,
    OperationUnknown,
    PromoterError,
)
from promoter.fs.leaf import LeafState
from promoter.fs.root import Root
from promoter.git.merge_file import merge_bytes
from promoter.store import journal, ledger
from promoter.store.db import Database

__all__ = ["MAX_MERGE_BYTES", "SHOWN_CHARS", "merge_operation"]

MAX_MERGE_BYTES = 8 * 1024 * 1024  # per side: larger files are shown, not merged
SHOWN_CHARS = 256 * 1024  # of a conflicted merge's text, per path


@dataclass
class PathMerge:
    """One drifted path: its three sides and what the merge made of them."""

    path: str
    change: Change
    leaf: LeafState
    result: str = "unsupported"  # "clean", "conflict" or "unsupported"
    reason: str = ""
    current: bytes | None = None
    merged: bytes | None = None
    conflicts: int = 0

    def report(self) -> MergePathReport:
        old, new, leaf = self.change.old, self.change.new, self.leaf
        report = MergePathReport.model_construct(
            path=self.path,
            result=self.result,
            reason=self.reason,
            old=MergeSide.model_construct(sha256=old.sha256, mode=old.mode, bytes=old.bytes),
            current=MergeSide.model_construct(
                kind=leaf.kind, sha256=leaf.sha256, mode=leaf.mode, bytes=leaf.size
            ),
            new=MergeSide.model_construct(sha256=new.sha256, mode=new.mode, bytes=new.bytes),
        )
        if self.result == "conflict" and self.merged is not None:
            text = self.merged.decode("utf-8", errors="replace")
            report.conflicts = self.conflicts
            report.merged_text = text[:SHOWN_CHARS]
            report.truncated = len(text) > SHOWN_CHARS
        return report


def _drifted_operation(services: Routing, operation_id: str) -> tuple[str, int, str]:
    """The bundle id, fence and repository identity of a promotion refused for drift."""
    with journal.unit_of_work(services.db) as session:
        row = journal.get_operation(session, operation_id)
        if row is None:
            raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
        guarded_here(services.registry, services.owner.host, row)
        drifted = row.status == OperationStatus.REFUSED and row.code == "target_drift"
        if row.kind != OperationKind.PROMOTION or not drifted or row.bundle_id is None:
            raise OperationConflict(
                f"operation {operation_id} is {row.status} ({row.code or 'no code'}); only a "
                "promotion refused with target_drift can be merged",
                operation_id=operation_id,
                current_status=row.status,
            )
        return row.bundle_id, int(row.fence or 0), row.repository_identity


# a merged promotion in one of these has written, or is writing, its bundle: the worktree
# holds its result, so a merge read now would start from it (protocol: runs#how-a-merge-is-made)
_WRITTEN = {
    OperationStatus.COMPLETED: "its changes are in the worktree",
    OperationStatus.IN_PROGRESS: "its changes are being written",
    OperationStatus.APPLIED_UNVERIFIED: "its changes are written and being checked",
    OperationStatus.NEEDS_RECOVERY: "its changes may be partly in the worktree",
    OperationStatus.NEEDS_RECONCILIATION: "its changes may be partly in the worktree",
}


def _refuse_once_merged(db: Database, operation_id: str, original_id: str | None) -> None:
    """``OperationConflict`` when a promotion merged from ``operation_id``, or from the
    same original bundle (``original_id``: ``operation_id``'s bundle is a merge), has
    written or is writing (``_WRITTEN``), named with its status; the worktree not read.

    One query for a promotion whose own merges are held or refused for another reason;
    a merged promotion refused ``target_drift`` may have been merged in turn, so its
    merges are read too, one query a generation. A held one is made again as it is (the
    same inputs, the same bundle and hold); a refused, rejected, rolled back or abandoned
    one leaves the merge open."""
    with journal.unit_of_work(db) as session:
        if original_id is None:
            frontier = [operation_id]
        else:
            frontier = [p.operation_id for p in journal.promotions_of_bundle(session, original_id)]
        seen = set(frontier)
        while frontier:
            found = journal.merged_promotions(session, frontier)
            written = [m for m in found if m.status in _WRITTEN]
            if written:
                raise _merged_already(operation_id, written[-1], direct=frontier == [operation_id])
            frontier = [
                m.operation_id
                for m in found
                if (m.status, m.code) == (OperationStatus.REFUSED, "target_drift")
                and m.operation_id not in seen
            ]
            seen.update(frontier)


def _merged_already(operation_id: str, merged: Row[Any], *, direct: bool) -> OperationConflict:
    """The refusal naming ``merged`` (a plain row of ``merged_promotions``) and its status."""
    status = OperationStatus(merged.status)
    stands = "completed" if status is OperationStatus.COMPLETED else f"is {status}"
    into = " was merged into" if direct else "'s original bundle was merged again into"
    return OperationConflict(
        f"operation {operation_id}{into} {merged.operation_id}, which {stands}: "
        f"{_WRITTEN[status]}; nothing is left to merge "
        f"(promoter ops show {merged.operation_id})",
        operation_id=operation_id,
        current_status=OperationStatus.REFUSED,
        merged_operation_id=merged.operation_id,
        merged_status=status,
    )


def _mode(change: Change, leaf: LeafState) -> str:
    """The merged mode: each side's change of the execute bit is kept (both: the same)."""
    base, yours, agent = change.old.mode, leaf.mode, change.new.mode
    return str(agent if yours == base else yours)


def _prepare(item: PathMerge, services: Archive) -> tuple[bytes, bytes] | None:
    """The old and new bytes when the path can be merged as text; else the reason set."""
    change, leaf = item.change, item.leaf
    if change.operation != "modify" or SYMLINK_MODE in (change.old.mode, change.new.mode):
        item.reason = (
            f"the bundle's change is a {change.operation} of a file or link, not a text edit"
        )
        return None
    if leaf.kind != "file":
        item.reason = f"the worktree holds a {leaf.kind} at this path, not a file"
        return None
    sizes = (change.old.bytes or 0, change.new.bytes or 0, leaf.size or 0)
    if max(sizes) > MAX_MERGE_BYTES or item.current is None:
        item.reason = f"a side is larger than the merge limit of {MAX_MERGE_BYTES} bytes"
        return None
    assert change.old.sha256 is not None and change.new.sha256 is not None
    old, new = services.blobs.read(change.old.sha256), services.blobs.read(change.new.sha256)
    if any(b"\0" in side for side in (old, item.current, new)):
        item.reason = "binary: a side holds a NUL byte"
        return None
    return old, new


def _read_drifted(db: Database, worktree: str, bundle: PatchBundleV1) -> list[PathMerge]:
    """Each target that reads as neither old nor new, with the person's bytes if text-sized."""
    found: list[PathMerge] = []
    with Root.open(worktree) as root:
        for change in bundle.changes:
            leaf = root.read_state(disk_path(change.path))
            if classify(leaf, change.old, change.new).verdict is not Verdict.NEITHER:
                continue
            item = PathMerge(change.path, change, leaf)
            if leaf.kind == "file" and (leaf.size or 0) <= MAX_MERGE_BYTES:
                leaf, item.current = root.read_content(disk_path(change.path), MAX_MERGE_BYTES)
                item.leaf = leaf
            found.append(item)
    return found


def _refuse_what_a_merge_cannot_mend(
    services: Provenance, repository: Repository, bundle: PatchBundleV1, operation_id: str
) -> None:
    """``MergeUnsupported`` when the grant's HEAD, branch or tree moved, or a target is
    staged: a merged bundle is held to the same grant, so it could never be promoted."""
    grant = load_grant(services, bundle.grant_id)
    with Root.open(repository.worktree) as root:
        found = read_back(repository.layout, root, grant, bundle)
    if not found.repository_ok:
        raise MergeUnsupported(
            "the repository moved since the grant (HEAD, branch or tree): a merged bundle "
            "is held to the same grant and could not be promoted; ask for a new run",
            operation_id=operation_id,
            paths=[],
            repository=found.repository.wire(),
        )
    staged = [p.path for p in found.paths if p.index_actual != p.index_expected]
    if staged:
        raise MergeUnsupported(
            "a target is staged in the index, which promoter never writes: unstage it "
            "(git restore --staged PATH, your file stays as it is) and merge again",
            operation_id=operation_id,
            paths=[],
            staged=staged,
        )


def _merge_all(services: Contents, drifted: list[PathMerge]) -> None:
    scratch = services.settings.state_dir / "merge"
    for item in drifted:
        sides = _prepare(item, services)
        if sides is None:
            continue
        assert item.current is not None
        merged = merge_bytes(scratch, sides[0], item.current, sides[1])
        item.merged, item.conflicts = merged.data, merged.conflicts
        item.result = "clean" if merged.clean else "conflict"
        item.reason = "" if merged.clean else f"{merged.conflicts} conflicting hunk(s)"


def _state(data: bytes, mode: str) -> FileState:
    return FileState.of(hashlib.sha256(data).hexdigest(), mode, len(data))


# a bundle document for intake, which parses and verifies it as any submitted one
def _merged_document(original: PatchBundleV1, merges: list[PathMerge]) -> dict[str, Any]:
    by_path = {item.path: item for item in merges}
    changes: list[Change] = []
    for change in original.changes:
        item = by_path.get(change.path)
        if item is None:
            changes.append(change)
            continue
        assert item.current is not None and item.merged is not None
        old = _state(item.current, str(item.leaf.mode))
        new = _state(item.merged, _mode(change, item.leaf))
        if old.same_content(new):
            continue  # the person's bytes already are the merge: nothing left to write
        changes.append(Change(path=change.path, operation="modify", old=old, new=new))
    origin = MergeOrigin(
        bundle_id=original.bundle_id,
        bundle_sha256=original.bundle_sha256,
        paths=[
            MergedPath(
                path=item.path,
                old_sha256=str(item.change.old.sha256),
                current_sha256=str(item.leaf.sha256),
                new_sha256=str(item.change.new.sha256),
            )
            for item in merges
        ],
    )
    document = original.wire()
    for name in ("bundle_id", "bundle_sha256"):
        del document[name]
    document.update(
        changes=[c.wire() for c in changes],
        change_count=len(changes),
        total_bytes=sum(c.new.bytes or 0 for c in changes),
        merge=origin.wire(),
    )
    return seal_bundle(document)


def merge_operation(services: Promoting, operation_id: str, *, by: str, role: str) -> MergeResult:
    """Merge the drifted paths of a promotion refused with ``target_drift`` (see above).

    Answers the new bundle, its verification receipt, the held promotion (or why it could
    not be held: e.g. ``lease_stale``; the bundle stays stored) and per path what the
    merge made. Raises ``MergeConflict`` or ``MergeUnsupported`` with the per-path
    report, ``OperationConflict`` for an operation that is not a drifted promotion or
    was merged into a promotion that completed or is writing.
    """
    bundle_id, fence, identity = _drifted_operation(services, operation_id)
    bundle = load_bundle(services, bundle_id)
    original = bundle if bundle.merge is None else load_bundle(services, bundle.merge.bundle_id)
    merged_from = None if bundle.merge is None else original.bundle_id
    _refuse_once_merged(services.db, operation_id, merged_from)
    faults.point("merge_checked")
    repository = services.registry.by_identity(identity)
    _refuse_what_a_merge_cannot_mend(services, repository, original, operation_id)
    drifted = _read_drifted(services.db, str(repository.worktree), original)
    faults.point("merge_inputs_read")
    if not drifted:
        raise MergeUnsupported(
            "no target file differs from the bundle's old and new states: nothing to merge",
            operation_id=operation_id,
            paths=[],
        )
    _merge_all(services, drifted)
    reports = [item.report() for item in drifted]
    report = [item.wire() for item in reports]  # the refusals' context
    if any(item.result == "unsupported" for item in drifted):
        raise MergeUnsupported(
            "a drifted path cannot be merged as text; nothing was written",
            operation_id=operation_id,
            paths=report,
        )
    if any(item.result == "conflict" for item in drifted):
        raise MergeConflict(
            "the merge has conflicts; nothing was written and no bundle was made",
            operation_id=operation_id,
            paths=report,
        )
    document = _merged_document(original, drifted)
    if not document["changes"]:
        raise MergeUnsupported(
            "the worktree already holds the merged result of every path: nothing is left "
            "to promote",
            operation_id=operation_id,
            paths=report,
        )
    for item in drifted:
        assert item.current is not None and item.merged is not None
        services.blobs.put(hashlib.sha256(item.current).hexdigest(), item.current)
        services.blobs.put(hashlib.sha256(item.merged).hexdigest(), item.merged)
    submitted = submit_bundle(services, document, run_id=None, host_made=True)
    merged = submitted.bundle
    receipt_sha256 = submitted.receipt.receipt_sha256
    with journal.unit_of_work(services.db) as session:
        ledger.append(
            session,
            operation_id,
            "decision",
            {
                "merge": {"bundle_id": merged.bundle_id, "bundle_sha256": merged.bundle_sha256},
                "paths": [item.path for item in drifted],
                "by": {"role": role, "name": by},
            },
        )
    try:
        held = requests.request_promotion(services, merged.bundle_id, receipt_sha256, fence)
    except PromoterError as exc:
        promotion = HeldPromotion.model_construct(
            operation_id=None, status="not_held", code=exc.code, detail=exc.detail
        )
    else:
        promotion = HeldPromotion.model_construct(
            operation_id=held.operation_id, status=held.status, code=None, detail=""
        )
    return MergeResult.model_construct(
        operation_id=operation_id,
        bundle_id=merged.bundle_id,
        bundle_sha256=merged.bundle_sha256,
        verification_receipt_sha256=receipt_sha256,
        merged_from=original.bundle_id,
        paths=reports,
        promotion=promotion,
    )
