"""The garbage collector of a serving daemon: start-up objects frozen, rarer collections.

A bundle of 10 000 changes allocates about a million objects while a worker thread
parses and verifies it; with the default thresholds the collector then runs full
collections over every object of the process (FastAPI, pydantic, SQLAlchemy included),
each holding the GIL for over 100 ms, which stalls the event loop (``/healthz``).
``tune_for_serving`` collects once, freezes what start-up left (those objects are never
scanned again) and raises the thresholds; ``promoter serve`` calls it just before it
starts serving. Reference counting still frees everything that is not in a cycle.

Not for library use or tests that start many daemons in one process: frozen objects are
never collected, so ``restore`` undoes it.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 10)


def tune_for_serving() -> tuple[int, int, int]:
    """Freeze start-up objects and raise the thresholds; the previous thresholds."""
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return previous


def restore(previous: tuple[int, int, int]) -> None:
    gc.unfreeze()
    gc.set_threshold(*previous)
