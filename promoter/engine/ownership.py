"""Who owns a running operation: process id, process start time and boot id.

A restarted daemon uses these to tell an orphaned ``in_progress`` operation (its owner
is gone: another boot, a dead pid, or a pid reused by a younger process) from one that a
live process is still running.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def process_start(pid: int) -> str | None:
    """The start time (clock ticks since boot) of ``pid``, or None if it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: split after the last ')'
    fields = raw.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


@dataclass(frozen=True)
class Owner:
    pid: int
    start: str
    boot: str

    @classmethod
    def me(cls) -> Owner:
        pid = os.getpid()
        return cls(pid, process_start(pid) or "unknown", boot_id())

    def alive(self) -> bool:
        if self.boot != boot_id():
            return False
        return process_start(self.pid) == self.start
