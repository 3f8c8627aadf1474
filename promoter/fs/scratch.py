"""Scratch space a process makes for itself and throws away, without ``tempfile``.

``scratch_dir`` makes a fresh private directory (mode 0700, a new name, as
``tempfile.mkdtemp``: under ``TMPDIR``, ``TEMP`` or ``TMP`` when set, else ``/tmp``,
``/var/tmp``, ``/usr/tmp`` or the current directory, the first that takes one).
``remove_scratch_dir`` removes such a directory and everything in it as
``shutil.rmtree(path, ignore_errors=True)`` does: by descriptors, never through a link
(a link is removed as an entry), whatever it cannot remove left in place. ``scratch_file``
makes a fresh file in a directory (``tempfile.mkstemp``: ``O_EXCL``, mode 0600) and
``anonymous_file`` a file with no name (``tempfile.TemporaryFile``; in memory).

Why it exists: ``tempfile`` imports ``shutil`` (and with it ``bz2`` and ``lzma``),
``random`` and ``weakref``, about 6 ms of processor time, paid by every ``promoter bundle
build`` for a directory and a few files it deletes again (docs/benchmarks.md, "The
command line's start").

Deliberately not here: anything a person owns (a worktree, a ``.git``), or deciding
that a directory is scratch: the caller made it with ``scratch_dir`` and nothing else
writes there but the git processes it starts.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import BinaryIO

__all__ = ["anonymous_file", "remove_scratch_dir", "scratch_dir", "scratch_file"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TRIES = 100  # names tried before a directory is given up (``tempfile.TMP_MAX`` is 10 000)


def _name(prefix: str) -> str:
    return prefix + os.urandom(6).hex()


def _candidates() -> list[str]:
    """Where ``tempfile.gettempdir`` looks, in its order (POSIX)."""
    found = [value for key in ("TMPDIR", "TEMP", "TMP") if (value := os.getenv(key))]
    found += ["/tmp", "/var/tmp", "/usr/tmp"]  # noqa: S108 (tempfile's own list)
    with contextlib.suppress(OSError):
        found.append(os.getcwd())
    return [os.path.abspath(place) for place in found]


@functools.cache
def _default_parent() -> str:
    """The first candidate a directory can be made in (made and removed to find it)."""
    for place in _candidates():
        for _ in range(_TRIES):
            probe = os.path.join(place, _name(".promoter-probe-"))
            try:
                os.mkdir(probe, 0o700)
            except FileExistsError:
                continue
            except OSError:
                break  # not writable, not there: the next candidate
            os.rmdir(probe)
            return place
    raise FileNotFoundError("no usable temporary directory found in " + ", ".join(_candidates()))


def scratch_dir(prefix: str, parent: str | None = None) -> str:
    """A new private directory (mode 0700) named ``prefix`` and random characters, in
    ``parent`` (else the temporary directory); its absolute path."""
    where = os.path.abspath(parent if parent is not None else _default_parent())
    for _ in range(_TRIES):
        path = os.path.join(where, _name(prefix))
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free name for a directory {prefix}* in {where}")


def scratch_file(directory: str, prefix: str) -> tuple[int, str]:
    """A new file (``O_EXCL``, mode 0600) named ``prefix`` and random characters in
    ``directory``: its open descriptor and its path."""
    for _ in range(_TRIES):
        path = os.path.join(directory, _name(prefix))
        try:
            return os.open(path, _FILE_FLAGS, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for a file {prefix}* in {directory}")


def anonymous_file() -> BinaryIO:
    """A file with no name, read and written in binary, gone when closed."""
    fd = os.memfd_create("promoter-scratch", os.MFD_CLOEXEC)
    return open(fd, "w+b")  # the caller closes it


def remove_scratch_dir(path: str) -> None:
    """Remove the directory ``path`` and all it holds; errors ignored, links not followed."""
    try:
        top = os.open(path, _DIR_FLAGS)
    except OSError:
        return
    try:
        _empty(top)
    finally:
        os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _empty(fd: int) -> None:
    """Remove what the directory open at ``fd`` holds, depth first, as far as it can."""
    try:
        with os.scandir(fd) as entries:
            found = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    except OSError:
        return
    for name, is_dir in found:
        if not is_dir:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
            continue
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)  # a link swapped in is not opened
        except OSError:
            continue
        try:
            _empty(child)
        finally:
            os.close(child)
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=fd)
