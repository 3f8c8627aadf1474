"""Several large files of a review diff from one ``git diff --no-index``, split per file.

``run`` hard-links each pair's stored blob files into a private directory made in the
blob store's ``tmp/`` (``o/NNNNNN`` and ``n/NNNNNN``, a missing side left out), runs one
hermetic ``git diff --no-index o n`` with its output spooled to a file there, removes
every name it made (through ``promoter.fs.own_entry``, keeping the spool open), and
checks the output against git's grammar before any of it is used: each section starts
with the header of one of its own names, in order, and each hunk holds exactly the lines
its ``@@`` counts. ``Batch.lines(k)`` then yields pair ``k``'s hunk lines byte for byte as
a ``git diff --no-index`` of that pair alone prints them (protocol: api#what-a-review-shows).
Anything unexpected (a link refused, a section out of order, a hunk that does not add
up, git failing) answers None and the caller diffs file by file.

A run killed at ``timeout`` is kept up to the kill: the pairs before the section being
written are ``whole``, that one ``stopped`` (its lines so far), the rest ``not_reached``.
Killed means ended by the timer's ``SIGKILL``: a git that exited by itself as the timer
fired is whole. Fault points: ``review_diff_deadline`` (the timer at its deadline, git
not killed yet), ``review_diff_waited`` (git ended, its timer not stopped yet).

Not here: which files are diffed, the budget's wording, rendering (``diff.py``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import BinaryIO, Literal

from promoter.errors import GitError, PathUnsafe
from promoter.faults import point
from promoter.fs.own_entry import Made, OwnDir, OwnTree
from promoter.git.runner import popen_git
from promoter.store import state_temps

__all__ = ["Batch", "Done", "run"]

Done = Literal["whole", "stopped", "not_reached"]
Pair = tuple[str | None, str | None]  # the old and new stored blob files (None: missing)
Ranges = dict[int, tuple[int, int]]  # a pair's hunk lines: [start, end) in the output
_HEADER = re.compile(rb"diff --git a/([on])/([0-9]{6}) b/([on])/([0-9]{6})\n")
_HUNK = re.compile(rb"@@ -[0-9]+(?:,([0-9]+))? \+[0-9]+(?:,([0-9]+))? @@.*\n", re.DOTALL)
_HEAD = (b"index ", b"new file mode ", b"deleted file mode ", b"old mode ", b"new mode ")
_FILES = (b"--- ", b"+++ ")
_OUT = "out"


class Batch:
    """The spooled output (its names already removed) and each pair's hunk lines in it."""

    def __init__(self, spool: BinaryIO, ranges: Ranges, done: list[Done], seconds: float) -> None:
        self.spool = spool
        self.ranges = ranges
        self.done = done
        self.seconds = seconds  # git's wall time, for the shared budget

    def lines(self, k: int) -> Iterator[str]:
        """Pair ``k``'s hunk lines, decoded as a ``git diff`` of it alone is read."""
        start, end = self.ranges.get(k, (0, 0))
        self.spool.seek(start)
        left = end - start
        while left > 0:
            raw = self.spool.readline(left)
            if not raw:
                return
            left -= len(raw)
            yield raw.decode("utf-8", "surrogateescape")

    def close(self) -> None:
        self.spool.close()


def _sides(pair: Pair) -> bytes:
    """The directories git names in a pair's header: both sides, only the new, only the old."""
    return b"on" if pair[0] and pair[1] else b"nn" if pair[1] else b"oo"


def _index(spool: BinaryIO, sides: list[bytes], killed: bool) -> tuple[Ranges, int] | None:
    """Each pair's byte range of hunk lines and the last pair with a section, or None when
    the output is not git's for pairs of ``sides`` (``_sides``; a cut end only when
    ``killed``)."""
    ranges: Ranges = {}
    k = -1
    begin: int | None = None  # where the current section's first hunk starts
    old = new = 0  # lines the current hunk still holds
    body = False  # the previous line was a hunk's line
    pos = 0
    for line in spool:
        if not line.endswith(b"\n"):
            if not killed:
                return None
            pos += len(line) if begin is not None else 0
            old = new = 0
            break
        if body and line.startswith(b"\\ "):
            body = False
        elif old or new:
            kind = line[:1]
            if kind == b" " and old and new:
                old, new = old - 1, new - 1
            elif kind == b"-" and old:
                old -= 1
            elif kind == b"+" and new:
                new -= 1
            else:
                return None
            body = True
        elif header := _HEADER.fullmatch(line):
            number = int(header.group(2))
            named = header.group(1) + header.group(3)
            if header.group(2) != header.group(4) or not k < number < len(sides):
                return None
            if named != sides[number]:
                return None
            if k >= 0:
                ranges[k] = (pos, pos) if begin is None else (begin, pos)
            k, begin, body = number, None, False
        elif k >= 0 and begin is None and line.startswith(_HEAD + _FILES):
            pass
        elif k >= 0 and (hunk := _HUNK.fullmatch(line)):
            begin = pos if begin is None else begin
            old, new = int(hunk.group(1) or b"1"), int(hunk.group(2) or b"1")
            body = False
        else:
            return None
        pos += len(line)
    if (old or new) and not killed:
        return None
    if k >= 0:
        ranges[k] = (pos, pos) if begin is None else (begin, pos)
    return ranges, k


