"""Settling journaled temp names after a crash, for every kind of operation
(protocol: recovery#removal-provably-ours).

Given ``(target path, journaled temp name, old state, new state)`` tuples, each temp
name is settled through ``promoter.fs.aside.settle``: promoter's own bytes (or the exact
authorized old state displaced from a target that now holds the new one) are removed,
anything else is put back under the target's name or kept beside it. The caller fails
closed when anything was kept.

Deliberately not here: which names an operation may have used (the caller derives them
from its journal with ``promoter.domain.paths.temp_name``) and what the operation does
next.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from promoter.domain.path_state import State
from promoter.errors import PromoterError
from promoter.fs.aside import KeptEntry, beside, kept_earlier, settle
from promoter.fs.root import Root

log = logging.getLogger("promoter.settle")


def settle_step_temps(
    root: Root, steps: Iterable[tuple[str, str, Any, Any]]
) -> tuple[list[str], list[KeptEntry]]:
    """Settle each step's temp name; returns (removed temp paths, kept entries).

    Kept files that were already there (from an earlier pass, perhaps unreported because
    of a crash) come first with ``found: True``; only the others are new this pass.
    """
    removed: list[str] = []
    kept: list[KeptEntry] = []
    for path, temp, old, new in steps:
        try:
            parent = root.open_parent(path, create=False)
        except PromoterError:
            continue  # the directory is gone or unsafe: no temp of ours can be there
        with parent:
            try:
                earlier = kept_earlier(parent, temp)
                kept += [k.to_dict() | {"found": True} for k in earlier]
                result = settle(parent, temp, old=State.of(old), new=State.of(new))
            except PromoterError as exc:
                log.warning("could not settle %s beside %s: %s", temp, path, exc.detail)
                kept.append({"path": path, "kept_as": beside(parent, temp), "error": exc.code})
                continue
        if result.action == "removed":
            removed.append(beside(parent, temp))
        elif result.action == "put_back":
            kept.append({"path": path, "kept_as": path, "put_back": True})
        elif result.kept is not None:
            kept.append(result.kept.to_dict())
    return removed, kept


def newly_kept(kept: list[KeptEntry]) -> list[KeptEntry]:
    """The entries of ``kept`` this pass kept (not found from an earlier one)."""
    return [k for k in kept if not k.get("found")]
