"""Rollback of promoter's own bytes (protocol: recovery#rollback, bundles#rollback-receipt).

Under the repository lock, in reverse step order, each target gets a compare-and-swap
through the descriptor-chain writer, journaled as an operation of its own in one pass of
read, journal, write back, outcome (protocol: recovery#rollback-journal); each target is
reported with its result and reason and the receipt journaled once
(protocol: recovery#rollback-reasons). Temps of up to ``TEMPS_TOGETHER`` consecutive
targets are made durable together. Fault points: ``rollback_before_journal``,
``rollback_after_step``, ``rollback_before_receipt``, ``rollback_after_receipt``.

Not here: whether an operation may run at all (the guard of ``promoter.domain.status``),
the writes (``promoter.fs``), deciding to roll back after a failed check or write
(``promoter.engine.operation.outcome``), and the wording of each target
(``promoter.engine.operation.rollback_report``).
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from sqlalchemy.exc import IntegrityError

from promoter import faults
from promoter.domain.canonical import canonical_bytes, content_id, rfc3339, sha256_hex, utcnow
from promoter.domain.documents import UNSEALED, sealed
from promoter.domain.models import RollbackReceiptV1
from promoter.domain.paths import disk_path, temp_name, wire_all
from promoter.domain.plan import Ordering, RollbackMove, journal_steps, rollback_target
from promoter.domain.records import Operation
from promoter.domain.records import Step as Journaled
from promoter.domain.status import FINAL, OperationKind, OperationStatus, StepStatus
from promoter.engine import fencing, tickets
from promoter.engine.locking import repo_lock
from promoter.engine.operation import fenced
from promoter.engine.operation.driver import Driver, Step, remove_empty_dirs
from promoter.engine.operation.rollback_report import (
    AT_OLD,
    Outcome,
    Reason,
    reason_of,
    rollback_status,
    target_report,
)
from promoter.engine.operation.settle import newly_kept, settle_step_temps
from promoter.engine.operation.stopped import put_back
from promoter.engine.ports import Archive, Placing, Records, Routing, Serving, Writing
from promoter.engine.queries import guarded_here
from promoter.engine.receipts.envelopes import ROLLBACK, make_envelope, receipt_signer
from promoter.engine.receipts.envelopes import record as record_envelope
from promoter.errors import (
    HostFenced,
    NotRecoverable,
    OperationConflict,
    OperationUnknown,
    PromoterError,
)
from promoter.fs.aside import KeptEntry
from promoter.fs.chain import LeafState
from promoter.fs.root import Root
from promoter.fs.temps import Source
from promoter.store import journal, ledger, step_rows

log = logging.getLogger("promoter.rollback")

# the report's list of the promotion's created folders a pass found and may remove,
# journaled with the outcomes: a pass resumed after the removals still names them
REMOVING = "directories_to_remove"

ROLLBACK_FROM = {
    OperationStatus.COMPLETED,
    OperationStatus.NEEDS_RECONCILIATION,
    OperationStatus.APPLIED_UNVERIFIED,
}


_STATUSES: dict[OperationStatus, Literal["rolled_back", "rollback_partial", "rollback_failed"]] = {
    OperationStatus.ROLLED_BACK: "rolled_back",
    OperationStatus.ROLLBACK_PARTIAL: "rollback_partial",
    OperationStatus.ROLLBACK_FAILED: "rollback_failed",
}  # a rollback's final status, as its receipt names it


class RollbackDecision(TypedDict):
    rollback_of: str
    note: str


class RollbackAction(TypedDict):
    targets: list[str]  # the promotion's targets, in the order they are undone


class RollbackOutcome(TypedDict):
    status: str
    receipt_sha256: str


class RolledBackBy(TypedDict):
    """The promotion's own ``outcome`` event: rolled back by ``rollback``."""

    status: str
    rollback: str


@dataclass(frozen=True)
class Recorded:
    """A rollback's receipt as recorded: its JSON document, never re-encoded by the model
    (a receipt an earlier version wrote keeps its members and so its bytes)."""

    document: dict[str, Any]  # the RollbackReceiptV1 document, exactly as recorded

    @property
    def status(self) -> str:
        return str(self.document["status"])


def rollback_id(operation_id: str) -> str:
    return content_id("op", sha256_hex(canonical_bytes({"rollback_of": operation_id})))


def _load(session: Any, operation_id: str) -> Operation:
    row = journal.get_operation(session, operation_id)
    if row is None:
        raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
    return row


