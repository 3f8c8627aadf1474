"""A promotion's journal rehearsed when the daemon starts, and rolled back.

SQLAlchemy compiles each distinct statement once per engine and keeps it in the engine's
statement cache. Without a rehearsal, a daemon's first promotion compiles the twenty-odd
statements of its journal while the user waits (about 6 ms on a fast processor, 7 on a
slow one: a twelfth of a 115-change promotion). ``rehearse`` makes the store calls of a
completed promotion (``requests.request_promotion``, ``promote._journal``,
``outcome.complete``), grouped as their transactions are, for two throw-away operations
(one change, and two: a single row and a batch compile apart), inside one database
transaction that is always rolled back. Where a real promotion commits, the rehearsal
does what a commit does first (the feed's rows, ``feed.enter``) and then forgets the
session's rows, as a new session would.

Deliberately not here, and never done: a commit (``Database.rolled_back`` rolls back
whatever happens); a row it did not insert being written or locked (its ids are random,
and the lease and bundle it names do not exist, so ``FOR UPDATE`` and the bundle's
``UPDATE`` match nothing); the worktree, the blob store and the audit store; the
statements of refusals, rollbacks and restores (rarer: they compile on first use). A
rehearsal that fails, a lock held elsewhere for longer than ``LOCK_WAIT_MS`` included,
is logged, changes nothing and never keeps the daemon from serving: the first promotion
then compiles as before. On
PostgreSQL the rehearsal holds the feed's advisory lock for its few milliseconds, as any
commit that writes the feed does.
"""

from __future__ import annotations

import logging
import secrets

from sqlalchemy.orm import Session

from promoter.domain.plan import journal_steps
from promoter.domain.status import OperationKind, OperationStatus, StepStatus
from promoter.engine.ports import Journaling, Ownership
from promoter.errors import PromoterError
from promoter.store import feed, journal, ledger, repo, step_rows

log = logging.getLogger("promoter.rehearsal")
LOCK_WAIT_MS = 200  # a rehearsal never waits long for another writer's lock
_OLD = {"exists": True, "sha256": "0" * 64, "mode": "100644"}
_NEW = {"exists": True, "sha256": "1" * 64, "mode": "100644"}


def rehearse(services: Journaling) -> bool:
    """Compile a promotion's statements in a transaction that is rolled back; False (and
    a log line) when the rehearsal could not run: nothing is changed either way."""
    try:
        with services.db.rolled_back(LOCK_WAIT_MS) as session:
            for changes in (1, 2):
                _promotion(services, session, changes)
    except PromoterError as exc:
        log.info("statements not compiled ahead (the first promotion will): %s", exc.detail)
        return False
    except Exception:  # an optimization never stops the daemon from serving
        log.warning("the rehearsal failed; nothing of it was kept", exc_info=True)
        return False
    return True


def _commit_point(session: Session) -> None:
    """What a commit does before it commits (the feed's rows), then a new session's
    state: no rows held, none remembered."""
    feed.enter(session)
    session.flush()
    session.expunge_all()
    session.info.clear()


def _promotion(services: Ownership, session: Session, changes: int) -> None:
    token = secrets.token_hex(8)
    operation_id, workflow = f"op_rehearsal_{token}", f"rehearsal-{token}"
    # requests.request_promotion
    journal.read_operation(session, operation_id)
    journal.start_operation(
        session,
        operation_id=operation_id,
        kind=OperationKind.PROMOTION,
        status=OperationStatus.IN_PROGRESS,
        repository=(f"rehearsal:{token}", f"rehearsal-{token}"),
        owner=services.stamp(),
        evidence=(
            f"grt_rehearsal_{token}",
            "2" * 64,
            f"bnd_rehearsal_{token}",
            "3" * 64,
            "4" * 64,
        ),
        fence=1,
    )
    repo.get_lease(session, workflow, "rehearsal")
    _commit_point(session)
    # promote._journal
    repo.get_lease(session, workflow, "rehearsal", lock=True)
    row = journal.read_required(session, operation_id)
    step_rows.delete_steps(session, operation_id)
    session.flush()
    paths = [f"rehearsal/{seq}" for seq in range(changes)]
    step_rows.add_steps(
        session,
        operation_id,
        journal_steps(operation_id, row.attempt, [(p, "modify", _OLD, _NEW) for p in paths]),
    )
    decision = ledger.append(session, operation_id, "decision", {"allowed": True})
    action = ledger.append(session, operation_id, "action", {"target_count": changes})
    journal.write_plan_events(session, row, decision, action)
    step_rows.add_created_dirs(session, operation_id, paths)
    _commit_point(session)
    # outcome.complete: the outcome's read, then the receipt and completed in one commit
    row = journal.read_required(session, operation_id)
    ledger.prepare(session, operation_id, "outcome", {"status": "completed"})
    journal.read_required(session, operation_id)
    step_rows.mark_all_steps(session, operation_id, StepStatus.COMPLETED)
    outcome = ledger.append(session, operation_id, "outcome", {"status": "completed"})
    journal.complete(
        session, row, report={"rehearsal": True}, receipt=(outcome, {"rehearsal": True}, "5" * 64)
    )
    repo.set_bundle_state(session, f"bnd_rehearsal_{token}", "promoted")
    _commit_point(session)
    # what the daemon reads of an attempt it ran: its view
    journal.read_operation(session, operation_id)
    ledger.events(session, operation_id)
    step_rows.steps(session, operation_id)
    step_rows.created_dirs(session, operation_id)
    journal.attempts(session, operation_id)
