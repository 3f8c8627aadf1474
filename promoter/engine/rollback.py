"""Rollback of promoter's own bytes (SPEC §5.7, RollbackReceiptV1 of §3.8).

Under the repository lock, in reverse step order, each target gets a compare-and-swap
through the descriptor-chain writer: exactly ``new`` is restored to ``old`` (old blob and
mode; a created file is removed with a checked unlink), exactly ``old`` is left, anything
else is a ``conflict`` and is not touched. Directories the operation created are removed
if empty, deepest first. Every target is attempted and failures are aggregated. Never
``git reset``/``checkout``.

A rollback is journaled as its own operation (kind ``rollback``, parent = the promotion)
with one step per target, so a crash mid-rollback is recovered like a promotion: steps
already ``completed`` report ``restored``, the rest are re-classified.

Fault points: ``rollback_before_journal``, ``rollback_after_step``, ``rollback_before_receipt``.
"""

from __future__ import annotations

from typing import Any

from promoter import faults
from promoter.domain.canonical import canonical_bytes, content_id, rfc3339, sha256_hex, utcnow
from promoter.domain.documents import canonical, seal_receipt
from promoter.domain.models import RollbackReceiptV1
from promoter.domain.paths import temp_name
from promoter.engine import ledger
from promoter.engine.locking import repo_lock
from promoter.engine.ownership import Owner
from promoter.engine.services import Services
from promoter.engine.settle import settle_step_temps
from promoter.errors import OperationConflict, OperationUnknown, PromoterError
from promoter.fs.chain import ExpectedState, LeafState, Root
from promoter.store import journal, repo
from promoter.store.tables import OperationRow

ROLLBACK_FROM = {"completed", "needs_reconciliation", "applied_unverified"}


def rollback_id(operation_id: str) -> str:
    return content_id("op", sha256_hex(canonical_bytes({"rollback_of": operation_id})))


def _expected(state: dict[str, Any]) -> ExpectedState:
    return ExpectedState(bool(state["exists"]), state["sha256"], state["mode"])


def _actual(leaf: LeafState | None) -> dict[str, Any]:
    if leaf is None or leaf.kind != "file":
        exists = leaf is not None and leaf.kind != "missing"
        return {"exists": exists, "sha256": None, "mode": None, "bytes": None}
    return {"exists": True, "sha256": leaf.sha256, "mode": leaf.mode, "bytes": leaf.size}


def _load(session: Any, operation_id: str) -> OperationRow:
    row = journal.get_operation(session, operation_id)
    if row is None:
        raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
    return row


def rollback(services: Services, operation_id: str, *, note: str = "") -> dict[str, Any]:
    """Roll back a promotion (taking the repository lock); returns the RollbackReceiptV1."""
    stored = _stored(services, operation_id)
    if stored is not None:
        return stored
    child_id, repository = _prepare(services, operation_id)
    return _run(services, child_id, operation_id, repository, note)


def rollback_held(services: Services, operation_id: str, root: Root, note: str) -> dict[str, Any]:
    """Roll back while the caller already holds the repository lock and the root."""
    stored = _stored(services, operation_id)
    if stored is not None:
        return stored
    child_id, _ = _prepare(services, operation_id)
    return _rollback_locked(services, child_id, operation_id, root, note)


def _stored(services: Services, operation_id: str) -> dict[str, Any] | None:
    stored = (
        services.audit.get("rollback", operation_id) if operation_id.startswith("op_") else None
    )
    return None if stored is None else dict(RollbackReceiptV1.model_validate_json(stored).wire())


def _prepare(services: Services, operation_id: str) -> tuple[str, Any]:
    with services.db.session() as session:
        parent = _load(session, operation_id)
        if parent.kind != "promotion" or parent.status not in ROLLBACK_FROM:
            raise OperationConflict(
                f"operation {operation_id} is {parent.status}; only a completed, "
                "applied_unverified or needs_reconciliation promotion can be rolled back",
                current_status=parent.status,
            )
        repository = services.registry.by_identity(parent.repository_identity)
        child_id = rollback_id(operation_id)
        child = journal.get_operation(session, child_id)
        if child is None:
            owner = Owner.me()
            child = OperationRow(
                operation_id=child_id,
                kind="rollback",
                repository_identity=parent.repository_identity,
                repository_name=parent.repository_name,
                parent_operation_id=operation_id,
                bundle_id=parent.bundle_id,
                status="in_progress",
                attempt=1,
                owner_pid=owner.pid,
                owner_start=owner.start,
                owner_boot=owner.boot,
                created_at=repo.now(),
                updated_at=repo.now(),
            )
            session.add(child)
            session.flush()
            journal.start_attempt(session, child)
    return child_id, repository


def recover_rollback(services: Services, child_id: str) -> str:
    with services.db.session() as session:
        child = _load(session, child_id)
        parent_id = child.parent_operation_id
        repository = services.registry.by_identity(child.repository_identity)
        owner = Owner.me()
        child.owner_pid, child.owner_start, child.owner_boot = owner.pid, owner.start, owner.boot
        journal.set_status(session, child, "in_progress")
    assert parent_id is not None
    return str(_run(services, child_id, parent_id, repository, "recovery")["status"])


