"""A run's step states: the vocabulary and the moves allowed.

A step of ``promoter run`` (``promoter.executor.sandbox.Step``) is in one ``RunStatus``;
each member equals the string ``run.json`` has always held, so an old record loads as it
is. A step that handed its bundle to the host takes its operation's status
(``promoter.domain.status.OperationStatus``), so every operation status is a run status
too. The moves are data, like an operation's: ``TRANSITIONS[from]`` is where a step may
go next (``None``: a new step); ``check_move`` is the one check (``state.Run.move``
makes every move through it). ``shown`` is a status as a person reads it (``no changes``,
``approved in part``); ``run.json`` and ``--json`` keep the codes. ``refusal`` says which
errors met between a step's command and its bundle at the host end the step ``refused``
(docs/decisions/a-refused-bundle-ends-its-step-refused.md), ``ending`` which end it
``interrupted`` instead (a refused credential, a file changed while read).

Deliberately not here: what makes a step move (``flow.py``), saving the record
(``state.py``, ``promoter.executor.sandbox``). Pure: no I/O.
"""

from __future__ import annotations

from enum import StrEnum

from promoter.domain.status import OperationStatus
from promoter.errors import ConfigError, PromoterError

__all__ = [
    "FINAL",
    "INTERRUPTING",
    "PROMOTABLE",
    "TRANSITIONS",
    "RunStatus",
    "check_move",
    "ending",
    "refusal",
    "shown",
]


class RunStatus(StrEnum):
    STARTED = "started"  # the grant is registered; the command runs or is to run
    COMMAND_FAILED = "command_failed"
    NO_CHANGES = "no_changes"
    SUBMITTED = "submitted"  # the bundle is at the host, verified
    PREFLIGHT_REFUSED = "preflight_refused"  # a drift; the merge may be offered
    DECLINED = "declined"  # the person said no (or nobody could be asked)
    INTERRUPTED = "interrupted"  # Ctrl-C, or no process runs the step any more
    MERGE_CONFLICT = "merge_conflict"
    MERGE_UNSUPPORTED = "merge_unsupported"
    MERGE_NOT_HELD = "merge_not_held"
    # the operation's statuses, once the bundle went to be promoted
    AWAITING_APPROVAL = "awaiting_approval"
    IN_PROGRESS = "in_progress"
    APPLIED_UNVERIFIED = "applied_unverified"
    NEEDS_RECOVERY = "needs_recovery"
    NEEDS_RECONCILIATION = "needs_reconciliation"
    ABANDONED = "abandoned"
    COMPLETED = "completed"
    REFUSED = "refused"  # also a step whose bundle was refused before it was at the host
    ROLLBACK_FAILED = "rollback_failed"
    ROLLBACK_PARTIAL = "rollback_partial"
    ROLLED_BACK = "rolled_back"
    APPROVED_IN_PART = "approved_in_part"  # refused: an operator promoted a part of it


R = RunStatus
OPERATION = frozenset(RunStatus(s.value) for s in OperationStatus)
MERGES = frozenset({R.MERGE_CONFLICT, R.MERGE_UNSUPPORTED, R.MERGE_NOT_HELD})
# a bundle at the host, not promoted: it may be promoted (--continue RUN), merged or declined
_HELD = frozenset({R.PREFLIGHT_REFUSED, R.DECLINED, R.INTERRUPTED, *MERGES, *OPERATION})
# an operation the host still moves: its status is read again (refresh, --list)
_MOVING = frozenset(
    {R.AWAITING_APPROVAL, R.IN_PROGRESS, R.APPLIED_UNVERIFIED, R.NEEDS_RECOVERY}
    | {R.NEEDS_RECONCILIATION}
)

