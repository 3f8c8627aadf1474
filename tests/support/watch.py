"""An inotify watch of a worktree's directories: what was made, written or removed.

``Watch(repo)`` watches every directory of ``repo`` (outside ``.git``) from now on;
``events()`` answers the paths made or written and the paths removed, and closes it. The
fencing and partition tests hold a fenced host to it: nothing of it appears after the
fence, even for a moment that a listing afterwards would miss.
"""

from __future__ import annotations

import os
from pathlib import Path

from promoter.fs import inotify

__all__ = ["Watch"]


class Watch:
    """Every inotify event in the worktree's directories (outside .git) from now on."""

    _MASK = (
        inotify.IN_CREATE
        | inotify.IN_MOVED_TO
        | inotify.IN_MODIFY
        | inotify.IN_CLOSE_WRITE
        | inotify.IN_ATTRIB
        | inotify.IN_DELETE
        | inotify.IN_MOVED_FROM
    )
    _REMOVED = inotify.IN_DELETE | inotify.IN_MOVED_FROM

    def __init__(self, repo: Path, *, closes: bool = True) -> None:
        """``closes=False``: a descriptor closed is not counted (``IN_CLOSE_WRITE``): a host
        dropping the unnamed (``O_TMPFILE``) temps it began closes them, writing nothing."""
        self._mask = self._MASK if closes else self._MASK & ~inotify.IN_CLOSE_WRITE
        self._ino = inotify.Inotify()
        self._dirs: dict[int, str] = {}
        for path in [repo, *sorted(p for p in repo.rglob("*") if p.is_dir())]:
            rel = path.relative_to(repo)
            if ".git" not in rel.parts:
                self._dirs[self._ino.add_watch(bytes(path), self._mask)] = str(rel)

    def events(self) -> tuple[list[str], list[str]]:
        """The paths made or written, and the paths removed, since the watch began; closes
        the watch."""
        try:
            made: list[str] = []
            removed: list[str] = []
            for event in self._ino.read_events():
                if event.wd not in self._dirs or not event.mask & self._mask:
                    continue
                path = os.path.normpath(os.path.join(self._dirs[event.wd], os.fsdecode(event.name)))
                (removed if event.mask & self._REMOVED else made).append(path)
            return made, removed
        finally:
            self._ino.close()