def _done(count: int, last: int, killed: bool) -> list[Done]:
    """Whole before the last section (git goes in order); when killed, the pair being
    written (the first one, if none was begun) is stopped and every later one not reached."""
    if not killed:
        return ["whole"] * count
    stopped = max(last, 0)
    return [
        "whole" if k < stopped else "stopped" if k == stopped else "not_reached"
        for k in range(count)
    ]


def run(tmp_dir: str, pairs: list[Pair], git_diff: tuple[str, ...], timeout: float) -> Batch | None:
    """One ``git_diff`` over ``pairs`` within ``timeout`` seconds, in a private directory
    of ``tmp_dir`` (on the blobs' filesystem); None when it cannot stand for per-file diffs."""
    try:
        os.makedirs(tmp_dir, exist_ok=True)
        # its writer named: swept at a start once it is gone (``state_temps``)
        made = Made.mkdir(os.path.join(tmp_dir, state_temps.review_scratch_name()), 0o700)
    except OSError:
        return None
    try:
        with OwnTree.open(made.path) as tree, tree.directory([]) as top:
            try:
                return _linked(tree, top, made.path, pairs, git_diff, timeout)
            finally:
                top.remove_empty_dir("o")
                top.remove_empty_dir("n")
    finally:
        with contextlib.suppress(OSError, PathUnsafe):
            made.remove()


def _linked(
    tree: OwnTree,
    top: OwnDir,
    path: str,
    pairs: list[Pair],
    git_diff: tuple[str, ...],
    timeout: float,
) -> Batch | None:
    made: list[tuple[OwnDir, str]] = []
    with tree.directory(["o"], create=True) as olds, tree.directory(["n"], create=True) as news:
        try:
            for k, (old, new) in enumerate(pairs):
                for source, folder in ((old, olds), (new, news)):
                    if source is None:
                        continue
                    try:
                        os.link(source, f"{k:06d}", dst_dir_fd=folder.fd, follow_symlinks=False)
                    except OSError:
                        return None  # another filesystem, a blob gone: file by file
                    made.append((folder, f"{k:06d}"))
                    if not stat.S_ISREG(folder.mode(f"{k:06d}") or 0):
                        return None  # git would diff a link's target, not the bytes
            return _spooled(top, path, [_sides(pair) for pair in pairs], git_diff, timeout)
        finally:
            for folder, name in made:
                folder.remove_entry(name)


def _spooled(
    top: OwnDir, path: str, sides: list[bytes], git_diff: tuple[str, ...], timeout: float
) -> Batch | None:
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    spool = os.fdopen(os.open(_OUT, flags, 0o600, dir_fd=top.fd), "w+b")
    keep = False
    try:
        top.remove_entry(_OUT)  # open still; nothing named is left behind
        started = time.monotonic()
        try:
            process = popen_git(
                [*git_diff, "--no-renames", "o", "n"],
                cwd=path,
                env={"GIT_CEILING_DIRECTORIES": os.path.dirname(path)},
                stdout=spool,
                stderr=subprocess.DEVNULL,
            )
        except OSError as exc:
            raise GitError(f"git diff could not be started: {exc.strerror or exc}") from exc
        # a blocking wait, told of its end at once (``wait(timeout=)`` polls with sleeps
        # of up to 50 ms); the timer kills git once ``timeout`` passed
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            point("review_diff_deadline")  # the deadline reached, git not killed yet
            process.kill()

        timer = threading.Timer(max(timeout, 0.0), expire)
        if timeout > 0:
            timer.start()
        else:  # no time left: killed now, as a wait of no time would
            expire()
        try:
            returncode = process.wait()
            point("review_diff_waited")  # git ended, its timer not stopped yet
        finally:
            timer.cancel()
        # killed only when the timer's kill ended git: one that exited by itself as the
        # timer fired wrote every section whole, the last one too
        killed = expired.is_set() and returncode == -signal.SIGKILL
        seconds = time.monotonic() - started
        if returncode not in (0, 1) and not killed:
            return None
        spool.seek(0)
        found = _index(spool, sides, killed)
        if found is None:
            return None
        keep = True
        return Batch(spool, found[0], _done(len(sides), found[1], killed), seconds)
    finally:
        if not keep:
            spool.close()
