"""Chained runs: a grant that continues from a completed promotion (``base_operation``).

A grant may name ``base_operation``: a ``completed`` promotion into the same repository
whose grant had the same branch, base commit and base tree. That operation may itself be
chained; ``chain_states`` walks the chain back to its first link and merges, path by
path, what each link's promotion receipt read back (later links win), as the ledger's
row records it (protocol: storage#receipt-in-outcome-commit; the audit file is only its copy). Those
states are the chained grant's implicit preconditions for the paths the chain touched; every other
path keeps the base tree's. ``check_chain`` refuses (``VerificationFailed``, or
``GrantInvalid`` at registration) a base that is unknown, not a promotion, not
``completed`` (a rolled-back one is ``rolled_back``), of another repository or another
HEAD, or whose receipt and bundle disagree.

The states carry the bytes and blob references of the bundles that wrote them, so an
executor can build its next bundle against them (``GET /v1/grants/{id}/base``); the
receipt's read-back decides ``exists``/``sha256``/``mode``.

Deliberately not here: the worktree. Whether it still reads as the chain's targets is
the ordinary read-back under the lock (``promoter.engine.operation.preconditions``): drift.
"""

from __future__ import annotations

from promoter.domain.models import FileState, GrantV1, PatchBundleV1
from promoter.domain.path_state import StateWire
from promoter.domain.status import OperationKind, OperationStatus
from promoter.engine.ports import Archive, Records
from promoter.errors import GrantInvalid, PromoterError, VerificationFailed
from promoter.store import journal

__all__ = ["MAX_CHAIN", "chain_states", "check_chain", "implicit_states"]

MAX_CHAIN = 1000  # links walked before the chain is refused as too long


def _grant(services: Archive, grant_id: str) -> GrantV1:
    grant = services.audit.load("grant", grant_id, GrantV1)
    if grant is None:
        raise VerificationFailed(f"the base operation's grant {grant_id!r} is not on record")
    return grant


def _link(
    services: Records, grant: GrantV1, operation_id: str
) -> tuple[GrantV1, dict[str, FileState]]:
    """One link: the base's grant and the states its promotion left, checked."""
    with journal.unit_of_work(services.db) as session:
        row = journal.get_operation(session, operation_id)
        if row is None:
            raise VerificationFailed(
                f"the base operation {operation_id} is unknown", base_operation=operation_id
            )
        kind, status, identity = row.kind, row.status, row.repository_identity
        grant_id, bundle_id, recorded = row.grant_id, row.bundle_id, row.receipt
    if kind != OperationKind.PROMOTION or status != OperationStatus.COMPLETED:
        raise VerificationFailed(
            f"the base operation {operation_id} is a {kind} that is {status}, "
            "not a completed promotion",
            base_operation=operation_id,
            base_status=status,
        )
    if identity != grant.repository_identity or grant_id is None or bundle_id is None:
        raise VerificationFailed(
            f"the base operation {operation_id} promoted into another repository",
            base_operation=operation_id,
        )
    base_grant = _grant(services, grant_id)
    same_head = (base_grant.branch, base_grant.base_commit, base_grant.base_tree) == (
        grant.branch,
        grant.base_commit,
        grant.base_tree,
    )
    if not same_head:
        raise VerificationFailed(
            f"the base operation {operation_id} was promoted at another HEAD "
            f"({base_grant.base_commit[:12]} on {base_grant.branch})",
            base_operation=operation_id,
        )
    base_bundle = services.audit.load("bundle", bundle_id, PatchBundleV1)
    if recorded is None or base_bundle is None:
        raise VerificationFailed(f"the base operation {operation_id} has no stored receipt")
    targets = {t["path"]: t for t in recorded["targets"]}  # the row's receipt, the record
    states: dict[str, FileState] = {}
    for change in base_bundle.changes:
        target = targets.get(change.path)
        read = None if target is None else (target["exists"], target["sha256"], target["mode"])
        if read != (change.new.exists, change.new.sha256, change.new.mode):
            raise VerificationFailed(
                f"the base operation {operation_id}'s receipt and bundle disagree "
                f"at {change.path!r}",
                base_operation=operation_id,
            )
        states[change.path] = change.new
    return base_grant, states


def chain_states(services: Records, grant: GrantV1) -> dict[str, FileState]:
    """Per path the state the grant's chain of base operations left ({} when unchained)."""
    links: list[dict[str, FileState]] = []
    current, seen = grant, set[str]()
    while current.base_operation is not None:
        operation_id = current.base_operation
        if operation_id in seen or len(links) >= MAX_CHAIN:
            raise VerificationFailed(
                f"the chain of base operations is cyclic or longer than {MAX_CHAIN} links"
            )
        seen.add(operation_id)
        current, states = _link(services, current, operation_id)
        links.append(states)
    merged: dict[str, FileState] = {}
    for states in reversed(links):  # the first link first; later links win
        merged.update(states)
    return merged


def implicit_states(services: Records, grant: GrantV1) -> dict[str, StateWire]:
    """What verification compares old states against for the chain's paths."""
    return {
        path: {"exists": s.exists, "sha256": s.sha256, "mode": s.mode}
        for path, s in chain_states(services, grant).items()
    }


def check_chain(services: Records, grant: GrantV1) -> None:
    """Raise unless the grant's base operation (if any) is a valid base for it."""
    if grant.base_operation is None:
        return
    try:
        chain_states(services, grant)
    except PromoterError as exc:
        raise GrantInvalid(exc.detail, **exc.context) from exc
