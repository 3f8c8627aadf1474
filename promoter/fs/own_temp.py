"""A temp file promoter created itself in one of its own private directories.

``OwnTemp.create(directory)`` makes a fresh file (``scratch.scratch_file``: ``O_EXCL``)
and records its device and inode; ``discard`` unlinks the name only while it still names that very
inode (anything else found there is left alone), and ``place`` renames it to its final
name in the same directory tree.

Deliberately not here: anything in a user's worktree (``promoter.fs.atomic`` and
``promoter.fs.delete`` write and remove there, journaled), and what the bytes are.
"""

from __future__ import annotations

import contextlib
import os

from promoter.domain.record_type import record
from promoter.fs.scratch import scratch_file

__all__ = ["OwnTemp"]


@record(frozen=True)
class OwnTemp:
    """A temp file made here: its path, its open descriptor and its (device, inode)."""

    path: str
    fd: int
    identity: tuple[int, int]

    @classmethod
    def create(cls, directory: str, prefix: str) -> OwnTemp:
        fd, path = scratch_file(directory, prefix)
        info = os.fstat(fd)
        return cls(path, fd, (info.st_dev, info.st_ino))

    def place(self, destination: str) -> None:
        os.rename(self.path, destination)

    def discard(self) -> None:
        """Unlink the temp if its name still holds the file created here."""
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(self.path)
            if (info.st_dev, info.st_ino) == self.identity:
                os.unlink(self.path)
