"""Who owns a running operation: host, boot, process, and an owner lease with a heartbeat.

Every operation a daemon starts or claims records its owner: the host id (configured as
``host_id``, by default derived from the machine id), the boot id, the process id and
start time, and ``owner_lease_until``, renewed by the daemon's heartbeat while the
operation runs. The rules (protocol: recovery#recovery, for many hosts sharing one ledger):

- a daemon only ever recovers operations of its own host whose repository it is
  configured for; an operation owned by another host is never claimed, whatever its
  lease says (the worktree is on that host);
- on its own host an operation is orphaned when its owner process is provably gone
  (another boot, a dead pid, or a pid reused by a younger process): a dead owner cannot
  renew its lease, so waiting for the expiry adds nothing; a live owner whose lease ran
  out (a hung daemon) is not taken over, since two writers under one lock id is worse
  than a wait. The lease tells operators and the other hosts whether an owner is live
  (``owner.lease_expired`` in the operation view). Daemons that share a machine id but
  not a process namespace (containers) must be given distinct ``host_id``s.

Deliberately not here: what recovery does (``promoter.engine.operation.recover``) and the guard on
statuses (``promoter.domain.status``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from promoter.domain.canonical import parse_rfc3339, rfc3339, utcnow
from promoter.domain.records import Operation
from promoter.domain.status import RUNNING
from promoter.domain.views import OwnerView
from promoter.engine.host_state import HostState, lease_clock
from promoter.errors import DatabaseBusy, DatabaseUnavailable, PromoterError
from promoter.store import hosts, journal

log = logging.getLogger("promoter.ownership")

_MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def machine_host_id() -> str:
    """``host-`` and 16 hex of sha256(machine id) (the host name where there is none)."""
    for name in _MACHINE_ID_FILES:
        try:
            machine = Path(name).read_text().strip()
        except OSError:
            continue
        if machine:
            return "host-" + hashlib.sha256(machine.encode()).hexdigest()[:16]
    return "host-" + hashlib.sha256(socket.gethostname().encode()).hexdigest()[:16]


def process_start(pid: int) -> str | None:
    """The start time (clock ticks since boot) of ``pid``, or None if it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: split after the last ')'
    fields = raw.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


@dataclass(frozen=True)
class Owner:
    pid: int
    start: str
    boot: str
    host: str = ""

    @classmethod
    def me(cls, host: str = "") -> Owner:
        pid = os.getpid()
        return cls(pid, process_start(pid) or "unknown", boot_id(), host)

    @classmethod
    def of(cls, row: Operation) -> Owner:
        return cls(
            row.owner_pid or -1, row.owner_start or "", row.owner_boot or "", row.owner_host or ""
        )

    def alive(self) -> bool:
        """Whether the owner process runs now (meaningful on the owner's own host only)."""
        if self.boot != boot_id():
            return False
        return process_start(self.pid) == self.start

    def stamp(self, lease_seconds: float) -> tuple[int, str, str, str, str]:
        """This owner as the journal records it, with an owner lease of ``lease_seconds``."""
        return self.pid, self.start, self.boot, self.host, lease_until(lease_seconds)


def lease_until(lease_seconds: float) -> str:
    return rfc3339(utcnow() + timedelta(seconds=lease_seconds))


def lease_expired(row: Operation) -> bool:
    """Whether the row's owner lease has run out (a row without one has none to run)."""
    return row.owner_lease_until is None or parse_rfc3339(row.owner_lease_until) <= utcnow()


def orphaned(row: Operation, me: Owner) -> bool:
    """Whether this host may take over ``row``: its own, and its owner process gone."""
    owner = Owner.of(row)
    if (owner.host or me.host) != me.host:
        return False  # another host's operation (a row from before host ids: this host's)
    return not owner.alive()


def owner_view(row: Operation) -> OwnerView:
    return OwnerView.model_construct(
        host=row.owner_host,
        pid=row.owner_pid,
        boot=row.owner_boot,
        lease_until=row.owner_lease_until,
        lease_expired=lease_expired(row),
    )


class Heartbeat:
    """Renews the owner lease of every running operation this process owns and runs.

    Every ``lease_seconds / 3`` a single ``UPDATE`` moves ``owner_lease_until`` forward
    for this owner's running operations that a thread of this process still runs
    (``live()``, ``promoter.engine.liveness``): an operation whose attempt died
    is not kept looking healthy. A beat that fails is logged and retried at the next one;
    the lease then simply runs out if the daemon cannot reach its database.

    With the ``epoch`` its host registered at (``promoter.engine.fencing``), each beat
    first moves the host lease forward, in the same transaction, only while the host is
    active at that epoch; once it is not (the host was fenced off) the heartbeat renews
    nothing and stops.

    With ``state`` (this daemon's memory of its host, ``promoter.engine.host_state``) each
    beat says whether the database answered and notes a fence; a failed beat is one log
    line (its code and detail, no traceback): an outage of minutes logs one line a beat.
    """

    def __init__(
        self,
        database: Any,
        me: Owner,
        lease_seconds: float,
        live: Callable[[], Collection[str]] | None = None,
        *,
        epoch: int | None = None,
        state: HostState | None = None,
    ) -> None:
        self._db, self._me, self._seconds, self._live = database, me, lease_seconds, live
        self._epoch = epoch
        self._state = state
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="promoter-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def beat(self) -> int:
        started = lease_clock()
        with journal.unit_of_work(self._db) as session:
            if self._epoch is not None and not hosts.beat(
                session, self._me.host, self._epoch, lease_until(self._seconds)
            ):
                log.error("host %s is fenced: the heartbeat renews no lease", self._me.host)
                if self._state is not None:
                    row = hosts.current(session, self._me.host)
                    self._state.saw_fence(
                        None if row is None else row.epoch,
                        None if row is None else row.fenced_to,
                        f"host {self._me.host} was fenced off (this daemon registered at "
                        f"epoch {self._epoch}); it writes nothing",
                    )
                self._stop.set()
                return 0
            only = None if self._live is None else self._live()
            renewed = journal.renew_owner_leases(
                session, self._me.stamp(self._seconds), RUNNING, only
            )
        if self._state is not None:
            self._state.database_answered(rfc3339(utcnow()))
            if self._epoch is not None:  # the host lease moved forward with the owner leases
                self._state.lease_renewed(started, self._seconds)
        return renewed

    def _run(self) -> None:
        while not self._stop.wait(self._seconds / 3):
            try:
                self.beat()
            except Exception as exc:  # the next beat tries again
                self.failed(exc)

    def failed(self, exc: Exception) -> None:
        """One line for a failed beat (what failed, never a traceback); an outage noted."""
        if isinstance(exc, PromoterError):
            why = f"{exc.code}: {exc.detail}"
        else:
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if self._state is not None and isinstance(exc, DatabaseUnavailable | DatabaseBusy):
            self._state.database_failed(why)
        log.warning(
            "owner lease heartbeat failed (%s); the next beat in %.0f s tries again",
            why,
            self._seconds / 3,
        )

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
