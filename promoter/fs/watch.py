"""Which paths of a worktree may have changed since the last look: an inotify watch.

``TreeWatch`` watches every directory of a worktree with one inotify descriptor (never
inside ``.git``, nor the directories the caller skips); ``take`` hands back the paths
created, written, changed in mode, deleted or renamed since the previous ``take``, or
``None`` when the set could be incomplete (protocol: snapshots#watched-captures).
Given a ``sync_dir`` (a directory of the caller's own, outside the worktree), the same
descriptor watches it for new names, and ``until_mark`` reads events until the creation
of a name there is seen: inotify keeps one queue per descriptor, so every event of a
write that finished before that name was made has been read by then.

Not here: what a change means for a snapshot (``promoter.git.shadow``), git, threads
(events are read only when ``take``, ``valid`` or ``until_mark`` is called), and any
write anywhere (the caller makes its marks itself).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Collection, Iterator

from promoter.fs import inotify
from promoter.fs.inotify import Event, Inotify

__all__ = ["MAX_DIRTY", "MAX_WATCHES", "TreeWatch"]

MAX_DIRTY = 20_000  # past this many changed paths, looking at everything is cheaper
MAX_WATCHES = 100_000  # directories one watch may hold

_MASK = (
    inotify.IN_MODIFY
    | inotify.IN_ATTRIB
    | inotify.IN_CLOSE_WRITE
    | inotify.IN_MOVED_FROM
    | inotify.IN_MOVED_TO
    | inotify.IN_CREATE
    | inotify.IN_DELETE
    | inotify.IN_DELETE_SELF
    | inotify.IN_MOVE_SELF
)
_SPECIAL = {b".git", b".gitignore"}


class TreeWatch:
    """The changed paths of the worktree at ``root``; ``start`` before the first ``take``."""

    def __init__(
        self,
        root: str,
        *,
        max_dirty: int = MAX_DIRTY,
        max_watches: int = MAX_WATCHES,
        sync_dir: str | None = None,
    ) -> None:
        self.root = os.fsencode(root)
        self.sync_dir = None if sync_dir is None else os.fsencode(sync_dir)
        self.max_dirty = max_dirty
        self.max_watches = max_watches
        self.reason = "not started"  # why the watch is not valid, when it is not
        self._ino: Inotify | None = None
        self._paths: dict[int, bytes] = {}  # watch descriptor -> directory, b"" the root
        self._dirty: set[bytes] = set()
        self._skip: frozenset[bytes] = frozenset()
        self._valid = False
        self._sync_wd: int | None = None
        self._marks: set[bytes] = set()  # names seen made in ``sync_dir``

    @property
    def valid(self) -> bool:
        """Whether the next ``take`` can answer (no reason to give up seen so far)."""
        if self._valid:
            self._drain()
        return self._valid

    def start(self, skip: Collection[bytes] = ()) -> bool:
        """Watch the worktree from now on, forgetting what was seen before; whether it could.

        Directories in ``skip`` (worktree-relative) are not watched, nor anything below
        them; their own entries are still reported by their parent's watch.
        """
        self.close()
        self.reason = ""
        self._skip = frozenset(skip)
        try:
            self._ino = Inotify()
            self._valid = True
            if self.sync_dir is not None:
                self._sync_wd = self._ino.add_watch(self.sync_dir, inotify.IN_CREATE)
            self._watch_tree(b"")
        except OSError as exc:
            self._give_up(f"the worktree cannot be watched: {exc.strerror or exc}")
        return self._valid

    def take(self) -> set[bytes] | None:
        """The paths changed since the last ``take`` or ``start``; ``None``: not known."""
        self._drain()
        if not self._valid:
            return None
        dirty, self._dirty = self._dirty, set()
        return dirty

    def until_mark(self, name: bytes, timeout: float) -> bool:
        """Read events until ``name`` is seen made in ``sync_dir``; whether it was, within
        ``timeout`` seconds, with the watch still valid (the events read count for ``take``)."""
        deadline = time.monotonic() + timeout
        while self._valid and self._ino is not None and self._sync_wd is not None:
            if name in self._marks:
                self._marks.clear()  # other watches' marks in a shared directory too
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._drain(wait_ms=max(1, int(left * 1000)))
        return False

    def close(self) -> None:
        """Stop watching; ``take`` returns ``None`` until ``start``."""
        if self._ino is not None:
            self._ino.close()
        self._ino = None
        self._paths = {}
        self._dirty = set()
        self._valid = False
        self._sync_wd = None
        self._marks = set()
        self.reason = self.reason or "closed"

    # --- events -----------------------------------------------------------------------

    def _drain(self, wait_ms: int = 0) -> None:
        if self._ino is None or not self._valid:
            return
        try:
            events = self._ino.read_events(wait_ms)
        except OSError as exc:
            self._give_up(f"the watch could not be read: {exc.strerror or exc}")
            return
        for event in events:
            self._apply(event)
            if not self._valid:
                return
        if len(self._dirty) > self.max_dirty:
            self._give_up(f"more than {self.max_dirty} paths changed")

    def _apply(self, event: Event) -> None:
        mask = event.mask
        if mask & inotify.IN_Q_OVERFLOW:
            self._give_up("the kernel's event queue overflowed")
            return
        if self._sync_wd is not None and event.wd == self._sync_wd:
            if mask & inotify.IN_IGNORED:
                self._give_up("the sync directory is no longer watched")
            elif mask & inotify.IN_CREATE:
                self._marks.add(event.name)
            return
        where = self._paths.get(event.wd)
        if where is None:
            if mask & inotify.IN_IGNORED:
                return
            self._give_up("an event came from an unknown watch")
            return
        if mask & inotify.IN_IGNORED:
            del self._paths[event.wd]
            if where == b"":
                self._give_up("the worktree is no longer watched")
            return
        if mask & (inotify.IN_MOVE_SELF | inotify.IN_UNMOUNT):
            self._give_up("a watched directory was moved or unmounted")
            return
        if mask & inotify.IN_DELETE_SELF:
            if where == b"":
                self._give_up("the worktree was deleted")
            return  # the parent reports the deletion by name
        if not event.name:
            return  # the directory's own mode or times: not part of any tree
        if event.name in _SPECIAL:
            self._give_up(f"{event.name.decode()} changed")
            return
        path = where + b"/" + event.name if where else event.name
        if mask & inotify.IN_ISDIR and mask & (inotify.IN_MOVED_FROM | inotify.IN_MOVED_TO):
            self._give_up("a directory was renamed")
            return
        self._dirty.add(path)
        if mask & inotify.IN_ISDIR and mask & inotify.IN_CREATE:
            try:
                self._watch_tree(path)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    return  # gone again, or not a directory now: the path is in the set
                self._give_up(f"{os.fsdecode(path)} cannot be watched: {exc.strerror or exc}")

    def _give_up(self, reason: str) -> None:
        self._valid = False
        self.reason = reason

    # --- watching -----------------------------------------------------------------------

    def _watch_tree(self, top: bytes) -> None:
        """Watch ``top`` and every directory below it (``OSError`` when one cannot be)."""
        assert self._ino is not None
        pending = [top]
        while pending:
            rel = pending.pop()
            full = self.root + b"/" + rel if rel else self.root
            if len(self._paths) >= self.max_watches:
                raise OSError(errno.ENOSPC, f"more than {self.max_watches} directories")
            try:
                wd = self._ino.add_watch(full, _MASK)
            except OSError as exc:
                if rel != top and exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    continue  # removed meanwhile: the watched parent reports it
                raise
            self._paths[wd] = rel
            children = [name for name in _subdirectories(full) if name != b".git"]
            if rel and _has_entry(full, b".git"):
                continue  # a nested repository: its own directory only
            below = (rel + b"/" + name if rel else name for name in children)
            pending.extend(path for path in below if path not in self._skip)


def _subdirectories(full: bytes) -> Iterator[bytes]:
    try:
        with os.scandir(full) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        yield entry.name
                except OSError:
                    continue
    except (FileNotFoundError, NotADirectoryError):
        return


def _has_entry(full: bytes, name: bytes) -> bool:
    try:
        os.lstat(full + b"/" + name)
    except OSError:
        return False
    return True
