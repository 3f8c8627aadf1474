"""Named fault points for crash and I/O-error tests.

Code calls ``point("after_temp_fsync")`` at every boundary between a side effect and its
journal record. The call is inert unless the ``PROMOTER_FAULTS`` environment variable names
that point, as a comma-separated list of ``name=action`` items, where action is ``kill``
(``os._exit(137)`` at once, like SIGKILL: no cleanup, no flush) or an errno name such as
``ENOSPC``, ``EIO`` or ``EACCES`` (raise ``OSError`` with that errno). An optional
``@N`` suffix fires only on the N-th hit of that point (1-based), e.g.
``after_replace=kill@3``; ``@N+`` fires on the N-th and every later hit.

``pause:<path>`` makes a race deterministic: the process writes ``<path>.paused`` (so a
test knows the point was reached), then blocks until ``<path>`` exists, for at most
``PROMOTER_FAULTS_PAUSE_LIMIT`` seconds (default 60; past that it goes on, so a broken
test cannot hang the daemon for ever). Example: ``before_swap_back=pause:/tmp/go``.

``PROMOTER_FAULTS_TRACE=<path>`` records every point the process passes, one name a line
appended to ``<path>`` (whether or not ``PROMOTER_FAULTS`` is set): the model tests
(``tests/model/``) compare that order with the one ``model/promotion.pml`` allows.

``OBSERVERS`` are told every point's name as it is passed (``promoter.api.phases``' debug
timing); none are installed unless asked for.

This module owns parsing, firing and recording only; which points exist is documented
where they are called.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

ENV = "PROMOTER_FAULTS"
TRACE_ENV = "PROMOTER_FAULTS_TRACE"
PAUSE_LIMIT_ENV = "PROMOTER_FAULTS_PAUSE_LIMIT"
_POLL = 0.005
_COUNT = re.compile(r"@(\d+)(\+?)$")


class _Rule(NamedTuple):
    """What a named point does when hit: its action, on which hit, and after it."""

    action: str
    nth: int
    persistent: bool


_lock = threading.Lock()
_hits: dict[str, int] = {}
_cache: tuple[str, dict[str, _Rule]] | None = None
OBSERVERS: list[Callable[[str], None]] = []  # told each point passed


def _parse(spec: str) -> dict[str, _Rule]:
    rules: dict[str, _Rule] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        action = action or "kill"
        nth, persistent = 1, False
        counted = _COUNT.search(action)
        if counted:
            action = action[: counted.start()]
            persistent = counted.group(2) == "+"
            nth = int(counted.group(1))
        rules[name.strip()] = _Rule(action.strip(), nth, persistent)
    return rules


def _rules() -> dict[str, _Rule]:
    global _cache
    spec = os.environ.get(ENV, "")
    if _cache is None or _cache[0] != spec:
        _cache = (spec, _parse(spec))
    return _cache[1]


def reset() -> None:
    """Forget hit counts (tests that set the variable in-process call this)."""
    with _lock:
        _hits.clear()


def hits(name: str) -> int:
    """How often ``name`` was reached since ``reset`` (counted only while ``PROMOTER_FAULTS``
    is set: a test that counts writes sets an inert rule)."""
    with _lock:
        return _hits.get(name, 0)


def point(name: str) -> None:
    """Fire the fault configured for ``name``, if any; otherwise do nothing."""
    for observe in OBSERVERS:
        observe(name)
    trace = os.environ.get(TRACE_ENV)
    if trace:
        _record(trace, name)
    if not os.environ.get(ENV):
        return
    rule = _rules().get(name)
    if rule is None:
        return
    with _lock:
        _hits[name] = count = _hits.get(name, 0) + 1
    if count < rule.nth or (count > rule.nth and not rule.persistent):
        return
    if rule.action == "kill":
        os._exit(137)
    if rule.action.startswith("pause:"):
        _pause(rule.action.removeprefix("pause:"))
        return
    code = getattr(errno, rule.action, None)
    if not isinstance(code, int):
        raise ValueError(f"{ENV}: unknown action {rule.action!r} for point {name!r}")
    raise OSError(code, f"injected fault at {name}: {os.strerror(code)}")


def _record(trace: str, name: str) -> None:
    """Append ``name`` as one line to the trace file (one ``write`` of an ``O_APPEND`` file)."""
    fd = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, (name + "\n").encode())
    finally:
        os.close(fd)


def _announce(marker: str) -> None:
    """Put this process's pid at ``marker``, never seen without it.

    A FIFO the test made there is opened and written (its reader meets the pause exactly
    then); otherwise a temp of this thread's own is renamed onto it, so two threads paused
    at once never take each other's temp.
    """
    try:
        fifo = stat.S_ISFIFO(os.stat(marker).st_mode)
    except FileNotFoundError:
        fifo = False
    if fifo:
        with open(marker, "w", encoding="utf-8") as out:
            out.write(str(os.getpid()))
        return
    part = f"{marker}.{os.getpid()}.{threading.get_ident()}.part"
    with open(part, "w", encoding="utf-8") as out:
        out.write(str(os.getpid()))
    os.rename(part, marker)


def _pause(release: str) -> None:
    """Announce the pause at ``release + ".paused"``, then wait for ``release`` (bounded)."""
    _announce(release + ".paused")
    deadline = time.monotonic() + float(os.environ.get(PAUSE_LIMIT_ENV, "60"))
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(_POLL)
