"""Watched snapshots: a promotion's capture from the last one plus the paths that changed.

``SnapshotWatch`` (one per shadow repository in a daemon) keeps an inotify watch of the
worktree (``promoter.fs.watch``) and the last tree captured while it ran, and captures
from them (``ShadowRepository.capture_changed``), falling back to a full capture as
protocol: snapshots#watched-capture-rule says; ``forget`` is called by snapshot
retention. A repository with ``snapshot_watch = false`` is always captured in full.

Not here: the lock (callers hold it), the database, the snapshot log, and any write.
"""

from __future__ import annotations

import logging
import os

from promoter.errors import PromoterError
from promoter.fs import inotify
from promoter.fs.watch import TreeWatch
from promoter.git.shadow import Capture, ShadowRepository

__all__ = ["SnapshotWatch"]

log = logging.getLogger("promoter.snapshots")


def _pack_mark(shadow: ShadowRepository) -> tuple[int, int, int] | None:
    try:
        st = os.stat(os.path.join(shadow.path, "objects", "pack"))
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


class SnapshotWatch:
    """The watch of one worktree and the last tree captured while it ran."""

    def __init__(self, worktree: str) -> None:
        self.watch = TreeWatch(worktree)
        self._tree: str | None = None
        self._mark: tuple[int, int, int] | None = None

    @staticmethod
    def possible() -> bool:
        """Whether this system can watch worktrees at all."""
        return inotify.available()

    def capture(self, shadow: ShadowRepository) -> Capture | None:
        """The tree now from the base tree and the changed paths; ``None``: capture in full."""
        if self._tree is None or self._mark != _pack_mark(shadow):
            return None
        changed = self.watch.take()
        if changed is None:
            where = shadow.layout.worktree
            log.info("a snapshot of %s is captured in full: %s", where, self.watch.reason)
            self._tree = None
            return None
        try:
            captured = shadow.capture_changed(self._tree, changed)
        except (PromoterError, OSError) as exc:
            log.info("a snapshot of %s is captured in full: %s", shadow.layout.worktree, exc)
            captured = None
        if captured is None:
            self._tree = None
            return None
        self._tree = captured.tree
        return captured

    def before_full(self, shadow: ShadowRepository) -> None:
        """Start the set of changed paths now, right before a full capture reads anything.

        A watch started here skips the directories the ignore rules exclude as a whole
        (nothing below them is ever captured, and a change to the rules makes the watch
        give up), so a ``node_modules`` or a virtual environment costs no watches.
        """
        self._tree = None
        if self.watch.valid:
            self.watch.take()
            return
        try:
            skip = shadow.ignored_directories()
        except PromoterError as exc:
            log.info("%s: ignored directories not known: %s", shadow.layout.worktree, exc)
            skip = []
        if not self.watch.start(skip):
            where = self.watch.root.decode(errors="replace")
            log.info("%s is not watched: %s", where, self.watch.reason)

    def after_full(self, shadow: ShadowRepository, tree: str) -> None:
        """The full capture that followed ``before_full`` produced ``tree``."""
        if self.watch.valid:
            self._tree = tree
            self._mark = _pack_mark(shadow)

    def forget(self) -> None:
        """The shadow's objects are being collected: the next capture is a full one."""
        self._tree = None

    def close(self) -> None:
        """Stop watching."""
        self._tree = None
        self.watch.close()
