"""Descriptor chains from a worktree root: one directory component at a time.

This module and ``root.py`` own every lookup promoter makes in a worktree: the root is
opened once and each directory below it is reached relative to the previous descriptor,
``O_DIRECTORY|O_NOFOLLOW`` (protocol: promotion#descriptor-chains). A symlink on the way, a
mount (told by mount id: protocol: promotion#mount-crossings) or a nested repository
(protocol: promotion#repository-shape) raises ``PathUnsafe``; a missing directory is a
``missing`` leaf to ``read_state`` and ``TargetDrift`` (``missing_parent``) to
``open_parent``. A directory whose owner took away their own read or search permission
(``chmod 000 DIR``) is ``PathUnsafe`` too, told from the ``fstat`` each component gets
anyway: a daemon running as root would otherwise go in. One they only made read-only
(``chmod a-w``, mode 555) is read and written under as before the check
(docs/decisions/a-read-only-directory-is-read.md). A ``ParentChain`` re-checks a held
chain per component (device, inode, mount id) and re-walks only on a difference, with
one ``openat2`` beneath the root where the kernel has it. Fault point: ``after_mkdir``.

Not here: the root and the walk (``root.py``), changing files (``atomic.py``), the lock
(``lock.py``), and what a state means for a promotion. Leaf states live in ``leaf.py``.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
from typing import Protocol

from promoter.domain.closing import Closing
from promoter.domain.record_type import record
from promoter.errors import PathUnsafe, TargetDrift
from promoter.fs import openat2
from promoter.fs.leaf import (
    ExpectedState,
    LeafState,
    os_error,
    read_leaf,
)
from promoter.fs.syscalls import lookup_refuses_mounts, open_dir_component

__all__ = [
    "ON_ANOTHER_MOUNT",
    "ChainRoot",
    "ExpectedState",
    "HoldsFd",
    "InPlace",
    "LeafState",
    "ParentChain",
    "ParentView",
    "Walked",
    "open_dir",
]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
ON_ANOTHER_MOUNT = "a path crosses a mount (a mount point or a bind mount)"
_OWNER_OPEN = stat.S_IRUSR | stat.S_IXUSR  # a directory its owner cannot read or search is closed


def open_dir(dir_fd: int, name: str, rel: str, at: str, root: ChainRoot) -> int | None:
    """Open one directory component below ``dir_fd``; None when it does not exist.

    With ``openat2`` the lookup itself refuses to enter a mount (``RESOLVE_NO_XDEV``);
    the device id is compared either way. A directory closed to its owner is refused
    naming its worktree-absolute path in the ``chmod`` to run, which works from anywhere.
    """
    root_dev = root.dev
    try:
        fd = open_dir_component(dir_fd, name, DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise PathUnsafe(ON_ANOTHER_MOUNT, path=rel, at=at) from exc
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise os_error("opening a directory", rel, exc) from exc
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc2:
            raise os_error("inspecting a directory", rel, exc2) from exc2
        if stat.S_ISLNK(st.st_mode):
            raise PathUnsafe("a path component is a symlink", path=rel, at=at) from exc
        if stat.S_ISDIR(st.st_mode):
            raise PathUnsafe("a path component changed while opened", path=rel, at=at) from exc
        raise TargetDrift(
            "a path component is not a directory", path=rel, found="not_a_directory", at=at
        ) from exc
    st = os.fstat(fd)
    if st.st_dev != root_dev:
        os.close(fd)
        raise PathUnsafe("a directory is on another device (a mount)", path=rel, at=at)
    if st.st_mode & _OWNER_OPEN != _OWNER_OPEN:  # the daemon may be root: it would go in
        os.close(fd)
        mode = f"{stat.S_IMODE(st.st_mode):03o}"
        raise PathUnsafe(
            f"the directory {at!r} is closed to its owner (mode {mode}): nothing is read or "
            "written under it; next: open it again (chmod u+rwx "
            f"{shlex.quote(os.path.join(root.path, at))}) and promote again",
            path=rel,
            at=at,
            mode=mode,
        )
    return fd


@record
class Walked:
    """A walk's end: the held directory, the identities on the way, what it created."""

    fd: int
    ids: list[tuple[int, int]]
    created: list[str]


class ChainRoot(Protocol):
    """What a chain needs of the held worktree root (``root.Root``)."""

    path: str
    """The worktree root's absolute path (named to the person, never opened by it here)."""
    rewalks: int
    one_call_rechecks: int

    @property
    def fd(self) -> int: ...

    @property
    def dev(self) -> int: ...

    @property
    def ino(self) -> int: ...

    def recheck(self) -> None: ...

    def check_mount(self, dir_fd: int, name: str, rel: str, at: str | None = None) -> None: ...


