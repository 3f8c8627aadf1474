"""What a worktree pass that saw its host fenced removes, answers and logs.

A promotion, a rollback or a restore that meets the fence (``host_fenced``) mid-pass
stands down under the lock it still holds (protocol: promotion#fence-stops-every-write):
``stand_down`` abandons the driver's pass (each staged temp still the inode and bytes it
wrote removed, each directory the pass made removed when empty, nothing swept by prefix)
and ``noted`` puts what the pass did into the error, one shape for every kind:
``worktree`` (one sentence with the counts), ``removed_temps`` and ``removed_dirs`` (wire
form, the first ``LISTED``), ``kept`` (anything not promoter's found at a temp name),
then logs it once on the caller's logger.

Not here: the epoch check (``promoter.engine.fencing``), the driver's writes
(``driver.py``), and the new owner's recovery of what the pass left.
"""

from __future__ import annotations

import logging

from promoter.domain.paths import wire_all, wire_path
from promoter.engine.operation.driver import Driver
from promoter.errors import HostFenced

__all__ = ["LISTED", "noted", "stand_down"]

NAMED = 20  # removed names listed in the log line, at most
LISTED = 100  # removed names listed in the answer, at most


def stand_down(
    log: logging.Logger,
    operation_id: str,
    driver: Driver,
    exc: HostFenced,
    *,
    doing: str,
    done: str | None = None,
) -> HostFenced:
    """``exc`` after the pass of ``driver`` was abandoned (``Driver.abandon``), naming
    what it removed and kept (``noted``)."""
    driver.abandon(exc)
    return noted(log, operation_id, driver, exc, doing=doing, done=done)


def noted(
    log: logging.Logger,
    operation_id: str,
    driver: Driver,
    exc: HostFenced,
    *,
    doing: str,
    done: str | None = None,
) -> HostFenced:
    """``exc`` naming what the abandoned pass removed and kept, logged once. ``doing``:
    what the pass was at (``staging``, ``rolling back``…); ``done``: what it had put in
    place before it saw the fence (``replaced 3 of its targets``), if it had begun."""
    temps, removed_dirs, kept = driver.removed_temps, driver.removed_dirs, driver.kept
    exc.context["worktree"] = (
        ("" if done is None else f"{done} before it saw the fence; ")
        + f"removed its {len(temps)} temp files and {len(removed_dirs)} directories"
        + (f"; kept {len(kept)} entries that are not its own" if kept else "")
    )
    exc.context["removed_temps"] = wire_all(temps[:LISTED])  # the counts are in ``worktree``
    exc.context["removed_dirs"] = wire_all(removed_dirs[:LISTED])
    if kept:
        exc.context["kept"] = wire_all(kept)
    named = [wire_path(path) for path in [*temps, *removed_dirs]]
    log.error(
        "host fenced while %s %s: %s, the new owner recovers it (removed: %s%s)",
        doing,
        operation_id,
        exc.context["worktree"],
        ", ".join(named[:NAMED]) or "none",
        f" and {len(named) - NAMED} more" if len(named) > NAMED else "",
    )
    return exc