def _run(
    services: Services, child_id: str, parent_id: str, repository: Any, note: str
) -> dict[str, Any]:
    lock = repo_lock(services, repository)
    lock.acquire()
    try:
        with Root.open(repository.worktree) as root:
            return _rollback_locked(services, child_id, parent_id, root, note)
    except PromoterError as exc:
        with services.db.session() as session:
            child = _load(session, child_id)
            journal.set_status(session, child, "needs_recovery", code=exc.code, detail=exc.detail)
        raise
    finally:
        lock.release()


def _rollback_locked(
    services: Services, child_id: str, parent_id: str, root: Root, note: str
) -> dict[str, Any]:
    with services.db.session() as session:
        promoted = [
            {"path": s.path, "old": s.old_state, "new": s.new_state}
            for s in reversed(journal.steps(session, parent_id))
        ]
        dirs = [d.path for d in journal.created_dirs(session, parent_id)]
        done = {s.seq: s.status for s in journal.steps(session, child_id)}
        if not done:
            faults.point("rollback_before_journal")
            journal.add_steps(
                session,
                child_id,
                [
                    {"path": p["path"], "operation": "rollback", "old": p["new"], "new": p["old"]}
                    for p in promoted
                ],
            )
            ledger.append(session, child_id, "decision", {"rollback_of": parent_id, "note": note})
            ledger.append(session, child_id, "action", {"targets": [p["path"] for p in promoted]})
    kept: list[dict[str, Any]] = []
    if done:  # a rollback that ran before: settle the temp names it was journaled to use
        kept = settle_step_temps(
            root,
            [
                (str(p["path"]), temp_name(child_id, 1, seq), p["new"], p["old"])
                for seq, p in enumerate(promoted)
            ],
        )[1]
    held = {k["path"] for k in kept}
    targets: list[dict[str, Any]] = []
    for seq, step in enumerate(promoted):
        if step["path"] in held:  # someone else's bytes were found at our temp name
            result, leaf = "conflict", _leaf_or_none(root, str(step["path"]))
        else:
            aside = temp_name(child_id, 1, seq)
            result, leaf = _one(
                services, root, step, aside, kept, already=done.get(seq) == "completed"
            )
        with services.db.session() as session:
            row = journal.steps(session, child_id)[seq]
            row.status = "completed" if result != "conflict" else "failed"
            row.detail = result
        faults.point("rollback_after_step")
        targets.append({"path": step["path"], "result": result, "actual": _actual(leaf)})
    removed = [
        d for d in sorted(set(dirs), key=lambda d: d.count("/"), reverse=True) if _rmdir(root, d)
    ]
    status = (
        "rolled_back" if all(t["result"] != "conflict" for t in targets) else "rollback_partial"
    )
    faults.point("rollback_before_receipt")
    receipt = RollbackReceiptV1.model_validate(
        seal_receipt(
            {
                "schema": "RollbackReceiptV1",
                "operation_id": parent_id,
                "status": status,
                "targets": targets,
                "removed_directories": removed,
                "rolled_back_at": rfc3339(utcnow()),
            }
        )
    )
    with services.db.session() as session:
        child = _load(session, child_id)
        parent = _load(session, parent_id)
        ledger.append(
            session,
            child_id,
            "outcome",
            {"status": status, "receipt_sha256": receipt.receipt_sha256},
        )
        ledger.append(session, parent_id, "outcome", {"status": status, "rollback": child_id})
        if kept:
            child.report = {**(child.report or {}), "kept": kept}
        child.receipt = receipt.wire()
        child.receipt_sha256 = receipt.receipt_sha256
        journal.set_status(session, child, status)
        journal.set_status(session, parent, status, code=None, detail=note or None)
    services.audit.put("rollback", parent_id, canonical(receipt))
    return dict(receipt.wire())


def _rmdir(root: Root, directory: str) -> bool:
    try:
        return root.remove_dir_if_empty(directory)
    except PromoterError:
        return False


def _leaf_or_none(root: Root, path: str) -> LeafState | None:
    try:
        return root.read_state(path)
    except PromoterError:
        return None


def _one(
    services: Services,
    root: Root,
    step: dict[str, Any],
    aside: str,
    kept: list[dict[str, Any]],
    *,
    already: bool,
) -> tuple[str, LeafState | None]:
    """Compare-and-swap one target back to its old state; bytes kept on the way go to ``kept``."""
    old, new = _expected(step["old"]), _expected(step["new"])
    try:
        leaf = root.read_state(step["path"])
    except PromoterError:
        return "conflict", None
    if leaf.matches(old):
        return ("restored" if already else "already_old"), leaf
    if not leaf.matches(new):
        return "conflict", leaf
    try:
        if old.exists:
            assert old.sha256 is not None and old.mode is not None
            data = services.blobs.read(old.sha256)
            with root.open_parent(step["path"], create=True) as parent:
                temp = parent.write_temp(data, old.mode, temp=aside)
                parent.replace(temp, expected_old=new, new=old)
                parent.fsync()
        else:
            with root.open_parent(step["path"], create=False) as parent:
                parent.unlink_checked(new, aside=aside)
                parent.fsync()
        leaf = root.read_state(step["path"])
    except PromoterError as exc:
        kept.extend(exc.context.get("kept", []))
        try:
            leaf = root.read_state(step["path"])
        except PromoterError:
            return "conflict", None
        return ("restored" if leaf.matches(old) else "conflict"), leaf
    return ("restored" if leaf.matches(old) else "conflict"), leaf
