"""Fencing a dead host and handing its operations over (protocol: hosts#fencing).

Every daemon registers its host in the ledger at start (``register``) and keeps the
epoch it read: from then on every transaction of an operation's unit of work, and every
write path before its first worktree write and its first replace (``check``), reads the
host's row again holding the host's lock shared (``promoter.store.hosts``) and goes on
only while the host is ``active`` at that epoch; else it raises ``host_fenced`` and the
caller writes nothing (the operation is left as it is, for the host it was handed to).
A daemon that starts while its host is fenced stays fenced for its whole life: it
serves reads and writes nothing until an operator admits the host again (``admit``) and
it is restarted.

``fence`` (an operator's action) is allowed only once the host lease and every owner
lease of that host's unfinished operations have run out (else ``host_live``); it raises
the host's epoch, journals who, when and to which host (``host_fences``), and hands each
unfinished operation (``in_progress``, ``applied_unverified``, ``needs_recovery``) to
the named daemon host as ``needs_recovery``, with no owner process, so that host's
daemon recovers it by the usual table (protocol: recovery#recovery). The named host must be
registered, active, another host, and configured for the repository of every operation handed to it
(``handover_refused``): the host itself or a fenced one is refused before the leases are
looked at (a handover that can never happen is not ``host_live``), the repositories once
they ran out; it must reach the same worktree and state directory (a
replacement on the same machine or a shared disk): nothing here can check that.

Deliberately not here: the rows (``promoter.store.hosts``), recovery itself
(``promoter.engine.operation.recover``), the heartbeat (``promoter.engine.ownership``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from promoter.domain.canonical import parse_rfc3339, utcnow
from promoter.domain.status import OperationStatus
from promoter.domain.views import Fenced, HostEntry, HostFence
from promoter.engine.host_state import HostState, lease_clock
from promoter.engine.ownership import lease_expired, lease_until
from promoter.engine.ports import Guarding, Journaling, Ownership, Routing
from promoter.errors import (
    HandoverRefused,
    HostFenced,
    HostLive,
    HostUnknown,
    PromoterError,
    StorageError,
    ValidationFailed,
)
from promoter.store import hosts, journal
from promoter.store.db import Database

log = logging.getLogger("promoter.fencing")

HANDED = (
    OperationStatus.IN_PROGRESS,
    OperationStatus.APPLIED_UNVERIFIED,
    OperationStatus.NEEDS_RECOVERY,
)


@dataclass(frozen=True)
class Registration:
    host_id: str
    epoch: int
    fenced: bool  # the host was fenced when this daemon started: it writes nothing


def register(services: Guarding) -> Registration:
    """Register this daemon's host (at epoch 1 on its first start), set the epoch check
    on the database and return what was read."""
    host_id = services.owner.host
    identities = {repository.identity: repository.name for repository in services.registry.all()}
    started = lease_clock()
    until = lease_until(services.settings.owner_lease_seconds)
    try:
        with journal.unit_of_work(services.db) as session:
            row, _ = hosts.register(session, host_id, identities, until)
    except StorageError:  # a twin with the same host id added it first: read it again
        with journal.unit_of_work(services.db) as session:
            row, _ = hosts.register(session, host_id, identities, until)
    registration = Registration(host_id, row.epoch, row.status != hosts.ACTIVE)
    services.host_epoch = registration.epoch
    services.host.registered(registration.epoch)
    services.db.write_guard = guard(registration, services.host)
    if not registration.fenced:
        services.host.lease_renewed(started, services.settings.owner_lease_seconds)
    if registration.fenced:
        services.host.saw_fence(
            row.epoch,
            row.fenced_to,
            f"host {host_id} was fenced at {row.fenced_at} by {row.fenced_by} (epoch "
            f"{row.epoch}); an operator admits it (`promoter hosts admit {host_id}`) and "
            "restarts this daemon",
        )
        log.error(
            "host %s was fenced at %s by %s (epoch %d, operations handed to %s): this daemon "
            "writes nothing until an operator runs `promoter hosts admit %s` and restarts it",
            host_id,
            row.fenced_at,
            row.fenced_by,
            row.epoch,
            row.fenced_to,
            host_id,
        )
    else:
        log.info("host %s registered at epoch %d", host_id, registration.epoch)
    return registration


def guard(
    registration: Registration, state: HostState | None = None
) -> Callable[[Session | Connection], None]:
    """The epoch check for ``Database.write_guard``: raises ``host_fenced`` unless the
    host is active at the registered epoch (the host's lock held shared); a fence seen is
    noted in ``state`` (this daemon's memory of its host) for its whole life."""

    def check(session: Session | Connection) -> None:
        row = hosts.standing(session, registration.host_id)
        if (
            registration.fenced
            or row is None
            or row.status != hosts.ACTIVE
            or row.epoch != registration.epoch
        ):
            to = None if row is None else row.fenced_to
            epoch = None if row is None else row.epoch
            log.error(
                "host %s is fenced (ledger epoch %s, this daemon's %d): it writes nothing; "
                "its operations are %s's",
                registration.host_id,
                epoch,
                registration.epoch,
                to,
            )
            detail = (
                f"host {registration.host_id} was fenced off (epoch {epoch}, this daemon "
                f"registered at {registration.epoch}); it writes nothing"
            )
            if state is not None:
                state.saw_fence(epoch, to, detail)
            raise HostFenced(
                detail,
                host=registration.host_id,
                epoch=epoch,
                registered_epoch=registration.epoch,
                to_host=to,
            )

    return check


def check(db: Database) -> None:
    """The epoch check now, in a read-only transaction of its own (a daemon that
    registered): a plain connection's, no ORM session (``Database.reading``)."""
    if db.write_guard is not None:
        with db.reading() as connection:
            db.write_guard(connection)


def check_unless_leased(db: Database, host: HostState) -> None:
    """The epoch check before one more write of a pass, skipped while the host lease is
    surely held (``HostState.lease_surely_held``: no fence can have landed): a host stopped
    or cut off past its lease asks the ledger before it makes anything more."""
    if not host.lease_surely_held():
        check(db)


def admitted_epoch(db: Database, host_id: str) -> int | None:
    """The epoch the ledger holds ``host_id`` active at, or None while it is fenced, is not
    registered or the database does not answer: what a daemon that saw its host fenced
    reads to tell whether an operator admitted it again (it writes only once restarted)."""
    try:
        with db.reading() as connection:
            found = hosts.standing(connection, host_id)
    except PromoterError:
        return None
    return found.epoch if found is not None and found.status == hosts.ACTIVE else None


def _live(row: hosts.Host) -> bool:
    return row.lease_until is not None and parse_rfc3339(row.lease_until) > utcnow()


def fence(db: Database, host_id: str, to: str, *, by: str) -> Fenced:
    """Fence ``host_id`` off and hand its unfinished operations to ``to``."""
    if not to:
        raise ValidationFailed("name the daemon host that takes over (to)")
    with journal.unit_of_work(db) as session:
        row = hosts.for_update(session, host_id)
        if row is None:
            raise HostUnknown(f"no host {host_id!r} is registered", host=host_id)
        if to == host_id:
            raise HandoverRefused("a host cannot take over its own operations", host=host_id)
        if row.status == hosts.FENCED:
            return _fenced_already(session, row, to, by=by)
        target = hosts.get(session, to)
        if target is None:
            raise HostUnknown(f"no host {to!r} is registered to take over", host=to)
        if target.status != hosts.ACTIVE:
            raise HandoverRefused(f"host {to} is fenced itself", host=host_id, to=to)
        operations = journal.unfinished_of_host(session, host_id, HANDED)
        live = [o.operation_id for o in operations if not lease_expired(o)]
        if live or _live(row):
            until = (
                f"its host lease runs until {row.lease_until}"
                if _live(row)
                else f"the owner leases of {len(live)} of its operations run"
            )
            raise HostLive(
                f"host {host_id} still holds a live lease ({until}; a running daemon renews "
                "it every third of owner_lease_seconds): fence it once it has run out, "
                "`promoter hosts list` shows it",
                host=host_id,
                host_lease_until=row.lease_until,
                live_operations=live,
            )
        missing = sorted({o.repository_identity for o in operations} - set(target.repositories))
        if missing:
            raise HandoverRefused(
                f"host {to} is not configured for the repositories of {host_id}'s operations",
                host=host_id,
                to=to,
                repositories=missing,
            )
        ids = [o.operation_id for o in operations]
        epoch, at = hosts.fence(session, host_id, to=to, by=by, operations=ids)
        detail = f"host {host_id} was fenced off by {by} at {at} (epoch {epoch}); handed to {to}"
        for operation_id in ids:
            journal.hand_over(session, operation_id, to, detail)
    log.warning(
        "host %s fenced by %s (epoch %d): %d operations handed to %s",
        host_id,
        by,
        epoch,
        len(ids),
        to,
    )
    return Fenced.model_construct(
        host=host_id, epoch=epoch, to=to, fenced_by=by, fenced_at=at, operations=ids, already=False
    )


def _fenced_already(session: Session, row: hosts.Host, to: str, *, by: str) -> Fenced:
    """A fence of a host that is fenced already: the fence on record, nothing changed
    (the same handover asked again, say by a fence whose answer timed out), or
    ``handover_refused`` for another host (the operations are the first one's now)."""
    if row.fenced_to != to:
        raise HandoverRefused(
            f"host {row.host_id} is fenced already (epoch {row.epoch}, by {row.fenced_by} at "
            f"{row.fenced_at}) and its operations were handed to {row.fenced_to}; nothing "
            f"changed: to move them, fence {row.fenced_to} once it is dead",
            host=row.host_id,
            to=to,
            fenced_to=row.fenced_to,
            epoch=row.epoch,
        )
    recorded = hosts.fences(session, row.host_id)
    operations = list(recorded[-1]["operations"]) if recorded else []
    log.info(
        "host %s is fenced already (epoch %d, handed to %s); the fence %s asked again "
        "changed nothing",
        row.host_id,
        row.epoch,
        row.fenced_to,
        by,
    )
    return Fenced.model_construct(
        host=row.host_id,
        epoch=row.epoch,
        to=to,
        fenced_by=row.fenced_by or by,
        fenced_at=row.fenced_at or "",
        operations=operations,
        already=True,
    )


def admit(services: Journaling, host_id: str) -> HostEntry:
    """Make a fenced host active again at its raised epoch (its daemon is restarted)."""
    with journal.unit_of_work(services.db) as session:
        row = hosts.for_update(session, host_id)
        if row is None:
            raise HostUnknown(f"no host {host_id!r} is registered", host=host_id)
        return _entry(session, services, hosts.admit(session, host_id))


def publish_address(services: Journaling, address: str) -> None:
    """Publish the base URL this daemon serves on into its host's row; a database that
    does not answer is logged (the daemon serves; its address is published at its next
    start)."""
    try:
        with journal.unit_of_work(services.db) as session:
            hosts.publish_address(session, services.owner.host, address)
    except PromoterError as exc:
        log.warning(
            "host %s: its address %s is not published: %s", services.owner.host, address, exc.detail
        )


def list_hosts(services: Journaling) -> list[HostEntry]:
    """Every host of the ledger with its epoch, status, lease, fences and the address its
    daemon published (this host's: the one it serves on, until it published it)."""
    with journal.unit_of_work(services.db) as session:
        return [_entry(session, services, row) for row in hosts.all_hosts(session)]


def this_host_only(services: Routing) -> HostEntry:
    """This host as this daemon last saw it, without the database (an outage): what the
    ledger would say that memory cannot is ``null`` (the lease, the fences' times)."""
    seen = services.host.view()
    return HostEntry.model_construct(
        host_id=seen["host_id"],
        epoch=seen["epoch"] if seen["epoch"] is not None else 0,
        status=seen["status"],
        repositories=[r.identity for r in services.registry.all()],
        registered_at=None,
        lease_until=None,
        lease_expired=None,
        fenced_at=None,
        fenced_by=None,
        fenced_to=seen["fenced_to"],
        this_host=True,
        address=seen["address"],
        fences=[],
    )


def _entry(session: Session, services: Ownership, row: hosts.Host) -> HostEntry:
    this = row.host_id == services.owner.host
    return HostEntry.model_construct(
        host_id=row.host_id,
        epoch=row.epoch,
        status=row.status,
        repositories=list(row.repositories),
        registered_at=row.registered_at,
        lease_until=row.lease_until,
        lease_expired=not _live(row),
        fenced_at=row.fenced_at,
        fenced_by=row.fenced_by,
        fenced_to=row.fenced_to,
        this_host=this,
        address=row.address or (services.host.address if this else None),
        fences=[HostFence.model_construct(**fence) for fence in hosts.fences(session, row.host_id)],
    )
