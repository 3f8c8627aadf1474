"""A person's decision on a held promotion: approve (its attempt starts), reject, reopen.

Deliberately not here: what a decision records and checks (``promoter.engine.review.approval``),
who may decide (``promoter.api``).
"""

from __future__ import annotations

from promoter.domain.status import OperationStatus
from promoter.engine.operation.requests import Requested, request_lock
from promoter.engine.operation.runner import runner
from promoter.engine.ports import Journaling, Promoting
from promoter.engine.review import approval, partial
from promoter.engine.review.seen import Seen
from promoter.engine.review.seen import require as require_seen
from promoter.errors import ValidationFailed


def decide(
    services: Promoting,
    operation_id: str,
    verdict: str,
    *,
    note: str,
    by: str,
    role: str,
    claimed_by: str = "",
    selection: partial.Selection | None = None,
    seen: Seen | None = None,
) -> Requested:
    """The operator's decision on a held promotion; an approval starts its attempt.

    ``by`` and ``role`` are the authenticated principal's; ``claimed_by`` a name the
    request carried, journaled apart and deciding nothing. ``selection``: the part an
    approval accepts; then the operation answered is the derived one, which runs.
    ``seen``: what the approval says its person saw beyond the review's first page; an
    approval that does not name a file that page does not show in full is refused
    (``diff_not_seen``, ``promoter.engine.review.seen``) before anything is decided."""
    if verdict not in ("approve", "reject"):
        raise ValidationFailed("the decision must be approve or reject")
    if verdict == "approve":  # outside the lock: it builds a page of the diff
        require_seen(services, operation_id, seen or Seen(), selection)
    with services.live.running(operation_id):  # live until its attempt is submitted
        with request_lock:
            decided = approval.decide(
                services,
                operation_id,
                "approve" if verdict == "approve" else "reject",
                note=note,
                by=by,
                role=role,
                claimed_by=claimed_by,
                selection=selection,
                seen=seen if verdict == "approve" else None,
            )
        derived = decided.derived_operation_id  # live from before its row was committed
        try:
            if decided.ticket is not None:
                runner(services).submit(decided.ticket)
                if derived is not None:
                    return Requested(derived, OperationStatus.IN_PROGRESS, True)
                return Requested(operation_id, decided.status, True)
        finally:
            if derived is not None:
                services.live.leave(derived)
    return Requested(operation_id, decided.status, False)


def reopen(services: Journaling, operation_id: str, *, note: str, by: str, role: str) -> Requested:
    """The operator's reopening of a rejected promotion: held for a decision again."""
    with request_lock:
        decided = approval.reopen(services, operation_id, note=note, by=by, role=role)
    return Requested(operation_id, decided.status, False)
