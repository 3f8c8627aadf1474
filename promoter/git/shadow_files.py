"""The shadow repository's own files: created atomically, its config and attributes kept.

``ensure_shadow`` creates a shadow bare repository (staged in a temp directory named by
``promoter.store.state_temps.temp_name``, then renamed into place; a racing creator's is
kept) or refreshes its ``config`` and ``info/attributes``; ``put_file`` replaces a small
file (``promoter.store.durable.write_replace``) only when its bytes differ. The
configuration and attributes are ``worktree_tree.ShadowTree``'s.
Deliberately not here: running git in the shadow, capture and diff (``shadow.py``), and
any file outside the shadow.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path

from promoter.errors import StorageError
from promoter.git.worktree_tree import _ATTRIBUTES, _CONFIG
from promoter.store.durable import fsync_dir, make_dirs, write_replace
from promoter.store.state_temps import temp_name

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
    make_dirs(Path(parent), mode=0o700, fault="shadow")
    # staged under a name that names this process: a start-up sweep removes it once the
    # process is gone (``promoter.store.state_temps``)
    staging = os.path.join(parent, temp_name())
    os.mkdir(staging, 0o700)
    try:
        for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
            os.makedirs(os.path.join(staging, sub), mode=0o700)
        put_file(os.path.join(staging, "HEAD"), b"ref: refs/heads/main\n")
        put_file(os.path.join(staging, "config"), (_CONFIG + _EXTRA_CONFIG).encode())
        put_file(os.path.join(staging, "info", "attributes"), _ATTRIBUTES.encode())
        put_file(os.path.join(staging, "info", "exclude"), OWN_EXCLUDES.encode())
        try:
            os.rename(staging, path)
            fsync_dir(Path(parent))
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            ensure_shadow(path)  # another thread or process created it first
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def put_file(path: str, data: bytes) -> bool:
    """Replace ``path`` with ``data`` durably (``promoter.store.durable.write_replace``)
    unless it already holds it.

    Whether it was replaced.
    """
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except FileNotFoundError:
        pass
    write_replace(Path(path), data, mode=0o600, fault="shadow")
    return True


def unlink_missing_ok(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