TRANSITIONS: dict[RunStatus | None, frozenset[RunStatus]] = {
    None: frozenset({R.STARTED}),
    # refused: the builder or the host refused the step's bundle (``refusal``)
    R.STARTED: frozenset({R.COMMAND_FAILED, R.NO_CHANGES, R.SUBMITTED, R.INTERRUPTED, R.REFUSED}),
    R.SUBMITTED: _HELD,
    R.DECLINED: _HELD,
    R.INTERRUPTED: _HELD,  # --continue RUN promotes the bundle it left (if any)
    R.PREFLIGHT_REFUSED: _HELD - {R.INTERRUPTED},
    # the merge conflicted: the rest of the bundle, without the conflicted files (rest.py)
    R.MERGE_CONFLICT: frozenset({R.SUBMITTED}),
    **{status: OPERATION | {R.APPROVED_IN_PART} for status in _MOVING},
    # refused for drift, then merged (``promoter merge``): the merged promotion's status
    R.REFUSED: OPERATION | {R.APPROVED_IN_PART},
    R.COMPLETED: frozenset({R.ROLLED_BACK, R.ROLLBACK_PARTIAL, R.ROLLBACK_FAILED}),
    R.ROLLBACK_PARTIAL: frozenset({R.ROLLED_BACK, R.ROLLBACK_FAILED}),
    R.ROLLBACK_FAILED: frozenset({R.ROLLED_BACK, R.ROLLBACK_PARTIAL}),
}
FINAL = frozenset(status for status in RunStatus if not TRANSITIONS.get(status))
# --continue RUN, no CMD: a preflight refused for the person's save is offered the merge again
PROMOTABLE = frozenset({R.DECLINED, R.INTERRUPTED, R.SUBMITTED, R.PREFLIGHT_REFUSED})


def check_move(current: str | None, wanted: str) -> RunStatus:
    """``wanted`` as a ``RunStatus`` if a step may go there from ``current``.

    Raises ``ConfigError`` for an unknown status or a move the table does not hold;
    staying where it is is always allowed.
    """
    try:
        status = RunStatus(wanted)
        was = None if current is None else RunStatus(current)
    except ValueError as exc:
        raise ConfigError(f"unknown run step status {wanted!r}") from exc
    if status is was:
        return status
    if status not in TRANSITIONS.get(was, frozenset()):
        raise ConfigError(
            f"a run step cannot move from {current} to {wanted}", current=current, status=wanted
        )
    return status


def shown(status: str) -> str:
    """A status (a run step's, or ``--list``'s ``unknown``) in words: ``no changes``,
    ``command failed``, ``approved in part``."""
    return status.replace("_", " ")


# answers in the 4xx family that say nothing of the change: ask again (a lock held, a
# race lost, a fenced host's stand-down, a file still being written) or elsewhere (421:
# another host; 429: later)
_NO_ANSWER = frozenset({"lock_unavailable", "operation_conflict", "host_fenced", "source_changed"})
# answers that end a step ``interrupted`` with their code: the credential refused (401,
# 403: a token revoked or expired), or a file that changed while the builder read it;
# nothing was decided about the change (docs/decisions/a-step-ends-saying-what-happened.md)
INTERRUPTING = frozenset({"unauthenticated", "forbidden", "source_changed"})


def refusal(error: PromoterError) -> bool:
    """Whether ``error``, met after a step's command ended and before its bundle is at
    the host, ends the step ``refused``: a definite answer that the change cannot be
    taken as it is, the builder's code or the host's problem answer about the bundle,
    its grant, lease or quota (a 4xx code but 401, 403, those of ``_NO_ANSWER``, 421 and
    429; and ``quota_exceeded``). Never a crash (``internal``, an unknown code), an outage
    (a 503, ``storage_error``), a daemon not reached (``server_unavailable``) or
    ``interrupted``: such a step stays ``started``, and ``run --list`` says
    ``interrupted``; nor a refused credential (``INTERRUPTING``: see ``ending``)."""
    if error.code == "quota_exceeded":
        return True
    status = error.http_status
    return (
        400 <= status < 500 and status not in (401, 403, 421, 429) and error.code not in _NO_ANSWER
    )


def ending(error: PromoterError) -> RunStatus | None:
    """The status ``error`` ends a step in, still ``started``, between its command's end
    and its bundle at the host: ``refused`` for a refusal, ``interrupted`` for a refused
    credential or a file changed while read (``INTERRUPTING``), None for anything else
    (the step stays ``started``). The step records ``error.code`` with it."""
    if error.code in INTERRUPTING:
        return RunStatus.INTERRUPTED
    return RunStatus.REFUSED if refusal(error) else None
