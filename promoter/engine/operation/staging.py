"""Staging a promotion's new files at their journaled temp names (protocol: promotion#step-apply).

``stage_temps`` hands every write of the attempt to the pass's driver, which begins
``TEMPS_TOGETHER`` temps before the first is fsynced (where the filesystem allows, one
``syncfs`` makes each group durable: ``Applier.end_begun``), and journals any directory
the staging had to make that the plan did not. Before each group after the first the
driver checks the host's epoch (``Driver``'s ``between_groups``), and before every other
temp once the host lease may have run out (``before_temp``): a fenced host stops with
``host_fenced`` before it makes anything more (protocol: promotion#fence-stops-every-write).

Fault point: ``after_temps_journaled``. Deliberately not here: the replaces and unlinks
and what a failure means (``promoter.engine.operation.driver`` and ``promote``), the
descriptor-chain writes themselves (``promoter.engine.operation.apply``, ``promoter.fs``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from promoter import faults
from promoter.domain.paths import wire_path
from promoter.domain.plan import Move
from promoter.engine.operation.driver import TEMPS_TOGETHER, Driver, Step
from promoter.errors import Stopped
from promoter.store import journal
from promoter.store.db import Database

__all__ = ["TEMPS_TOGETHER", "stage_temps"]


def stage_temps(
    db: Database,
    stopping: threading.Event,
    operation_id: str,
    driver: Driver,
    steps: Sequence[Step],
    journaled_dirs: list[str],
) -> None:
    """Write every new file of ``steps`` to its journaled temp name.

    ``TEMPS_TOGETHER`` temps are begun (written, writeback started) before the first of
    them is ended (fsynced and named), so their fsyncs wait for the disk together; the
    open descriptors stay bounded by it.

    The temp names are the plan's (journaled with the steps); a directory the staging had
    to make that was not journaled as to be created (it went missing after the plan) is
    journaled here, so only that case crosses into the store.
    """
    for step in steps:
        if step.move is not Move.WRITE:
            continue
        if stopping.is_set():
            raise Stopped("the daemon is stopping; nothing was written")
        driver.stage(step)
    driver.end_staging()
    known = set(journaled_dirs) | {wire_path(d) for d in journaled_dirs}
    unjournaled = [d for d in driver.created_dirs if d not in known]
    if unjournaled:
        with journal.attempt(db, operation_id) as j:
            j.add_created_dirs([wire_path(d) for d in unjournaled])
    faults.point("after_temps_journaled")
