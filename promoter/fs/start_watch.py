"""Which paths of a worktree changed since a position the command line asked for before.

This module owns ``StartWatch`` (one per guarded repository in a daemon, made on first
ask by ``promoter.engine.snapshots.start_watch``; protocol: runs#watched-start). A watch
has a *generation* (new whenever it starts, restarts, or gives up: overflow, a renamed
directory, a changed ``.gitignore``, too many paths kept) and a *clock* (one tick per
ask). An ask names every position the command line holds (one per generation it was
answered, by whichever worker of the daemon); only the one of this watch's generation
counts. An ask first syncs: the daemon makes a mark in its own sync directory, watched by
the worktree watch's descriptor, and reads events until the mark's creation is read, so
every write that finished before the ask is counted. The changed paths are then stamped
with the new clock; the answer is every path stamped after that position's clock, or
``None`` (unknown): a first ask (which starts the watch), no position of this generation, a watch
that cannot run, a sync not seen in time, or more than ``MAX_ANSWER`` paths. The
snapshots' watch (``promoter.git.shadow_watch``) and its ``take`` are separate.

Not here: what the paths mean for a sandbox's start (the command line decides,
``promoter.executor.start_watch``), which repositories are watched, the worktree itself
(only watched, never read beyond its directory listings, never written).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from promoter.fs.own_temp import OwnTemp
from promoter.fs.watch import TreeWatch

__all__ = ["MAX_ANSWER", "MAX_KEPT", "Changes", "StartWatch"]

log = logging.getLogger("promoter.snapshots")

MAX_ANSWER = 256  # past this many paths the command line reads everything anyway
MAX_KEPT = 20_000  # paths stamped in one generation before it starts again
SYNC_SECONDS = 5.0  # the longest wait for the mark of an ask
RETRY_SECONDS = 30.0  # after a watch could not start, the next try is not sooner


@dataclass(frozen=True)
class Changes:
    """An answer: the position now and the paths changed since the one asked for."""

    generation: str
    clock: int
    paths: list[bytes] | None  # None: not known (read everything)
    reason: str = ""

    def wire(self) -> dict[str, object]:
        """The JSON answer; a path that is not UTF-8 makes it unknown (JSON holds text)."""
        paths: list[str] | None = None
        reason = self.reason
        if self.paths is not None:
            try:
                paths = [p.decode("utf-8", "strict") for p in self.paths]
            except UnicodeDecodeError:
                reason = "a changed path is not UTF-8"
        return {
            "generation": self.generation,
            "clock": self.clock,
            "paths": paths,
            "reason": reason,
        }


class StartWatch:
    """The watch of one worktree for sandboxes' starts, with its generation and clock."""

    def __init__(
        self,
        worktree: str,
        sync_dir: str,
        *,
        max_answer: int = MAX_ANSWER,
        max_kept: int = MAX_KEPT,
        sync_seconds: float = SYNC_SECONDS,
    ) -> None:
        self.worktree = worktree
        self.sync_dir = sync_dir
        self.max_answer = max_answer
        self.max_kept = max_kept
        self.sync_seconds = sync_seconds
        self.generation = ""
        self.clock = 0
        self._watch: TreeWatch | None = None
        self._stamps: dict[bytes, int] = {}
        self._failed_at: float | None = None
        self._lock = threading.Lock()

    def changed_since(self, positions: Mapping[str, int]) -> Changes:
        """The paths changed since the position of this watch's generation among
        ``positions`` (generation: clock, as held by the asker), after a sync; the others
        are another watch's (another worker of the daemon, an earlier run) and ignored."""
        with self._lock:
            if self._watch is None or not self._watch.valid:
                return self._restart()
            reason = self._sync()
            if reason:
                return self._restart(reason)
            clock = positions.get(self.generation, -1) if self.generation else -1
            if clock > self.clock - 1 or clock < 0:
                why = "a first ask" if not positions else "another generation or clock"
                return Changes(self.generation, self.clock, None, why)
            paths = sorted(p for p, stamp in self._stamps.items() if stamp > clock)
            if len(paths) > self.max_answer:
                why = f"more than {self.max_answer} paths changed"
                return Changes(self.generation, self.clock, None, why)
            return Changes(self.generation, self.clock, paths)

    def close(self) -> None:
        """Stop watching; the next ask starts a new generation."""
        with self._lock:
            if self._watch is not None:
                self._watch.close()
            self._watch = None

    # --- inside the lock ----------------------------------------------------------------

    def _sync(self) -> str:
        """Read every event up to a mark made now, stamp the paths; why not, if it failed."""
        watch = self._watch
        assert watch is not None
        try:
            mark = OwnTemp.create(self.sync_dir, "sync-")
        except OSError as exc:
            return f"no mark could be made: {exc.strerror or exc}"
        try:
            os.close(mark.fd)
            seen = watch.until_mark(os.fsencode(os.path.basename(mark.path)), self.sync_seconds)
        finally:
            mark.discard()  # the name made here, and only while it holds that file
        changed = watch.take()
        if not seen or changed is None:
            return watch.reason or "the mark was not seen in time"
        self.clock += 1
        for path in changed:
            self._stamps[path] = self.clock
        if len(self._stamps) > self.max_kept:
            return f"more than {self.max_kept} paths changed in this generation"
        return ""

    def _restart(self, reason: str = "") -> Changes:
        """A new generation from now on (or none while the watch cannot run)."""
        if self._watch is not None:
            reason = reason or self._watch.reason
            self._watch.close()
        reason = reason or "a first ask"
        self._watch = None
        self._stamps = {}
        self.generation = ""
        self.clock = 0
        now = time.monotonic()
        if self._failed_at is not None and now - self._failed_at < RETRY_SECONDS:
            return Changes("", 0, None, reason)
        watch = TreeWatch(self.worktree, sync_dir=self.sync_dir)
        if not watch.start():
            self._failed_at = now
            log.info("%s is not watched for starts: %s", self.worktree, watch.reason)
            return Changes("", 0, None, f"{reason}; the worktree cannot be watched: {watch.reason}")
        self._failed_at = None
        self._watch = watch
        self.generation = secrets.token_hex(8)
        return Changes(self.generation, self.clock, None, reason)
