"""Repository settings an operator changes at run time: ``promoter repos set``.

One setting today: ``approval`` (``none`` or ``required``, protocol: grants#grant-options). The
configuration file gives each repository its starting value; ``set_approval`` records a change in
the ledger (``repository_settings``: one row a change, with who, when, on which host and what
was in force before) and logs it; the newest row is in force on every host of the ledger
from the next promotion request on, whatever the file says. ``approval`` reads it: one
small query a request, none when the file already requires approval (a request is held
either way).

Deliberately not here: the approval gate itself (``promoter.engine.review.approval``),
roles (the route admits the operator only), or changing the configuration file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from promoter.domain.canonical import rfc3339, utcnow
from promoter.engine.ports import Journaling
from promoter.engine.repos import Repository
from promoter.errors import ValidationFailed
from promoter.store import journal
from promoter.store import repo_settings as store
from promoter.store.db import Database

__all__ = ["APPROVAL", "Approval", "approval", "set_approval"]

APPROVAL = "approval"
VALUES = ("none", "required")
log = logging.getLogger("promoter.repos")


@dataclass(frozen=True)
class Approval:
    """A repository's approval setting in force and where it comes from."""

    value: Literal["none", "required"]
    source: Literal["config", "ledger"]
    by: str | None = None  # the credential that set it (ledger only)
    at: str | None = None


def _of(repository: Repository, change: store.SettingChange | None) -> Approval:
    if change is None or change.value not in VALUES:
        return Approval(repository.config.approval, "config")
    value: Literal["none", "required"] = "required" if change.value == "required" else "none"
    return Approval(value, "ledger", change.by_name, change.at)


def approval(db: Database, repository: Repository) -> Approval:
    """The approval setting in force for ``repository`` now."""
    return _of(repository, store.newest_now(db, repository.identity, APPROVAL))


def requires_approval(db: Database, repository: Repository) -> bool:
    """Whether promotions into ``repository`` wait for a decision (the file or the ledger)."""
    return approval(db, repository).value == "required"


def set_approval(
    services: Journaling, repository: Repository, value: str, *, role: str, name: str
) -> Approval:
    """Record ``value`` as ``repository``'s approval setting; returns the one in force."""
    if value not in VALUES:
        raise ValidationFailed(
            f"approval must be one of {', '.join(VALUES)}, not {value!r}", value=value
        )
    with journal.unit_of_work(services.db, fenced=True) as session:  # a fenced host changes nothing
        before = _of(repository, store.newest(session, repository.identity, APPROVAL))
        change = store.SettingChange(
            repository_identity=repository.identity,
            repository_name=repository.name,
            setting=APPROVAL,
            value=value,
            previous=before.value,
            by_role=role,
            by_name=name,
            host_id=services.owner.host,
            at=rfc3339(utcnow()),
        )
        store.add(session, change)
        now = _of(repository, change)
    fields = {
        "repository": repository.name,
        "setting": APPROVAL,
        "value": value,
        "previous": before.value,
        "by": name,
    }
    log.info(
        f"repository {repository.name}: approval {value} (was {before.value}, set by {name})",
        extra={"fields": fields},  # the structured fields of promoter.api.logs
    )
    return now
