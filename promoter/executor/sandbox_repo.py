"""The sandbox's repository, taken back from the command before promoter's git reads it.

This module owns two moments of a sandbox clone's ``.git`` (protocol: runs#sandbox-boundary):

- ``seal`` right after the clone: the clone's ``config`` is kept beside the sandbox in
  ``<run>/git-config`` (outside what the command can see), and the clone is checked to
  own its objects (no ``objects/info/alternates``).
- ``restore`` after every command, before the builder runs git in the clone: ``.git``
  and its ``objects``, ``refs`` and ``info`` must be real directories (not symlinks, not a
  ``gitdir:`` file) and ``HEAD``/``index`` regular files, else ``repository_invalid``;
  the kept ``config`` is written back over whatever the command left (its hooks path,
  filters, fsmonitor, includes, ``core.worktree`` never apply), and the files that would
  widen what git reads are removed: ``objects/info/alternates`` and
  ``http-alternates``, ``info/attributes``, ``info/grafts``, ``commondir``,
  ``gitdir``, ``shallow``. Promoter owns the sandbox, so these are its own to remove:
  each is removed through ``promoter.fs.own_entry`` (reached below the clone's ``.git``
  by descriptors, never through a link: a linked directory on the way is refused).

Hooks are not removed: no git command promoter runs executes one, and every one runs
with ``core.hooksPath=/dev/null`` besides. It deliberately does not touch the
worktree's files or the index (the builder reads those as data, under its own private
configuration and attributes) and never goes near the person's repository.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from promoter.errors import ConfigError, PathUnsafe, RepositoryInvalid
from promoter.fs import flush
from promoter.fs.own_entry import OwnTree

__all__ = ["KEPT_CONFIG", "restore", "seal"]

KEPT_CONFIG = "git-config"
_WIDENING = (
    "objects/info/alternates",
    "objects/info/http-alternates",
    "info/attributes",
    "info/grafts",
    "commondir",
    "gitdir",
    "shallow",
)
_DIRECTORIES = ("", "objects", "refs", "info")
_FILES = ("HEAD", "index")


def seal(home: Path, clone: Path) -> None:
    """Keep the fresh clone's config beside it; refuse a clone that borrows objects."""
    git = clone / ".git"
    if (git / "objects" / "info" / "alternates").exists():
        raise ConfigError(f"the sandbox clone {clone} borrows objects (objects/info/alternates)")
    data = (git / "config").read_bytes()
    _write(home / KEPT_CONFIG, data)


def restore(home: Path, clone: Path) -> list[str]:
    """Take the clone's ``.git`` back; the names of what was reset or removed."""
    git = clone / ".git"
    for name in _DIRECTORIES:
        path = git / name if name else git
        mode = _lstat(path)
        if mode is None or not stat.S_ISDIR(mode):
            raise RepositoryInvalid(
                f"the sandbox's {_show(name or '.git')} is not a directory any more "
                "(a symlink or a gitdir file?); nothing was read through it",
                path=str(path),
            )
    for name in _FILES:
        mode = _lstat(git / name)
        if mode is not None and not stat.S_ISREG(mode):
            raise RepositoryInvalid(
                f"the sandbox's .git/{name} is not a regular file", path=str(git / name)
            )
    changed: list[str] = []
    kept = (home / KEPT_CONFIG).read_bytes()
    config = git / "config"
    if _lstat(config) is None or not stat.S_ISREG(_lstat(config) or 0) or _read(config) != kept:
        _write(config, kept)
        changed.append("config")
    with OwnTree.open(git) as own:
        for name in _WIDENING:
            if _remove_widening(own, name):
                changed.append(name)
    return changed


def _remove_widening(git: OwnTree, name: str) -> bool:
    """Remove ``.git/name`` (a file) from the sandbox's repository; False when absent."""
    path = os.path.join(git.path, name)
    *parents, leaf = name.split("/")
    try:
        folder = git.directory(parents)
    except FileNotFoundError:
        return False
    except (OSError, PathUnsafe) as exc:
        raise RepositoryInvalid(
            f"the sandbox's {_show(os.path.dirname(name))} is not a directory of its own "
            "(a symlink or a mount?); nothing was read through it",
            path=os.path.dirname(path),
        ) from exc
    with folder:
        mode = folder.mode(leaf)
        if mode is None:
            return False
        if stat.S_ISDIR(mode):
            raise RepositoryInvalid(f"the sandbox's .git/{name} is a directory", path=path)
        return folder.remove_entry(leaf)


def _show(name: str) -> str:
    return name if name == ".git" else f".git/{name}"


def _lstat(path: Path) -> int | None:
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(1 << 20)
    finally:
        os.close(fd)


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` (never through a link at it) with ``data``, durably."""
    temp = path.with_name(f".{path.name}.promoter-restore")
    if _lstat(temp) is not None and not stat.S_ISDIR(_lstat(temp) or 0):
        # the sandbox is promoter's: whatever sits at its temp name there goes
        with OwnTree.open(path.parent) as own, own.directory([]) as folder:
            folder.remove_entry(temp.name)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        flush.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
