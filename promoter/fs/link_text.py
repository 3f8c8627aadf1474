"""Reading the target text of a link in the worktree, never following it.

``read_link_text(root, rel)``: the text of the symlink at ``rel`` now, or None when
nothing there is a link (missing, a file, a directory, a missing or non-directory
component on the way). The directories on the way are reached by the descriptor chain
of ``Root`` (``O_DIRECTORY|O_NOFOLLOW`` per component, mounts and nested repositories
refused with ``PathUnsafe``, as for every other read), the leaf is ``lstat``-ed and
``readlinkat``-ed by name in its directory, and the chain is verified after reading.

Used to resolve links as the tree will be after a promotion
(``promoter.engine.verify.link_resolution``). Deliberately not here: what a target means
(``promoter.domain.resolve``), and any change to a link (``atomic.py``).
"""

from __future__ import annotations

import errno
import os
import stat

from promoter.errors import PathUnsafe, TargetDrift
from promoter.fs.root import Root

__all__ = ["read_link_text"]

_ATTEMPTS = 4


def read_link_text(root: Root, rel: str) -> bytes | None:
    """The target text of the link at ``rel``, or None when there is no link there.

    A link on the way raises ``PathUnsafe`` (the chain refuses it); a leaf that keeps
    being replaced while read raises ``PathUnsafe`` too.
    """
    try:
        chain = root._open_chain(rel)
    except TargetDrift:  # a component on the way is not a directory: nothing below it
        return None
    if chain is None:
        return None
    with chain:
        for _ in range(_ATTEMPTS):
            try:
                st = os.stat(chain.name, dir_fd=chain.fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                chain.verify_chain()
                return None
            if not stat.S_ISLNK(st.st_mode):
                chain.verify_chain()
                return None
            try:
                text = os.readlink(os.fsencode(chain.name), dir_fd=chain.fd)
                again = os.stat(chain.name, dir_fd=chain.fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno == errno.EINVAL:  # replaced by a non-link meanwhile: read again
                    continue
                raise
            if (again.st_dev, again.st_ino, again.st_ctime_ns) == (
                st.st_dev,
                st.st_ino,
                st.st_ctime_ns,
            ):
                chain.verify_chain()
                return text
    raise PathUnsafe("a link kept changing while it was read", path=rel)
