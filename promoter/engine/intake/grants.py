"""Grant registration and leases (protocol: grants#grant, grants#lease).

A grant is registered once as its exact canonical bytes after checking it against the
real repository: known repository, base commit present, base tree matching, allowlist
patterns valid, times sane, precondition paths valid. Leases move their fence forward
only. Promotion-time authority checks live in ``promoter.engine.intake.authority``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from promoter import faults
from promoter.domain import allowlist
from promoter.domain.canonical import parse_rfc3339, utcnow
from promoter.domain.documents import canonical, grant_sha256
from promoter.domain.models import GrantV1, LeaseV1
from promoter.domain.parsing import parse_model
from promoter.domain.paths import check_path, check_path_set
from promoter.engine import routing
from promoter.engine.intake.chained import check_chain
from promoter.engine.ports import Archive, Journaling, Provenance
from promoter.errors import (
    GrantConflict,
    GrantInvalid,
    GrantUnknown,
    LeaseConflict,
    LeaseFenceRegression,
    StorageError,
)
from promoter.git.head import commit_tree_at_head
from promoter.store import journal, repo
from promoter.store.db import Database

LEASE_LOCK = threading.Lock()  # one lease compare-and-set at a time in this process


def _check_times(grant: GrantV1) -> None:
    not_before = parse_rfc3339(grant.not_before)
    expires_at = parse_rfc3339(grant.expires_at)
    if expires_at <= not_before:
        raise GrantInvalid("expires_at must be later than not_before")
    if expires_at <= utcnow():
        raise GrantInvalid("the grant has already expired", expires_at=grant.expires_at)


def validate_grant(services: Provenance, grant: GrantV1) -> None:
    for entry in grant.write_allowlist:
        allowlist.check_pattern(entry.pattern)
    paths = [check_path(p.path) for p in grant.target_preconditions]
    check_path_set(paths)
    _check_times(grant)
    # another host's repository: 421 naming it (protocol: hosts#answers-that-route)
    repository = routing.local_repository(services, grant.repository_identity)
    # the usual grant is on HEAD's commit: its tree from HEAD's files, else from git
    tree = commit_tree_at_head(repository.layout, grant.base_commit)
    if tree is None:
        raise GrantInvalid(
            f"base_commit {grant.base_commit} does not exist in {repository.name}",
            base_commit=grant.base_commit,
        )
    if tree != grant.base_tree:
        raise GrantInvalid(
            f"base_tree {grant.base_tree} is not the tree of base_commit (that is {tree})",
            base_tree=grant.base_tree,
            actual_tree=tree,
        )
    check_chain(services, grant)


@dataclass(frozen=True)
class CheckedGrant:
    """A grant that passed every registration check; nothing of it is written yet."""

    grant: GrantV1  # sealed: ``grant_sha256`` set
    stored: bool  # the audit store already holds these exact bytes: nothing to write
    recorded: bool  # the ledger already records this grant (another host registered it)


def check_grant(services: Provenance, data: Any) -> CheckedGrant:
    """Every check ``register_grant`` makes, writing nothing."""
    grant = parse_model(GrantV1, data)
    digest = grant_sha256(grant)
    if grant.grant_sha256 is not None and grant.grant_sha256 != digest:
        raise GrantInvalid("grant_sha256 does not match the grant's content", computed=digest)
    sealed = grant.model_copy(update={"grant_sha256": digest})  # ``sealed_grant``, hashed once
    existing = services.audit.get("grant", grant.grant_id)
    if existing is not None:
        if existing != canonical(sealed):
            raise GrantConflict(f"grant {grant.grant_id} is already registered with other content")
        return CheckedGrant(sealed, stored=True, recorded=True)
    # another host may have registered the id
    recorded = repo.recorded_grant_sha256(services.db, grant.grant_id)
    if recorded is not None and recorded != sealed.grant_sha256:
        raise GrantConflict(f"grant {grant.grant_id} is already registered with other content")
    validate_grant(services, sealed)
    return CheckedGrant(sealed, stored=False, recorded=recorded is not None)


def store_grant_document(services: Archive, checked: CheckedGrant) -> bool:
    """Write the checked grant's canonical bytes to the audit store; True if new."""
    if checked.stored:
        return False
    return services.audit.put(
        "grant", checked.grant.grant_id, canonical(checked.grant), GrantConflict
    )


