"""Staging a promotion's new files at their journaled temp names (SPEC §5.4, step 6a).

``stage_temps`` writes every new file of the attempt from the blob store to the temp name
the plan journaled, ``TEMPS_TOGETHER`` at a time begun before the first is fsynced, and
journals any directory it had to make that the plan did not (where the filesystem allows,
one ``syncfs`` makes each group durable: ``Applier.end_begun``); ``remove_dirs`` takes the
directories an attempt made away again, deepest first, when they are empty.

Fault point: ``after_temps_journaled``. Deliberately not here: the replaces and unlinks
and what a failure means (``promoter.engine.operation.promote``), the descriptor-chain writes
themselves (``promoter.engine.operation.apply``, ``promoter.fs``).
"""

from __future__ import annotations

import logging
import threading

from promoter import faults
from promoter.domain.models import Change
from promoter.domain.path_state import State
from promoter.domain.paths import disk_path, temp_name, wire_path
from promoter.engine.operation.apply import Applier
from promoter.errors import PromoterError, Stopped
from promoter.fs.root import Root
from promoter.store import step_rows
from promoter.store.blobs import BlobStore
from promoter.store.db import Database

log = logging.getLogger("promoter.promote")
TEMPS_TOGETHER = 64  # temps written before the first of them is fsynced (``stage_temps``)


def stage_temps(
    db: Database,
    blobs: BlobStore,
    stopping: threading.Event,
    operation_id: str,
    attempt: int,
    apply: Applier,
    changes: list[Change],
    wanted: set[int],
    journaled_dirs: list[str],
) -> None:
    """Write every new file of ``wanted`` to its journaled temp name.

    ``TEMPS_TOGETHER`` temps are begun (written, writeback started) before the first of
    them is ended (fsynced and named), so their fsyncs wait for the disk together; the
    open descriptors stay bounded by it.

    The temp names are the plan's (journaled with the steps); a directory the staging had
    to make that was not journaled as to be created (it went missing after the plan) is
    journaled here, so only that case crosses into the store.
    """
    for seq, change in enumerate(changes):
        if not change.new.exists or seq not in wanted:
            continue
        assert change.new.sha256 is not None
        if stopping.is_set():
            raise Stopped("the daemon is stopping; nothing was written")
        data = blobs.stream(change.new.sha256)
        apply.begin(
            seq,
            disk_path(change.path),
            State.of(change.new),
            data,
            temp_name(operation_id, attempt, seq),
        )
        if len(apply.begun) >= TEMPS_TOGETHER:
            apply.end_begun()
    apply.end_begun()
    known = set(journaled_dirs) | {wire_path(d) for d in journaled_dirs}
    unjournaled = [d for d in apply.created_dirs if d not in known]
    if unjournaled:
        with db.session() as session:
            step_rows.add_created_dirs(session, operation_id, [wire_path(d) for d in unjournaled])
    faults.point("after_temps_journaled")


def remove_dirs(root: Root, created: list[str]) -> None:
    """Remove the directories an attempt made, deepest first, if empty; a failure is logged."""
    for directory in sorted(set(created), key=lambda d: d.count("/"), reverse=True):
        try:
            root.remove_dir_if_empty(directory)
        except (PromoterError, OSError):
            log.warning("could not remove created directory %s", directory)
