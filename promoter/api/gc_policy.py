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

``paused()`` holds automatic collections off while a worker parses and verifies one
large document. Such a submission allocates some 300 000 tracked objects (the decoded
JSON, the models, the evidence rows) that all stay alive until it answers and form no
cycles; each young collection in between walks the latest 50 000 of them for nothing
(30 to 45 ms of a 10 000-change submission, measured with ``gc.callbacks``). The caller
drops the document before the pause ends, so reference counting frees it and the
collection that follows finds little. Nesting and overlapping pauses (two submissions at
once) are counted; collection resumes when the last one ends, and only if it was on when
the first began. Cyclic garbage other threads make meanwhile waits, at most one
submission long.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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


_pause_lock = threading.Lock()
_pauses = 0
_resume = False  # collection was on when the first of the current pauses began


@contextmanager
def paused() -> Iterator[None]:
    """Automatic collection off for the block (see the module docstring)."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()
