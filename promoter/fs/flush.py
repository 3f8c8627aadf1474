"""The flushes promoter asks of the kernel, counted: ``fsync``, ``fdatasync`` and ``syncfs``.

Every flush promoter itself makes goes through ``fsync``, ``fdatasync`` or ``syncfs``
here, so that a test can pin how many a request costs: ``flushes()`` is the count of each
kind since this process started (all threads), ``counting()`` records the kinds the
calling thread flushes inside a block. Counting is a few integer updates under a lock; it
changes nothing about what is flushed. A flush the database library makes inside its own
code is not seen here (``promoter.store.db`` counts the commits it makes durable).

Deliberately not here: which files are flushed, when, or what a failed flush means (the
callers decide; the ``OSError`` is raised unchanged), nor whether one ``syncfs`` may stand
for several fsyncs (``promoter.fs.group_sync``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["counting", "fdatasync", "flushes", "fsync", "note", "syncfs"]

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_local = threading.local()


def note(kind: str) -> None:
    """Count one flush of ``kind`` (total, and the calling thread's open records)."""
    with _lock:
        _counts[kind] += 1
    for record in getattr(_local, "records", ()):
        record.append(kind)


def flushes() -> Counter[str]:
    """How many flushes of each kind this process has made so far (a copy)."""
    with _lock:
        return Counter(_counts)


@contextmanager
def counting() -> Iterator[list[str]]:
    """The kinds of the flushes this thread makes inside the block, in order."""
    record: list[str] = []
    records: list[list[str]] = getattr(_local, "records", [])
    _local.records = records
    records.append(record)
    try:
        yield record
    finally:
        records.remove(record)


def fsync(fd: int) -> None:
    """``os.fsync``, counted."""
    note("fsync")
    os.fsync(fd)


def fdatasync(fd: int) -> None:
    """``os.fdatasync``, counted."""
    note("fdatasync")
    os.fdatasync(fd)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def syncfs(fd: int) -> None:
    """``syncfs(2)`` of the filesystem holding ``fd``, counted; ``OSError`` on failure."""
    note("syncfs")
    if _libc().syncfs(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