def rollback(services: Placing, operation_id: str, *, note: str = "") -> Recorded:
    """Roll back a promotion (its rollback live here while it runs); see ``_rollback_body``."""
    with services.live.running(rollback_id(operation_id)):
        return _rollback_body(services, operation_id, note=note)


def _rollback_body(services: Placing, operation_id: str, *, note: str = "") -> Recorded:
    """Roll back a promotion (taking the repository lock); returns the RollbackReceiptV1."""
    stored = _stored(services, operation_id)
    if stored is not None:
        return stored
    child_id, repository = _prepare(services, operation_id)
    return _run(services, child_id, operation_id, repository, note)


def rollback_held(services: Placing, operation_id: str, root: Root, note: str) -> Recorded:
    """Roll back under the caller's lock and root (live here while it runs)."""
    with services.live.running(rollback_id(operation_id)):
        return _rollback_held_body(services, operation_id, root, note)


def _rollback_held_body(services: Placing, operation_id: str, root: Root, note: str) -> Recorded:
    """Roll back while the caller already holds the repository lock and the root."""
    stored = _stored(services, operation_id)
    if stored is not None:
        return stored
    child_id, _ = _prepare(services, operation_id)
    try:
        return _rollback_locked(services, child_id, operation_id, root, note)
    except Exception as exc:
        put_back(services, child_id, OperationStatus.NEEDS_RECOVERY, exc, "rollback")
        raise


def _stored(services: Records, operation_id: str) -> Recorded | None:
    """The stored receipt exactly as written (checked, never re-encoded by the model),
    once the rollback is final: a receipt whose final statuses were never recorded (the
    database went away between the two) is the rollback's to finish, not an answer."""
    if not operation_id.startswith("op_"):
        return None
    stored = services.audit.checked("rollback", operation_id, RollbackReceiptV1)
    if stored is None:
        return None
    with journal.unit_of_work(services.db) as session:
        child = journal.get_operation(session, rollback_id(operation_id))
        if child is not None and child.status not in FINAL:
            return None
    return Recorded(dict(json.loads(stored)))


def _prepare(services: Routing, operation_id: str) -> tuple[str, Any]:
    """The promotion's rollback, journaled and claimed by this process.

    Made the first time it is asked for. Asked again after it stopped
    (``needs_recovery``, e.g. the repository lock was busy), it is resumed once claimed
    here; in any other status it is refused and nothing runs: a running rollback is
    someone else's, one in ``needs_reconciliation`` moves only by the operator's
    ``reconcile``, a final one never runs again (protocol: recovery#guards).
    """
    with journal.unit_of_work(services.db, fenced=True) as session:  # a fenced host starts nothing
        parent = _load(session, operation_id)
        if parent.kind != OperationKind.PROMOTION or parent.status not in ROLLBACK_FROM:
            raise OperationConflict(
                f"operation {operation_id} is {parent.status}; only a completed, "
                "applied_unverified or needs_reconciliation promotion can be rolled back",
                current_status=parent.status,
            )
        repository = guarded_here(services.registry, services.owner.host, parent)
        child_id = rollback_id(operation_id)
        child = journal.get_operation(session, child_id)
        if child is None:
            tickets.create_operation_row(
                session,
                child_id,
                OperationKind.ROLLBACK,
                OperationStatus.IN_PROGRESS,
                repository=(parent.repository_identity, parent.repository_name),
                owner=services.stamp(),
                parent_operation_id=operation_id,
                bundle_id=parent.bundle_id,
            )
            try:
                session.flush()
            except IntegrityError as exc:  # another request made it first: it is running
                raise _refused(child_id, operation_id, OperationStatus.IN_PROGRESS) from exc
            journal.start_attempt(session, child_id)
            return child_id, repository
        found = journal.claim_from(
            session, child_id, OperationStatus.NEEDS_RECOVERY, services.stamp()
        )
        if found is None:
            return child_id, repository  # asked again after it stopped: resumed
        raise _refused(child_id, operation_id, found)


def _refused(child_id: str, parent_id: str, status: str) -> OperationConflict:
    if status == OperationStatus.NEEDS_RECONCILIATION:
        why, next_step = "only the operator's reconcile moves it", "reconcile"
    elif status in FINAL:
        why, next_step = "a final operation never runs again", None
    else:
        why, next_step = "it is running", "wait"
    return OperationConflict(
        f"rollback {child_id} of {parent_id} is {status}: {why}",
        operation_id=child_id,
        kind=OperationKind.ROLLBACK.value,
        current_status=status,
        next=next_step,
    )


