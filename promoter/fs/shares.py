"""Flushes a few at once: a list of items split in shares over a small bounded pool.

Concurrent fsyncs on one filesystem wait for the disk together (their journal commits
and cache flushes are shared), so a caller that must flush many files or directories
one by one can hand them to ``in_shares``: up to ``workers`` threads, each taking every
n-th item in one task (a task per item cost more in hand-offs than the fsyncs it
overlapped). It returns only once every share has ended, so everything the caller does
after it comes after every flush.

Errors are never swallowed. A share stops at its first error; once all have ended, the
error of the *earliest* failed item (in the list's order) is raised as it was raised
(``in_shares``), or returned with its index (``first_failure``). Every item before that
index was done and succeeded: each share takes its items in order, so a share that
reached a later item did every earlier one of its own, and a share that failed did so
at or after the earliest failure. A caller can therefore treat the items before that
index exactly as a loop that stopped at the first failure would have left them; the
items after it may have been done too (an fsync more, never one fewer).

Deliberately not here: what an item's work is (the callers': an fsync and its fault
point, a directory's fsync), what a failure means, or whether one ``syncfs`` may stand
for all of them (``promoter.fs.group_sync``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["first_failure", "in_shares"]

T = TypeVar("T")


def first_failure(
    items: Sequence[T],
    work: Callable[[T], object],
    *,
    workers: int,
    name: str = "flush",
    pool: Executor | None = None,
) -> tuple[int, BaseException] | None:
    """``work`` on every item, in up to ``workers`` threads that each take every n-th item;
    once every share ended, the earliest failed item's index and error (None: none failed).

    A single item, or ``workers`` of 1, runs in the calling thread, in order, stopping at
    the first failure as the shares do. ``pool``: the caller's executor of at least
    ``workers`` threads, kept for many calls (a pool made per call costs its threads'
    start each time); without it, one is made for the call and shut down.
    """
    count = min(max(workers, 1), len(items))
    if count < 2:
        for index, item in enumerate(items):
            try:
                work(item)
            except BaseException as exc:
                return index, exc
        return None
    failures: dict[int, BaseException] = {}
    lock = threading.Lock()

    def share(first: int) -> None:
        for index in range(first, len(items), count):
            try:
                work(items[index])
            except BaseException as exc:
                with lock:
                    failures[index] = exc
                return

    if pool is not None:
        for done in [pool.submit(share, first) for first in range(count)]:
            done.result()
    else:
        with ThreadPoolExecutor(count, name) as own:
            for done in [own.submit(share, first) for first in range(count)]:
                done.result()
    if not failures:
        return None
    index = min(failures)
    return index, failures[index]


def in_shares(
    items: Sequence[T],
    work: Callable[[T], object],
    *,
    workers: int,
    name: str = "flush",
    pool: Executor | None = None,
) -> None:
    """``first_failure``, raising the earliest failed item's error as it was raised."""
    failed = first_failure(items, work, workers=workers, name=name, pool=pool)
    if failed is not None:
        raise failed[1]
