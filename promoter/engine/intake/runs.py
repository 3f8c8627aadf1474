"""A run's grant, lease and executor token set up together (``POST /v1/runs``).

What an orchestrator otherwise does in three requests (register the grant, set its
workflow stage's lease, mint the run's executor token) is done here with the same checks
(``check_grant``, ``compare_and_set_lease``, the token's time-to-live bound) and one
database transaction: the grant's ledger row, the lease and the token's row commit
together or not at all. The three parts must describe one run: the lease is the grant's
workflow stage's and names the grant's executor run, and the token is that run's.

The grant's canonical bytes go to the audit store after every database statement ran and
before the commit, so a refusal of any part writes nothing. A commit that fails after
that write leaves the document without its ledger row, the state a crash between the two
writes of ``register_grant`` leaves; registering the same grant again completes it.

This module does not decide what a grant or a lease may say (``grants``), nor who may
ask (the API's roles), nor anything about promotions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from promoter.domain.models import GrantV1, LeaseV1
from promoter.engine.intake.grants import (
    LEASE_LOCK,
    check_grant,
    compare_and_set_lease,
    retrying,
    store_grant_document,
)
from promoter.engine.ports import Configured, Operating
from promoter.errors import ValidationFailed
from promoter.store import repo
from promoter.store.credentials import add_executor_token


@dataclass(frozen=True)
class OpenedRun:
    grant: GrantV1  # sealed
    grant_created: bool
    lease: LeaseV1
    lease_changed: bool
    token: str
    token_expires_at: str


def check_token_ttl(services: Configured, ttl_seconds: int) -> None:
    """The bound of an executor token's time-to-live (the daemon's setting)."""
    max_ttl = services.settings.executor_token_max_ttl
    if ttl_seconds > max_ttl:
        raise ValidationFailed(f"ttl_seconds must be an integer from 1 to {max_ttl}")


def open_run(
    services: Operating,
    grant_data: Any,
    workflow_id: str,
    stage: str,
    lease: LeaseV1,
    token_ttl_seconds: int,
) -> OpenedRun:
    """Register the grant, set the lease and mint the token, or refuse and change nothing
    (a fenced host refuses: ``host_fenced``)."""
    services.host.refuse_writes()
    check_token_ttl(services, token_ttl_seconds)
    checked = check_grant(services, grant_data)
    grant = checked.grant
    if (workflow_id, stage) != (grant.workflow_id, grant.stage):
        raise ValidationFailed(
            f"the lease is for {workflow_id}/{stage}, the grant for "
            f"{grant.workflow_id}/{grant.stage}",
            lease_workflow_id=workflow_id,
            lease_stage=stage,
        )
    if lease.run_id != grant.executor_run_id:
        raise ValidationFailed(
            f"the lease names run {lease.run_id}, the grant run {grant.executor_run_id}",
            lease_run_id=lease.run_id,
        )
    written: list[bool] = []

    def together(session: Session) -> tuple[bool, str, str]:
        repo.add_grant(session, grant)
        changed = compare_and_set_lease(session, workflow_id, stage, lease)
        token, expires_at = add_executor_token(session, grant.executor_run_id, token_ttl_seconds)
        session.flush()  # the database's own refusals (a unique key) before the document
        written.append(store_grant_document(services, checked))
        return changed, token, expires_at

    with LEASE_LOCK:
        changed, token, expires_at = retrying(services.db, together)
    return OpenedRun(
        grant=grant,
        grant_created=any(written) and not checked.recorded,
        lease=lease,
        lease_changed=changed,
        token=token,
        token_expires_at=expires_at,
    )