class InPlace(Protocol):
    """A directory a pass holds (``held.HeldDir``): its chain re-checked without opens."""

    @property
    def fd(self) -> int: ...

    def still_in_place(self) -> bool: ...


class ParentView(Protocol):
    """The held parent of one target as its collaborators read it (``aside.py``,
    ``temps.py``, ``delete.py``): a ``ParentChain``, or the ``atomic.Parent`` holding one."""

    @property
    def root(self) -> ChainRoot: ...

    @property
    def fd(self) -> int: ...

    @property
    def rel(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def dir_parts(self) -> list[str]: ...

    def leaf_state(self) -> LeafState: ...

    def verify_chain(self) -> None: ...


class HoldsFd(Closing):
    """Closes ``fd`` once, on ``close()`` or at the end of a ``with`` block."""

    fd: int

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class ParentChain(HoldsFd):
    """An open descriptor of the directory holding ``name``, reached from a ``Root``.

    ``ids`` holds the (dev, ino) of every directory from the root's first child down to
    the parent, as they were when the chain was opened; ``verify_chain`` re-walks by
    name and requires the same identities.

    With ``held`` (a directory a pass holds for all its steps, ``promoter.fs.held``) the
    descriptor is borrowed from it: ``close`` leaves it open, and ``verify_chain`` first
    asks ``held.still_in_place()`` (identity and mount id per component, no opens),
    re-walking only when that finds a difference, so a refusal reads as it always did.
    """

    def __init__(
        self,
        root: ChainRoot,
        rel: str,
        fd: int,
        ids: list[tuple[int, int]],
        created_dirs: list[str],
        held: InPlace | None = None,
    ) -> None:
        self.root = root
        self.rel = rel
        self.fd = fd
        self.name = rel.rsplit("/", 1)[-1]
        self.dir_parts = rel.split("/")[:-1]
        self.ids = ids
        self.created_dirs = created_dirs
        self.held = held

    def close(self) -> None:
        if self.held is not None:  # borrowed: the pass closes its directories once
            self.fd = -1
            return
        super().close()

    def verify_chain(self) -> None:
        """Raise ``PathUnsafe`` unless the root and every held directory are still in place.

        The re-walk reads no mount ids where its lookups refuse mount crossings
        (``openat2``): the held descriptors were checked when opened and every re-walked
        directory must be the same (device, inode). Elsewhere each re-walked directory's
        mount id is read too, since a directory bind-mounted onto itself keeps both. Where the
        kernel has ``openat2``, one call beneath the root answers first
        (``openat2.chain_in_place``: the same identities compared); the walk runs only
        when that finds a difference, so a refusal is the walk's own.
        """
        if self.held is not None and self.held.still_in_place():
            return
        self.root.rewalks += 1
        self.root.recheck()
        root_id = (self.root.dev, self.root.ino)
        if openat2.chain_in_place(self.root.fd, root_id, self.dir_parts, self.ids, self.fd):
            self.root.one_call_rechecks += 1
            return
        current = os.dup(self.root.fd)
        try:
            for depth, name in enumerate(self.dir_parts):
                at = "/".join(self.dir_parts[: depth + 1])
                try:
                    nxt = open_dir(current, name, self.rel, at, self.root)
                except TargetDrift as exc:
                    raise PathUnsafe("a held directory was replaced", path=self.rel, at=at) from exc
                os.close(current)
                current = -1
                if nxt is None:
                    raise PathUnsafe("a held directory was moved", path=self.rel, at=at)
                current = nxt
                if not lookup_refuses_mounts():  # a bind mount of a held directory onto
                    self.root.check_mount(current, "", self.rel, at)  # itself: same ids
                st = os.fstat(current)
                if (st.st_dev, st.st_ino) != self.ids[depth]:
                    raise PathUnsafe("a held directory was swapped", path=self.rel, at=at)
            held, found = os.fstat(self.fd), os.fstat(current)
            if (held.st_dev, held.st_ino) != (found.st_dev, found.st_ino):
                raise PathUnsafe("the held parent is not the directory at its path", path=self.rel)
        except OSError as exc:
            raise os_error("re-walking the parent chain", self.rel, exc) from exc
        finally:
            if current >= 0:
                os.close(current)

    def leaf_state(self) -> LeafState:
        """The state of the leaf in the held parent (not re-walking the chain).

        Checked after the read: nothing may be mounted at the leaf's name (a bind-mounted
        single file has the root's device id but its own mount id).
        """
        state = read_leaf(self.fd, self.name, self.rel, self.root.dev)
        self.root.check_mount(self.fd, self.name, self.rel)
        return state
