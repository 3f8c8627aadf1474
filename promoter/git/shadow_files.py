"""The shadow repository's own files: created atomically, its config and attributes kept.

``ensure_shadow`` creates a shadow bare repository (staged in a temp directory, then
renamed into place; a racing creator's is kept) or refreshes its ``config`` and
``info/attributes``; ``put_file`` replaces a small file (temp, fsync, rename) only when
its bytes differ. The configuration and attributes are ``worktree_tree.ShadowTree``'s.
Deliberately not here: running git in the shadow, capture and diff (``shadow.py``), and
any file outside the shadow.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import threading

from promoter.errors import StorageError
from promoter.git.worktree_tree import _ATTRIBUTES, _CONFIG

__all__ = ["OWN_EXCLUDES", "ensure_shadow", "put_file", "unlink_missing_ok"]

# Appended to ShadowTree's configuration: the shadow has no worktree of its own.
_EXTRA_CONFIG = "[core]\n\tbare = true\n\tlogAllRefUpdates = false\n"
OWN_EXCLUDES = (
    "# promoter: never snapshot a git directory or promoter's own temp files\n"
    "/.git\n.git\n.promoter-tmp-*\n"
)


def ensure_shadow(path: str) -> None:
    """Create the shadow at ``path`` atomically, or refresh its config and attributes."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _create(path)
        return
    if not stat.S_ISDIR(st.st_mode):
        raise StorageError(f"{path} is not a directory", path=path)
    put_file(os.path.join(path, "config"), (_CONFIG + _EXTRA_CONFIG).encode())
    put_file(os.path.join(path, "info", "attributes"), _ATTRIBUTES.encode())


def _create(path: str) -> None:
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".init-", dir=parent)
    try:
        for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
            os.makedirs(os.path.join(staging, sub), mode=0o700)
        put_file(os.path.join(staging, "HEAD"), b"ref: refs/heads/main\n")
        put_file(os.path.join(staging, "config"), (_CONFIG + _EXTRA_CONFIG).encode())
        put_file(os.path.join(staging, "info", "attributes"), _ATTRIBUTES.encode())
        put_file(os.path.join(staging, "info", "exclude"), OWN_EXCLUDES.encode())
        try:
            os.rename(staging, path)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            ensure_shadow(path)  # another thread or process created it first
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def put_file(path: str, data: bytes) -> bool:
    """Replace ``path`` with ``data`` (temp, fsync, rename) unless it already holds it.

    Whether it was replaced.
    """
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except FileNotFoundError:
        pass
    temp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        unlink_missing_ok(temp)
        raise
    return True


def unlink_missing_ok(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