def recover_rollback(
    services: Placing, child_id: str, *, from_status: str = OperationStatus.NEEDS_RECOVERY
) -> str:
    """Finish an interrupted rollback (live here while it runs); see ``_recover_rollback_body``."""
    with services.live.running(child_id):
        return _recover_rollback_body(services, child_id, from_status=from_status)


def _recover_rollback_body(
    services: Placing, child_id: str, *, from_status: str = OperationStatus.NEEDS_RECOVERY
) -> str:
    """Finish an interrupted rollback; only from ``from_status`` (checked, then claimed)."""
    with journal.unit_of_work(services.db) as session:
        child = _load(session, child_id)
        found = (
            child.status
            if child.kind != OperationKind.ROLLBACK
            else journal.claim_from(
                session, child_id, OperationStatus(from_status), services.stamp()
            )
        )
        if found is not None:
            raise NotRecoverable(
                f"rollback {child_id} is {found}, not {from_status}",
                operation_id=child_id,
                kind=child.kind,
                current_status=found,
            )
        parent_id = child.parent_operation_id
        repository = services.registry.by_identity(child.repository_identity)
    assert parent_id is not None
    return _run(services, child_id, parent_id, repository, "recovery").status


def _run(services: Serving, child_id: str, parent_id: str, repository: Any, note: str) -> Recorded:
    lock = repo_lock(services, repository)
    try:
        lock.acquire()
    except PromoterError as exc:
        put_back(services, child_id, OperationStatus.NEEDS_RECOVERY, exc, "rollback")
        raise
    try:
        with Root.open(repository.worktree) as root:
            return _rollback_locked(services, child_id, parent_id, root, note)
    except Exception as exc:
        put_back(services, child_id, OperationStatus.NEEDS_RECOVERY, exc, "rollback")
        raise
    finally:
        lock.release()


def _rollback_locked(
    services: Serving, child_id: str, parent_id: str, root: Root, note: str
) -> Recorded:
    with journal.attempt(services.db, child_id) as j:
        recorded = j.row.receipt
    if recorded is not None:  # an earlier pass recorded it: publish that one, never another
        return _publish(services, child_id, parent_id, Recorded(dict(recorded)))
    with journal.attempt(services.db, child_id) as j:
        session = j.session
        promoted = list(reversed(step_rows.steps(session, parent_id)))  # the steps undone
        dirs = step_rows.created_dirs(session, parent_id)
        journaled = {s.seq: (s.status, s.detail) for s in j.steps()}
        if not journaled:
            faults.point("rollback_before_journal")
            step_rows.add_steps(
                session,
                child_id,
                journal_steps(
                    child_id,
                    1,
                    [(p.path, "rollback", p.new_state, p.old_state) for p in promoted],
                ),
            )
            decided: RollbackDecision = {"rollback_of": parent_id, "note": note}
            j.event("decision", decided)
            acting: RollbackAction = {"targets": [p.path for p in promoted]}
            j.event("action", acting)
    kept: list[KeptEntry] = []
    if journaled:  # a rollback that ran before: settle the temp names it was journaled to use
        kept = wire_all(
            settle_step_temps(
                root,
                [
                    (disk_path(p.path), temp_name(child_id, 1, seq), p.new_state, p.old_state)
                    for seq, p in enumerate(promoted)
                ],
            )[1]
        )
    held = {k["path"] for k in newly_kept(kept)}
    steps = [_step(services, seq, p, temp_name(child_id, 1, seq)) for seq, p in enumerate(promoted)]
    held_seqs = {seq for seq, p in enumerate(promoted) if p.path in held}
    outcomes, kept_now = _one_pass(services, child_id, root, steps, journaled, held_seqs)
    kept += kept_now
    with journal.attempt(services.db, child_id) as j:
        j.set_steps(
            {
                seq: StepStatus.COMPLETED if reason in AT_OLD else StepStatus.FAILED
                for seq, (reason, _, _) in outcomes.items()
            },
            {seq: reason.value for seq, (reason, _, _) in outcomes.items()},
        )
        report = dict(j.row.report or {})
        earlier = set(report.get(REMOVING, []))  # folders a stopped pass found, to remove
        present = {d for d in dirs if _is_dir(root, d)}
        if earlier | present:
            j.set_report({**report, REMOVING: sorted(earlier | present)})
    targets = [target_report(p.path, *outcomes[seq]) for seq, p in enumerate(promoted)]
    removed_now = remove_empty_dirs(root, dirs, disk=disk_path)
    # what a stopped pass removed after journaling it is gone now: removed by this rollback
    gone = {d for d in earlier - present if not _is_dir(root, d)}
    removed = sorted(set(removed_now) | gone, key=lambda d: (d.count("/"), d), reverse=True)
    status = rollback_status(targets)
    faults.point("rollback_before_receipt")
    receipt, document = sealed(
        RollbackReceiptV1(
            schema_="RollbackReceiptV1",
            receipt_sha256=UNSEALED,
            operation_id=parent_id,
            status=_STATUSES[status],
            targets=targets,
            removed_directories=removed,
            rolled_back_at=rfc3339(utcnow()),
        )
    )
    with journal.unit_of_work(services.db) as session:  # (1) record the receipt, once
        child = _load(session, child_id)
        if child.receipt is None:
            ended: RollbackOutcome = {"status": status, "receipt_sha256": receipt.receipt_sha256}
            ledger.append(session, child_id, "outcome", ended)
            undone: RolledBackBy = {"status": status, "rollback": child_id}
            ledger.append(session, parent_id, "outcome", undone)
            journal.set_receipt(session, child_id, document, receipt.receipt_sha256)
            report = {**(child.report or {}), "note": note} | ({"kept": kept} if kept else {})
            journal.set_report(session, child_id, report)
            done = Recorded(document)
        else:
            done = Recorded(dict(child.receipt))  # a concurrent pass recorded one first
    return _publish(services, child_id, parent_id, done)


