"""A promotion's time and processor time by phase, logged when asked (a debug switch).

With ``PROMOTER_PHASE_TIMING=1`` in the daemon's environment (``promoter serve
--phase-timing`` sets it, for every worker), each promotion request (``POST
/v1/promotions``, ``POST /v1/promotions:withEvidence``) gets a ``PhaseClock`` in a context
variable; the request's task, its worker-thread hops and its attempt's thread (which runs
in a copy of the request's context) see the same clock. Marks close phases: a phase's
time is the time since the previous mark, so every moment of the request is in exactly
one phase. They come from points the code passes anyway: the fault points
(``promoter.faults``, told through ``faults.OBSERVERS``), the repository lock's
acquisition (``promoter.fs.lock.OBSERVERS``), the token look-up
(``promoter.api.deps.authenticate``) and the answer's last byte (``promoter.api.front``).
The phases, in order: ``request`` (headers, routing, dependencies), ``auth``,
``verification`` (the body read and the evidence verified and stored, up to
``evidence_stored``), ``lock_wait`` (the preconditions read and the wait for the lock),
``plan`` (up to the plan journaled), ``writes`` (temps, replaces, the parent's flush),
``read_back``, ``receipt`` (the receipt, the outcome's commit, the receipt's copy) and
``answer``. A phase a request does not pass (``verification`` of a promotion of a bundle
submitted before) is left out. One ``promoter.phases`` line a promotion gives each
phase's milliseconds (``<phase>_ms``) and the process's processor milliseconds in it
(``<phase>_cpu_ms``: user and system of every thread and of waited-for git children), and
the lock's own wait (``lock_waited_ms``). Processor time is the process's: time one
promotion at a time for figures that are its own.

Off, it costs one test of a flag a request. Deliberately not here: changing anything a
promotion does, or where any check, journal point or flush is.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from contextvars import ContextVar

from promoter import faults
from promoter.api.logs import event
from promoter.fs import lock as fs_lock

ENV = "PROMOTER_PHASE_TIMING"
PATHS = frozenset({"/v1/promotions", "/v1/promotions:withEvidence"})
PHASES = (
    "request",
    "auth",
    "verification",
    "lock_wait",
    "plan",
    "writes",
    "read_back",
    "receipt",
    "answer",
)
# the points that close a phase (the time up to them is that phase's); others pass
_CLOSES = {
    "evidence_stored": "verification",
    "before_journal": "plan",
    "after_journal": "plan",
    "after_parent_fsync": "writes",
    "after_readback": "read_back",
    "before_receipt": "read_back",
    "audit_promotion_after_link": "receipt",
    "audit_promotion_after_rename": "receipt",
    "audit_promotion_after_dir_fsync": "receipt",
}
log = logging.getLogger("promoter.phases")
_CLOCK: ContextVar[PhaseClock | None] = ContextVar("promoter_phase_clock", default=None)


def _cpu() -> float:
    """The process's processor seconds and its waited-for children's (``os.times`` counts
    in clock ticks, 10 ms: too coarse for a phase)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class PhaseClock:
    """The marks of one promotion request: wall and processor seconds per phase."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.lock_waited = 0.0
        self._at = time.perf_counter()
        self._cpu_at = _cpu()

    def mark(self, phase: str) -> None:
        """The time since the previous mark is ``phase``'s."""
        now, cpu = time.perf_counter(), _cpu()
        self.wall[phase] = self.wall.get(phase, 0.0) + now - self._at
        self.cpu[phase] = self.cpu.get(phase, 0.0) + cpu - self._cpu_at
        self._at, self._cpu_at = now, cpu

    def fields(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for phase in PHASES:
            if phase in self.wall:
                out[f"{phase}_ms"] = round(1000 * self.wall[phase], 2)
                out[f"{phase}_cpu_ms"] = round(1000 * self.cpu[phase], 2)
        out["lock_waited_ms"] = round(1000 * self.lock_waited, 2)
        return out


def enabled() -> bool:
    return os.environ.get(ENV, "").lower() in ("1", "true", "yes")


def start() -> PhaseClock:
    """A clock for the request this task serves (its context ends with it)."""
    clock = _CLOCK.get()
    if clock is None:
        clock = PhaseClock()
        _CLOCK.set(clock)
    return clock


def mark(phase: str) -> None:
    """Close ``phase`` on the current request's clock, if it has one."""
    clock = _CLOCK.get()
    if clock is not None:
        clock.mark(phase)


def finish(clock: PhaseClock, route: str) -> None:
    """Close ``answer`` and log the request's line."""
    clock.mark("answer")
    total = sum(clock.wall.values())
    event(
        log, f"promotion phases {1000 * total:.1f} ms", logging.INFO, route=route, **clock.fields()
    )


def _point(name: str) -> None:
    phase = _CLOSES.get(name)
    if phase is not None:
        mark(phase)


def _locked(common_dir: str, waited: float) -> None:
    clock = _CLOCK.get()
    if clock is not None and "lock_wait" not in clock.wall:
        clock.lock_waited = waited
        clock.mark("lock_wait")


def install() -> bool:
    """Listen to the points and the lock when the switch is on; whether it is."""
    if not enabled():
        return False
    if _point not in faults.OBSERVERS:
        faults.OBSERVERS.append(_point)
    if _locked not in fs_lock.OBSERVERS:
        fs_lock.OBSERVERS.append(_locked)
    return True
