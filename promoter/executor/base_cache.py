"""The read-only bases of layered sandboxes: one checkout of a commit's tree, shared by runs.

This module owns ``<state>/bases/<tree id>/``: ``tree/`` (the files as git stores them,
with the checkout's index as ``tree/.git/index``) and ``base.json``. A base is a whole
checkout or a layer of changes over an older base (``base_delta.py``, at most
``_MAX_DEPTH`` deep); it is built under a temp name and placed once, and ``sweep``
removes what no run needs (protocol: runs#shared-bases). ``lock`` serializes making and
sweeping with the runs' creation. Fault points: ``base_built``, ``base_placed``.

Not here: the layers above a base (``layers.py``), reading a base for a bundle
(``upper.py``), anything in the person's repository (only its objects are read).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from promoter import faults
from promoter.errors import PathUnsafe
from promoter.fs import flush
from promoter.fs.own_tree import remove_own_tree
from promoter.fs.syscalls import RENAME_NOREPLACE, renameat2
from promoter.git.records import require_oid
from promoter.git.runner import run_git

__all__ = ["Base", "bases_dir", "ensure", "load", "lock", "sweep"]

MARKER = "base.json"
TEMP_PREFIX = ".promoter-tmp-base-"
_LOCK = ".lock"
_SCHEMA = "PromoterSandboxBaseV1"
_KEEP = 4
_MAX_DEPTH = 8  # a base over more layers than this is checked out whole
_GITLINK = "160000"
# nothing converted on checkout: a file's bytes are its blob's (protocol: runs#layered-sandboxes)
_ATTRIBUTES = b"* -text -eol -crlf -filter -ident -working-tree-encoding\n"
_CONFIG = (
    "-c", "core.autocrlf=false", "-c", "core.safecrlf=false", "-c", "core.symlinks=true",
    "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.checkStat=default",
    "-c", "index.version=2", "-c", "core.splitIndex=false", "-c", "core.untrackedCache=false",
)  # fmt: skip


class Base(NamedTuple):
    """A base in place: its directory, the tree it holds and that tree's gitlinks."""

    root: Path
    tree: str
    gitlinks: tuple[str, ...]
    parent: str | None = None
    """The base this one is a delta over (None: a whole checkout)."""
    chain: tuple[Path, ...] = ()
    """Its layers, top first: its own ``tree/`` and its parents' (``load`` fills it)."""

    @property
    def files(self) -> Path:
        """This base's own layer (the whole tree, or the changes over its parent)."""
        return self.root / "tree"

    @property
    def depth(self) -> int:
        return len(self.chain)


def bases_dir(state_dir: Path) -> Path:
    return state_dir / "bases"