def _one_pass(
    services: Writing,
    child_id: str,
    root: Root,
    steps: list[Step],
    journaled: dict[int, tuple[StepStatus, str | None]],
    held: set[int],
) -> tuple[dict[int, Outcome], list[KeptEntry]]:
    """Every target through one driver (each directory walked to once, for the reads, the
    writes and their syncs): each one's outcome by seq, and the bytes kept (wire form).

    ``held``: the seqs whose temp name held someone else's bytes (conflicts).
    """
    # the host's epoch between groups, and before every other temp, name and step once
    # the host lease may have run out (protocol: promotion#fence-stops-every-write)
    with Driver(
        root,
        Ordering.STEP_BY_STEP,
        group_sync_limit=services.settings.group_sync_limit,
        between_groups=functools.partial(fencing.check, services.db),
        before_temp=functools.partial(fencing.check_unless_leased, services.db, services.host),
    ) as driver:
        outcomes: dict[int, Outcome] = {}
        writes: list[Step] = []
        leaves = driver.read_states([step.path for step in steps])
        for step, leaf in zip(steps, leaves, strict=True):
            restored = _restored(journaled.get(step.seq))
            found = _classify(step, leaf, held=step.seq in held, restored=restored)
            if found is None:
                writes.append(step)
            else:
                outcomes[step.seq] = found
        if writes:  # the targets about to be written back, journaled before the first is
            with journal.attempt(services.db, child_id) as j:
                intent = RollbackMove.WRITE_OLD.value
                j.set_steps(
                    {s.seq: StepStatus.PENDING for s in writes}, {s.seq: intent for s in writes}
                )
        try:
            _write_back(driver, writes, outcomes)
        except HostFenced as exc:  # its own temps removed, said in the answer as a promotion's
            done = sum(1 for step in writes if step.seq in outcomes)
            raise fenced.stand_down(
                log,
                child_id,
                driver,
                exc,
                doing="rolling back",
                done=f"rolled back {done} of its targets",
            ) from None
        _sync(driver, steps, writes, outcomes)
    return outcomes, wire_all(driver.kept)


def _write_back(driver: Driver, writes: list[Step], outcomes: dict[int, Outcome]) -> None:
    """Each of ``writes`` written back in order (``Driver.write_grouped``: their temps
    staged in groups), its outcome put in ``outcomes``."""

    def each(step: Step) -> None:
        outcomes[step.seq] = _write(driver, step)
        faults.point("rollback_after_step")

    driver.write_grouped(writes, each)


