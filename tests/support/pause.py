"""Deterministic races: a daemon paused at a fault point until the test releases it.

``Pause(tmp_path, "before_swap_back")`` names a release file; ``spec`` is the
``PROMOTER_FAULTS`` item that makes the daemon stop there (``promoter.faults``'s
``pause:<path>`` action). ``reached()`` waits for the daemon's ``.paused`` marker (an
event the daemon writes, bounded so a broken test fails instead of hanging), the test
then plays the user, and ``release()`` lets the daemon go on.
"""

from __future__ import annotations

import time
from pathlib import Path

_BOUND = 60.0
_POLL = 0.005


class Pause:
    def __init__(self, directory: Path, point: str, nth: int = 1) -> None:
        self.point = point
        self.release_file = directory / f"release-{point}-{nth}"
        self.nth = nth

    @property
    def spec(self) -> str:
        return f"{self.point}=pause:{self.release_file}@{self.nth}"

    def reached(self) -> None:
        marker = Path(f"{self.release_file}.paused")
        deadline = time.monotonic() + _BOUND
        while not marker.exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"the daemon never reached {self.point}")
            time.sleep(_POLL)

    def release(self) -> None:
        self.release_file.write_text("go")


def specs(*pauses: Pause, extra: str = "") -> str:
    """The ``PROMOTER_FAULTS`` value for several pauses (plus other items)."""
    return ",".join([*(p.spec for p in pauses), *([extra] if extra else [])])
