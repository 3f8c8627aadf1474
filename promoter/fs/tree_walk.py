"""Walking a directory tree of any depth by descriptors, with a stack of its own.

``Walk(top, where)`` visits every entry below the open directory ``top``, depth first.
Each directory is opened below the one holding it (``open_dir_component``: ``O_NOFOLLOW``,
and with ``openat2`` no symlink or mount crossing) and each entry is ``lstat``-ed
relative to its open directory, so a symlink is seen as itself and never followed. The
walk keeps its own stack, not Python's: a chain thousands of levels deep (paths far past
``PATH_MAX``) is walked with at most ``HELD_OPEN`` + 2 descriptors. A level above those
is reopened through ``..`` and accepted only when it is the very directory (device,
inode, mount) the walk left there; a tree moved during the walk stops it with
``PathUnsafe`` instead of leading it outside.

A directory on another mount, or one that cannot be opened, is not entered: its path is
added to ``kept`` and the levels above it are marked unclean. With ``enter_unreadable``,
a directory this process may not read or search (mode 000 left in a sandbox) is given
``u+rwx`` first, through an ``O_PATH`` descriptor of the directory itself; its level
records the mode it had (``mode_before``) for the caller to give back.

Deliberately not here: what happens to an entry (the caller's ``on_entry`` and
``on_leave``: ``own_tree`` removes or disarms, ``run_manage`` sums sizes), or whether
the tree is the caller's to change.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from promoter.domain.record_type import field, record
from promoter.errors import PathUnsafe
from promoter.fs.syscalls import mount_id, open_dir_component

__all__ = ["HELD_OPEN", "Level", "Walk"]

HELD_OPEN = 64  # levels whose descriptors stay open; deeper ones are reopened through ".."
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@record
class Level:
    """One directory of the walk: open while the walk is in it or near the top."""

    fd: int | None
    name: str  # its name in the level above ("" for the top)
    ident: tuple[int, int]  # (st_dev, st_ino)
    names: list[str] = field(default_factory=list)  # entries still to visit, last first
    clean: bool = True  # False once something below it was kept
    mode_before: int | None = None  # its mode before the walk made it enterable


OnEntry = Callable[[Level, str, os.stat_result], bool]
OnLeave = Callable[[Level, Level], bool]


def _listing(fd: int) -> list[str]:
    return sorted(os.listdir(fd), reverse=True)  # popped from the end: in name order


class Walk:
    """A depth-first walk below the open directory ``top`` (which stays the caller's)."""

    def __init__(self, top: int, where: str, *, enter_unreadable: bool = False) -> None:
        info = os.fstat(top)
        self.where = where
        self.device, self.mount = info.st_dev, mount_id(top)
        self.enter_unreadable = enter_unreadable
        self.kept: list[str] = []
        self._stack = [Level(top, "", (info.st_dev, info.st_ino), _listing(top))]

    def path(self, name: str = "") -> str:
        """The path of ``name`` in the current level, for messages."""
        parts = [self.where, *(level.name for level in self._stack[1:])]
        return "/".join([*parts, name] if name else parts)

    def run(self, on_entry: OnEntry, on_leave: OnLeave) -> bool:
        """Visit everything; False when something below the top was kept.

        ``on_entry(level, name, info)`` is called for each entry that is not a directory
        and ``on_leave(parent, child)`` once a directory's entries are done (``child.fd``
        still open); either returns False to mark its level unclean.
        """
        stack = self._stack
        try:
            while stack:
                level = stack[-1]
                assert level.fd is not None
                if level.names:
                    name = level.names.pop()
                    try:
                        info = os.stat(name, dir_fd=level.fd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if not stat.S_ISDIR(info.st_mode):
                        if not on_entry(level, name, info):
                            level.clean = False
                        continue
                    child = self._enter(level, name)
                    if child is None:
                        level.clean = False
                        continue
                    if len(stack) > HELD_OPEN:  # the top and the first levels stay open
                        os.close(level.fd)
                        level.fd = None
                    stack.append(child)
                    continue
                if len(stack) == 1:
                    return level.clean
                stack.pop()
                parent = stack[-1]
                try:
                    if parent.fd is None:
                        parent.fd = self._reopen(level, parent)
                    if not on_leave(parent, level) or not level.clean:
                        parent.clean = False
                finally:
                    assert level.fd is not None
                    os.close(level.fd)
            return True  # unreachable: the top level returns above
        finally:
            for level in stack[1:]:
                if level.fd is not None:
                    os.close(level.fd)
            del stack[1:]

    def _enter(self, level: Level, name: str) -> Level | None:
        """The directory ``name`` of ``level`` opened, or None when it is kept."""
        assert level.fd is not None
        mode_before = None
        try:
            try:
                fd = open_dir_component(level.fd, name, DIR_FLAGS)
            except PermissionError:
                if not self.enter_unreadable:
                    raise
                mode_before = self._make_enterable(level.fd, name)
                fd = open_dir_component(level.fd, name, DIR_FLAGS)
        except OSError:  # a mount crossing, a swap under the walk, no permission: keep it
            self.kept.append(self.path(name))
            return None
        try:
            info = os.fstat(fd)
            if info.st_dev != self.device or (
                self.mount is not None and mount_id(fd) != self.mount
            ):
                raise OSError("another mount")
            names = _listing(fd)
        except OSError:
            os.close(fd)
            self.kept.append(self.path(name))  # a bind mount inside the tree: not entered
            return None
        return Level(fd, name, (info.st_dev, info.st_ino), names, mode_before=mode_before)

    def _make_enterable(self, holder: int, name: str) -> int:
        """Give the directory ``name`` ``u+rwx`` through a descriptor of itself; its mode."""
        fd = open_dir_component(holder, name, _PATH_FLAGS)
        try:
            info = os.fstat(fd)
            if info.st_dev != self.device:
                raise OSError("another mount")
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(info.st_mode) | stat.S_IRWXU)
            return stat.S_IMODE(info.st_mode)
        finally:
            os.close(fd)

    def _reopen(self, child: Level, parent: Level) -> int:
        """``parent`` reopened through ``child``'s ``..``, only if it is the same directory."""
        assert child.fd is not None
        fd = os.open("..", DIR_FLAGS, dir_fd=child.fd)
        info = os.fstat(fd)
        same = (info.st_dev, info.st_ino) == parent.ident
        try:
            same = same and (self.mount is None or mount_id(fd) == self.mount)
        except OSError:
            same = False
        if not same:
            os.close(fd)
            raise PathUnsafe(
                f"{self.where} moved while it was walked; the walk stopped there",
                path=self.where,
            )
        return fd
