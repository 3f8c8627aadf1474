"""Whether another host may still write in this daemon's state directory.

A temp in the state directory names its writer by boot id, pid and start time, which only
the writer's machine can look up. A directory shared with another host (a replacement
started with ``replaces_host``, on a shared disk or the same machine) may hold a live
writer's temp of another boot, so a temp of another boot is provably a killed writer's
only when no other host may write there: each other host the directory names (the host it
records, each replacement that started on it, ``promoter.store.state_host.writers``, and
the host this daemon replaces) is fenced in the ledger. A fenced host writes nothing
(protocol: hosts#fencing); one the ledger does not know, holds active, or that cannot be
read while the database does not answer may still write.

``others`` answers this once, at the daemon's start, before its sweeps of temps
(``promoter.store.state_temps``, ``promoter.api.metrics_dir``): a fence that lands later is
seen by the next start, never mid-life.

Deliberately not here: the sweeps themselves, and fencing (``promoter.engine.fencing``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from promoter.errors import PromoterError
from promoter.store import hosts, state_host
from promoter.store.db import Database

__all__ = ["others"]

log = logging.getLogger("promoter.state")


def others(state_dir: Path, host_id: str, replaces: str | None, db: Database) -> str | None:
    """None when no host but ``host_id`` may write in ``state_dir``; else the hosts that may
    and why, for the log line of a sweep that keeps their temps."""
    try:
        named = state_host.writers(state_dir)
    except PromoterError as exc:
        return f"the state directory's hosts cannot be read ({exc.detail}), so any host"
    if replaces is not None:
        named.add(replaces)
    named.discard(host_id)
    if not named:
        return None
    live: list[str] = []
    try:
        with db.reading() as connection:
            for other in sorted(named):
                found = hosts.standing(connection, other)
                if found is None or found.status != hosts.FENCED:
                    status = "not registered" if found is None else found.status
                    live.append(f"host {other} ({status}, not fenced)")
    except PromoterError as exc:
        log.warning("the ledger could not say whether %s are fenced: %s", sorted(named), exc.detail)
        return f"host {', '.join(sorted(named))} (the ledger did not answer)"
    return ", ".join(live) or None