def register_grant(services: Provenance, data: Any) -> tuple[GrantV1, bool]:
    """Validate and store a grant; returns it sealed and whether it is new (a fenced host
    refuses: ``host_fenced``)."""
    services.host.refuse_writes()
    checked = check_grant(services, data)
    if checked.stored:
        return checked.grant, False
    created = store_grant_document(services, checked)
    retrying(services.db, lambda session: repo.add_grant(session, checked.grant))
    return checked.grant, created and not checked.recorded


def load_grant(services: Provenance, grant_id: str) -> GrantV1:
    """The grant stored here; one the ledger records for a repository another host guards
    is ``owned_by_other_host`` naming that host (protocol: hosts#answers-that-route), else
    ``grant_unknown``."""
    grant = services.audit.load("grant", grant_id, GrantV1) if _safe_name(grant_id) else None
    if grant is None:
        with journal.unit_of_work(services.db) as session:
            identity = repo.grant_repository(session, grant_id)
        if identity is not None:
            routing.refuse_unless_here(services, identity, grant_id=grant_id)
        raise GrantUnknown(f"no grant {grant_id!r} is registered", grant_id=grant_id)
    return grant


def _safe_name(name: str) -> bool:
    return bool(name) and "/" not in name and not name.startswith(".") and "\x00" not in name


def compare_and_set_lease(session: Session, workflow_id: str, stage: str, lease: LeaseV1) -> bool:
    """Set ``lease`` in ``session``'s transaction if its fence moves forward; False when
    it is already so. The caller holds ``LEASE_LOCK`` and commits."""
    # the row stays locked until the commit: daemons sharing the ledger take turns
    current = repo.get_lease(session, workflow_id, stage, lock=True)
    faults.point("lease_compared")
    if current is not None:
        if lease.fence < current.fence:
            raise LeaseFenceRegression(
                f"fence {lease.fence} is lower than the current fence {current.fence}",
                current_fence=current.fence,
            )
        if lease.fence == current.fence:
            if lease == current:
                return False
            asked, held = lease.wire(), current.wire()
            differing = sorted(key for key in asked if asked[key] != held.get(key))
            raise LeaseConflict(
                f"fence {lease.fence} is already set with other fields "
                f"({', '.join(differing)}): the lease of a fence never changes; set the new "
                f"one with a higher fence (--fence {current.fence + 1})",
                current=held,
                differing=differing,
            )
    repo.put_lease(session, workflow_id, stage, lease)
    return True


def set_lease(
    services: Journaling, workflow_id: str, stage: str, data: Any
) -> tuple[LeaseV1, bool]:
    """Set the current lease; fences only move forward. Returns (lease, changed). A fenced
    host refuses (``host_fenced``)."""
    services.host.refuse_writes()
    lease = parse_model(LeaseV1, data)
    with LEASE_LOCK:
        changed = retrying(
            services.db, lambda session: compare_and_set_lease(session, workflow_id, stage, lease)
        )
    return lease, changed


T = TypeVar("T")


def retrying(db: Database, work: Callable[[Session], T], attempts: int = 5) -> T:
    """Run ``work`` in a transaction; again when another daemon inserted the same row first.

    A unique-key race between two daemons sharing the ledger makes the loser's insert
    fail; the next try reads the winner's row and decides on it (equal: nothing to do;
    different: the usual conflict).
    """
    for attempt in range(attempts):
        try:
            with journal.unit_of_work(db) as session:
                return work(session)
        except StorageError as exc:
            if not isinstance(exc.__cause__, IntegrityError) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