def _sync(
    driver: Driver, steps: list[Step], writes: list[Step], outcomes: dict[int, Outcome]
) -> None:
    """Every directory of a restored target synced once: those written now, and those an
    earlier pass restored (its sync may never have run, or may have failed); a failure
    is raised, before any outcome is journaled."""
    written = {step.seq for step in writes}
    earlier = [
        step
        for step in steps
        if step.seq not in written and outcomes[step.seq][0] is Reason.RESTORED
    ]
    held_again = [step for step in earlier if driver.hold(step)]
    if writes or held_again:
        driver.sync_touched()


def _publish(services: Serving, child_id: str, parent_id: str, recorded: Recorded) -> Recorded:
    """(2) the recorded receipt's bytes into the audit store, (3) then the final statuses
    and the receipt's envelope."""
    status = OperationStatus(RollbackReceiptV1.model_validate(recorded.document).status)
    data = canonical_bytes(recorded.document)
    services.audit.put("rollback", parent_id, data)
    faults.point("rollback_after_receipt")
    # the envelope, made by this host now that the receipt exists, with the final statuses
    sealed = make_envelope(receipt_signer(services), ROLLBACK, parent_id, data)
    with journal.unit_of_work(services.db) as session:
        record_envelope(session, sealed)
        child = _load(session, child_id)
        parent = _load(session, parent_id)
        note = str((child.report or {}).get("note") or "") or None
        journal.set_status(session, child.operation_id, status)
        if parent.status != status:
            journal.set_status(session, parent.operation_id, status, code=None, detail=note)
    return recorded


def _is_dir(root: Root, directory: str) -> bool:
    """Whether the promotion's created directory (wire form) is a directory now; one that
    cannot be read safely is not counted as one."""
    try:
        return root.read_state(disk_path(directory)).kind == "directory"
    except PromoterError:
        return False


def _step(services: Archive, seq: int, promoted: Journaled, aside: str) -> Step:
    """Rollback step ``seq``: the promotion's step from its new state back to its old one,
    the old bytes streamed from the blob store (checked against their sha256)."""
    old, new = promoted.old, promoted.new
    sha256 = old.sha256

    def data() -> Source:
        assert sha256 is not None
        return services.blobs.stream(sha256)

    path = disk_path(promoted.path)  # journaled in wire form; the file system's name
    return Step.between(seq, path, new, old, aside, data if old.exists else None)


def _restored(journaled: tuple[StepStatus, str | None] | None) -> bool:
    """Whether the journal says an earlier pass restored this target, or journaled it as
    about to be written back (``write_old``): then a target at its old state was restored
    by this rollback, not found old."""
    if journaled is None:
        return False
    status, detail = journaled
    if status == StepStatus.COMPLETED:
        return detail != Reason.ALREADY_OLD.value
    return status == StepStatus.PENDING and detail == RollbackMove.WRITE_OLD.value


def _classify(
    step: Step, leaf: LeafState | PromoterError, *, held: bool, restored: bool
) -> Outcome | None:
    """What one target's read ``leaf`` makes of it: its outcome, or None when it is exactly
    the promotion's new state and is to be written back (``_write``).

    ``step`` goes from the promotion's new state (``step.old``) back to its old state
    (``step.new``); ``held``: someone else's bytes were found at its temp name (a
    conflict); ``restored``: the journal says an earlier pass restored it (``_restored``).
    """
    if isinstance(leaf, PromoterError):
        return (Reason.CONFLICT, None, None) if held else (reason_of(leaf), None, leaf)
    move = rollback_target(
        leaf.matches(step.new), leaf.matches(step.old), held=held, completed=restored
    )
    if move is RollbackMove.WRITE_OLD:
        return None
    return Reason(move.value), leaf, None


def _write(driver: Driver, step: Step) -> Outcome:
    """Compare-and-swap one target back to its old state at the step's journaled temp name
    (``Driver.put``), read back: (reason, read-back, error). Its directory is synced later,
    once for the pass; bytes kept go to ``driver.kept``."""
    at_old, at_new = step.new, step.old
    try:
        driver.put(step)
        leaf = driver.read_state(step.path)
    except (PromoterError, OSError) as exc:
        try:
            leaf = driver.read_state(step.path)
        except PromoterError:
            return reason_of(exc), None, exc
        if leaf.matches(at_old):
            return Reason.RESTORED, leaf, None
        if leaf.matches(at_new):  # nothing changed: the write itself failed
            return reason_of(exc), leaf, exc
        return Reason.CONFLICT, leaf, exc
    return (Reason.RESTORED if leaf.matches(at_old) else Reason.CONFLICT), leaf, None
