"""Which promotion a refused step became: the merges of a promotion refused for drift,
followed to the newest.

``followed`` reads an operation's view and, while it is a refusal that was merged (its
``merged_into``, by the run's own merge or by ``promoter merge``), the view of the
promotion the newest merge made; ``ROUNDS`` bounds the merges of one step. Pure: it asks
through the getter it is given, so ``run --list`` follows a merge without loading the
run's workflow. Not here: offering or making a merge (``promoter.executor.run.drift``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ROUNDS", "followed"]

ROUNDS = 3  # merges of one step, each after a new save refused the last


def followed(view: Mapping[str, Any], get: Callable[[str], Mapping[str, Any]]) -> Mapping[str, Any]:
    """``view``, or for a refused promotion that was merged (its ``merged_into``), the view
    of the promotion the newest merge made, followed through each merge of that one too
    (bounded): what became of the step, as a run's own merge records it."""
    for _ in range(2 * ROUNDS):
        merged = view.get("merged_into") or []
        if view.get("status") != "refused" or not merged:
            break
        view = get(str(merged[-1]["operation_id"]))
    return view