@contextlib.contextmanager
def lock(state_dir: Path) -> Iterator[None]:
    """Hold ``<state>/bases/.lock``: no base is made or swept by another run meanwhile."""
    root = bases_dir(state_dir)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(root / _LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _load(root: Path, tree: str) -> Base | None:
    """The base at ``root`` (``<bases>/<tree>``) with its chain of parents; None when it,
    or a parent it needs, is missing or damaged."""
    chain: list[Path] = []
    first: Base | None = None
    at, wanted = root, tree
    while True:
        try:
            data = json.loads((at / MARKER).read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("schema") != _SCHEMA:
            return None
        if data.get("tree") != wanted or not (at / "tree").is_dir() or len(chain) > _MAX_DEPTH:
            return None
        chain.append(at / "tree")
        parent = data.get("parent")
        if first is None:
            gitlinks = tuple(str(p) for p in data.get("gitlinks", []))
            first = Base(root, tree, gitlinks, parent if isinstance(parent, str) else None)
        if not isinstance(parent, str):
            break
        at, wanted = root.parent / parent, parent
    return Base(first.root, first.tree, first.gitlinks, first.parent, tuple(chain))


def load(state_dir: Path, tree: str) -> Base | None:
    """The base of ``tree`` in ``state_dir`` with its chain; None when absent or damaged."""
    return _load(bases_dir(state_dir) / require_oid(tree, "tree"), tree)


def ensure(state_dir: Path, objects: str, tree: str, *, timeout: float = 1800.0) -> Base:
    """The base of ``tree`` (made from the person's ``objects`` when absent); call under
    ``lock``. Marks it used now (its ``base.json``'s modification time)."""
    tree = require_oid(tree, "tree")
    root = bases_dir(state_dir)
    found = _load(root / tree, tree)
    if found is None:
        found = _make(root, objects, tree, timeout)
    with contextlib.suppress(OSError):
        os.utime(found.root / MARKER)
    return found


def _git(args: list[str], env: dict[str, str], timeout: float) -> bytes:
    return run_git([*_CONFIG, *args], env=env, timeout=timeout).stdout


def _newest(root: Path, holds: Callable[[str], bool]) -> Base | None:
    """The base used last of a tree the person's objects hold (``holds``: a base of
    another repository guarded from this state directory is no parent), if its chain can
    take one more layer."""
    found: list[tuple[float, str]] = []
    for entry in os.scandir(root):
        if len(entry.name) == 40 and entry.is_dir(follow_symlinks=False):
            try:
                found.append((os.lstat(Path(entry.path) / MARKER).st_mtime, entry.name))
            except OSError:
                continue
    for _, name in sorted(found, reverse=True):
        base = _load(root / name, name)
        if base is not None and holds(name):
            return base if base.depth < _MAX_DEPTH else None
    return None


def _holder(env: dict[str, str], timeout: float) -> Callable[[str], bool]:
    """Whether the objects behind ``env``'s private git directory hold a tree."""

    def holds(tree: str) -> bool:
        found = run_git(
            ["cat-file", "-e", f"{tree}^{{tree}}"], env=env, timeout=timeout, check=False
        )
        return found.returncode == 0

    return holds


def _make(root: Path, objects: str, tree: str, timeout: float) -> Base:
    temp = Path(tempfile.mkdtemp(dir=root, prefix=TEMP_PREFIX))
    held = os.open(temp / _LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        os.write(held, json.dumps({"schema": _SCHEMA, "temp": True}).encode())
        git = temp / "git"
        (git / "objects" / "info").mkdir(parents=True)
        (git / "refs").mkdir()
        (git / "info").mkdir()
        (git / "HEAD").write_bytes(b"ref: refs/heads/main\n")
        (git / "objects" / "info" / "alternates").write_bytes(
            os.fsencode(os.path.realpath(objects)) + b"\n"
        )
        (git / "info" / "attributes").write_bytes(_ATTRIBUTES)
        files = temp / "tree"
        (files / ".git").mkdir(parents=True)
        index = files / ".git" / "index"
        env = {"GIT_DIR": str(git), "GIT_WORK_TREE": str(files), "GIT_INDEX_FILE": str(index)}
        parent = _newest(root, _holder(env, timeout))
        if parent is None:
            _git(["read-tree", tree], env, timeout)
            _git(["checkout-index", "--all", "--force", "--index"], env, timeout)
            staged = _git(["ls-files", "--stage", "-z"], env, timeout)
            gitlinks = [
                os.fsdecode(record.split(b"\t", 1)[1])
                for record in staged.split(b"\0")
                if record.startswith(_GITLINK.encode())
            ]
        else:
            from promoter.executor import base_delta  # only over an older base

            over = (parent.tree, parent.chain, parent.gitlinks)
            gitlinks = base_delta.lay(over, tree, files, env, timeout)
        later = time.time() + 2  # the index newer than every file: no entry is racy
        os.utime(index, (later, later))
        remove_own_tree(temp, "git", _is_private_git)
        marker: dict[str, object] = {"schema": _SCHEMA, "tree": tree, "gitlinks": gitlinks}
        if parent is not None:
            marker["parent"] = parent.tree
        (temp / MARKER).write_bytes(json.dumps(marker, sort_keys=True).encode())
        faults.point("base_built")
        fd = os.open(temp, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            flush.syncfs(fd)
        finally:
            os.close(fd)
        placed = _place(root, temp.name, tree)
        faults.point("base_placed")
    except BaseException:
        os.close(held)
        with contextlib.suppress(OSError, PathUnsafe):
            remove_own_tree(root, temp.name, _is_temp_base)
        raise
    os.close(held)
    if not placed:  # another run made it first: ours goes
        remove_own_tree(root, temp.name, _is_temp_base)
    found = _load(root / tree, tree)
    if found is None:
        raise PathUnsafe(f"{root / tree} is not a base of promoter's", path=str(root / tree))
    return found


def _place(root: Path, temp: str, tree: str) -> bool:
    """Rename ``temp`` to ``tree`` unless that name is taken; False when it was."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            renameat2(fd, temp, fd, tree, RENAME_NOREPLACE)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                return False
            raise
        flush.fsync(fd)
    finally:
        os.close(fd)
    return True


def _read_at(fd: int, name: str) -> bytes | None:
    try:
        leaf = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return None
    try:
        return os.read(leaf, 1 << 20)
    finally:
        os.close(leaf)


def _is_private_git(fd: int) -> bool:
    data = _read_at(fd, "HEAD")
    return data == b"ref: refs/heads/main\n"


def _is_temp_base(fd: int) -> bool:
    data = _read_at(fd, _LOCK)
    return data is not None and data.startswith(
        b'{"schema": "%s", "temp": true}' % _SCHEMA.encode()
    )


def _is_base(tree: str) -> Callable[[int], bool]:
    def proof(fd: int) -> bool:
        data = _read_at(fd, MARKER)
        try:
            loaded = json.loads(data) if data else None
        except ValueError:
            return False
        return isinstance(loaded, dict) and loaded.get("tree") == tree

    return proof


def sweep(state_dir: Path, used: set[str], *, keep: int = _KEEP) -> list[str]:
    """Remove bases no run uses (``used``: trees run records name), but the ``keep``
    newest by use, and temp bases whose builder is gone; call under ``lock``.

    Returns the names removed. A directory that is not provably a base is left alone.
    """
    root = bases_dir(state_dir)
    if not root.is_dir():
        return []
    removed: list[str] = []
    unused: list[tuple[float, str]] = []
    for entry in os.scandir(root):
        if entry.name.startswith(TEMP_PREFIX) and entry.is_dir(follow_symlinks=False):
            if _abandoned(Path(entry.path)):
                with contextlib.suppress(OSError, PathUnsafe):
                    remove_own_tree(root, entry.name, _is_temp_base)
                    removed.append(entry.name)
            continue
        if len(entry.name) != 40 or not entry.is_dir(follow_symlinks=False):
            continue
        if entry.name in used:
            continue
        try:
            stamp = os.lstat(Path(entry.path) / MARKER).st_mtime
        except OSError:
            continue
        unused.append((stamp, entry.name))
    unused.sort(reverse=True)
    needed = set(used) | {name for _, name in unused[:keep]}
    for name in list(needed):  # a base's parents stay with it
        base = _load(root / name, name)
        needed |= {p.parent.name for p in base.chain} if base is not None else set()
    for _, name in unused[keep:]:
        if name in needed:
            continue
        with contextlib.suppress(OSError, PathUnsafe):
            remove_own_tree(root, name, _is_base(name))
            removed.append(name)
    return removed


def _abandoned(temp: Path) -> bool:
    """Whether the temp base's builder is gone: its ``.lock`` can be taken."""
    try:
        fd = os.open(temp / _LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # still being built
    finally:
        os.close(fd)
    return True
