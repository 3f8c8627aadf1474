"""What this daemon knows of its host and its database without asking the database.

``HostState`` is kept in memory for the daemon's life and fed by whoever learns something:
the host's registration and every epoch check (``promoter.engine.fencing``: fenced, at
which epoch, handed to whom), the heartbeat and the metrics' scrape (the database
answered, or did not). It answers the questions an operator asks during an outage, when
the ledger cannot: ``/metrics`` (database up, outage seconds, fenced, epoch), ``/readyz``
(why not ready), and ``GET /v1/hosts``'s view of this host alone.

A fence is for the daemon's life: once seen, ``fenced`` never goes back (a fenced host is
admitted again only by an operator and a restart, ``fencing.admit``). The database's state
is the last one seen; the outage's seconds run from the first failure seen to the first
success after it (monotonic clock).

The host lease is surely held (``lease_surely_held``) until its last renewal's start plus
its length less the second the ledger's timestamps drop, on ``lease_clock`` (the boot
clock: it runs on while the process is stopped or the machine sleeps). Until then no
fence can land (a fence needs the host lease run out), so a write path may skip the
epoch check; after it, it asks the ledger. The rate of the ledger's wall clock against
this one is the leases' usual assumption.

Deliberately not here: any database access, the checks themselves (``engine.fencing``),
and what to answer (``promoter.api``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TypedDict

from promoter.errors import HostFenced

__all__ = ["HostState", "lease_clock"]

_STAMP_SECONDS = 1.0  # a lease's end is written in whole seconds, cut: up to this early


def lease_clock() -> float:
    """Seconds of the boot clock: it counts a stop (SIGSTOP) and a suspend."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class HostView(TypedDict):
    """``HostState.view``: this host as ``GET /v1/hosts`` lists it."""

    host_id: str
    address: str | None
    epoch: int | None
    registered_epoch: int | None
    status: str
    fenced_to: str | None
    fenced_reason: str | None
    database_up: bool
    database_detail: str | None
    database_seen_at: str | None


@dataclass
class HostState:
    """This host as this daemon last saw it; every method is thread-safe."""

    host_id: str
    address: str | None = None  # the URL this daemon serves on, once it listens
    epoch: int | None = None  # the epoch this daemon registered at
    fenced: bool = False
    ledger_epoch: int | None = None  # the ledger's epoch when the fence was seen
    fenced_to: str | None = None
    fenced_reason: str | None = None
    database_up: bool = True
    database_detail: str | None = None  # the last failure's ``code: detail``
    database_seen_at: str | None = None  # RFC 3339, the last time the database answered
    _down_since: float | None = None
    _outage_total: float = 0.0
    _lease_held_until: float | None = None  # ``lease_clock`` seconds
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def registered(self, epoch: int) -> None:
        with self._lock:
            self.epoch = epoch

    def saw_fence(self, ledger_epoch: int | None, to_host: str | None, reason: str) -> None:
        """The ledger says this host is fenced (at ``ledger_epoch``, handed to ``to_host``);
        the first reason seen stays (it says the most: who fenced and when)."""
        with self._lock:
            self.fenced = True
            self.ledger_epoch = ledger_epoch if ledger_epoch is not None else self.ledger_epoch
            self.fenced_to = to_host or self.fenced_to
            self.fenced_reason = self.fenced_reason or reason

    def lease_renewed(self, started: float, seconds: float) -> None:
        """The host lease was moved ``seconds`` forward by a renewal begun at ``started``
        (``lease_clock``), computed before its end was."""
        until = started + seconds - _STAMP_SECONDS
        with self._lock:
            if self._lease_held_until is None or until > self._lease_held_until:
                self._lease_held_until = until

    def lease_surely_held(self) -> bool:
        """Whether no fence can have landed yet: the host lease renewed last runs on."""
        with self._lock:
            until, fenced = self._lease_held_until, self.fenced
        return not fenced and until is not None and lease_clock() < until

    def refuse_writes(self) -> None:
        """``host_fenced`` once this daemon has seen its host fenced: new grants, leases,
        runs, bundles and blobs are refused, since nothing they lead to could ever be
        promoted here (the host owns no repository any more). From memory."""
        with self._lock:
            if not self.fenced:
                return
            raise HostFenced(
                self.fenced_reason or f"host {self.host_id} was fenced off; it writes nothing",
                host=self.host_id,
                epoch=self.ledger_epoch,
                registered_epoch=self.epoch,
                to_host=self.fenced_to,
            )

    def database_answered(self, at: str) -> None:
        with self._lock:
            self.database_seen_at = at
            if self._down_since is not None:
                self._outage_total += time.monotonic() - self._down_since
                self._down_since = None
            self.database_up = True
            self.database_detail = None

    def database_failed(self, detail: str) -> None:
        with self._lock:
            if self._down_since is None:
                self._down_since = time.monotonic()
            self.database_up = False
            self.database_detail = detail

    def outage_seconds(self) -> float:
        """Seconds the database was seen down, over the daemon's life (the current outage
        included)."""
        with self._lock:
            running = 0.0 if self._down_since is None else time.monotonic() - self._down_since
            return self._outage_total + running

    def view(self) -> HostView:
        """This host as this daemon sees it (no database read), for ``GET /v1/hosts``."""
        with self._lock:
            return {
                "host_id": self.host_id,
                "address": self.address,
                "epoch": self.ledger_epoch if self.fenced else self.epoch,
                "registered_epoch": self.epoch,
                "status": "fenced" if self.fenced else "active",
                "fenced_to": self.fenced_to,
                "fenced_reason": self.fenced_reason,
                "database_up": self.database_up,
                "database_detail": self.database_detail,
                "database_seen_at": self.database_seen_at,
            }
