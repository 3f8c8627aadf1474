"""What a stored bundle would change, as a unified diff from its own old and new blobs.

``bundle_diff`` reads the bundle and, for every change, the stored blobs of its old and
new states, and returns one entry per path (operation, modes, sizes, sha256s, line
counts, whether it is binary or summarized, lines added and removed, and ``flags`` that
reveal what can hide code: see ``promoter.engine.review.scan``) plus one unified diff of
the text files, cut at a line end once it passes ``limit`` bytes (``truncated``).

What is shown is what will run. A file is binary only as git would say: a NUL byte in
the first 8000 bytes of either side; it is summarized, never diffed. Every other file is
diffed, and its lines are shown with bytes that are not UTF-8 as ``\\xNN`` and hidden
characters (bidirectional controls, zero-width and other invisible characters, control
characters) as ``<U+XXXX>``.

Work per request is bounded. Every side is read once, streaming, to hash, count and flag
it. A side larger than ``review_diff_max_file_bytes`` is not diffed: the file is
summarized (``summarized``: sizes, sha256s, line counts, flags). Small files (both sides
at most ``SMALL_BYTES`` and ``SMALL_LINES``) are diffed by ``difflib`` in memory; the rest
by ``git diff --no-index`` on the stored blob files (hermetic, ``promoter.git.runner``),
whose output is read line by line and kept only up to ``limit``. A request's git diffs
share ``review_diff_timeout`` seconds: one still running then is killed, and the files
not diffed by then are summarized too (said in the diff text). At most
``review_diff_concurrency`` bundle diffs are built at once in a process; more wait
(callers run this in a worker thread, never on the event loop).

Fault point: ``bundle_diff_file`` (a file's sides scanned, before it is diffed).

Deliberately not here: the worktree. The diff is built from what the bundle claims and
the audit store holds, so it shows what a promotion would write, not what the worktree
reads as now (that is the preflight's). Rendering (colour, pager) is the CLI's.
"""

from __future__ import annotations

import difflib
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from promoter.domain.models import Change, FileState
from promoter.engine.intake.bundles import load_bundle
from promoter.engine.review.scan import (
    LONG_LINE,
    Scan,
    mode_flags,
    path_flags,
    scan_blob,
    scan_bytes,
    visible,
)
from promoter.engine.services import Services
from promoter.errors import GitError
from promoter.faults import point
from promoter.git.runner import popen_git

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "bundle_diff"]

DEFAULT_LIMIT = 1 << 20  # bytes of unified diff returned unless asked otherwise
MAX_LIMIT = 8 << 20
SMALL_BYTES = 64 * 1024  # both sides at most this (and SMALL_LINES): difflib in memory
SMALL_LINES = 2000
NO_NEWLINE = "\\ No newline at end of file\n"
GIT_DIFF = (
    "diff",
    "--no-index",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--text",
    "--diff-algorithm=myers",
    "-U3",
)

_slots_lock = threading.Lock()
_slots: dict[int, threading.BoundedSemaphore] = {}


def _slot(count: int) -> threading.BoundedSemaphore:
    """The process's semaphore of ``count`` bundle-diff slots."""
    with _slots_lock:
        return _slots.setdefault(count, threading.BoundedSemaphore(count))


@dataclass
class _Side:
    state: FileState
    scan: Scan | None = None
    path: str | None = None  # the stored blob's file
    data: bytes | None = None  # the bytes, when small


def _side(services: Services, state: FileState) -> _Side:
    side = _Side(state)
    if not state.exists or state.sha256 is None:
        return side
    side.path = services.blobs.location(state.sha256)
    if (state.bytes or 0) <= SMALL_BYTES:
        side.data = services.blobs.read(state.sha256)
        side.scan = scan_bytes(side.data)
    else:
        exact = (state.bytes or 0) <= services.settings.review_diff_max_file_bytes
        side.scan = scan_blob(side.path, state.sha256, exact=exact)
    return side


class _Output:
    """The unified diff being built: whole lines while they fit in ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.parts: list[str] = []
        self.truncated = False

    def add(self, line: str) -> None:
        if self.truncated:
            return
        size = len(line.encode("utf-8"))
        if self.size + size > self.limit:
            self.truncated = True
            return
        self.parts.append(line)
        self.size += size


def _header(change: Change) -> list[str]:
    path, old, new = visible(change.path), change.old, change.new
    lines = [f"diff --git a/{path} b/{path}\n"]
    if not old.exists:
        lines.append(f"new file mode {new.mode}\n")
    elif not new.exists:
        lines.append(f"deleted file mode {old.mode}\n")
    elif old.mode != new.mode:
        lines += [f"old mode {old.mode}\n", f"new mode {new.mode}\n"]
    return lines


def _split(data: bytes) -> list[str]:
    """Lines as git splits them (at line feeds only), decoded losslessly."""
    parts = data.decode("utf-8", "surrogateescape").split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _difflib_lines(old: bytes, new: bytes) -> Iterator[str]:
    """Hunk lines of two small contents, as git prints them."""
    diff = difflib.unified_diff(_split(old), _split(new), n=3, lineterm="")
    for index, line in enumerate(diff):
        if index < 2:
            continue  # the ---/+++ lines
        if line.startswith("@@"):
            yield line + "\n"
        elif line.endswith("\n"):
            yield line
        else:
            yield line + "\n"
            yield NO_NEWLINE


class _GitDiff:
    """``git diff --no-index`` of two stored blob files; ``lines`` yields its hunk lines as
    they come. Killed when ``timeout`` passes (``timed_out``: the diff is not whole)."""

    def __init__(self, old: str | None, new: str | None, timeout: float) -> None:
        self.args = [*GIT_DIFF, old or "/dev/null", new or "/dev/null"]
        self.timeout = timeout
        self.timed_out = False

    def _expire(self, process: subprocess.Popen[bytes]) -> None:
        self.timed_out = True
        process.kill()

    def lines(self) -> Iterator[str]:
        try:
            process = popen_git(
                self.args, cwd="/", env={"GIT_CEILING_DIRECTORIES": "/"}, stderr=subprocess.DEVNULL
            )
        except OSError as exc:
            raise GitError(f"git diff could not be started: {exc.strerror or exc}") from exc
        timer = threading.Timer(self.timeout, self._expire, (process,))
        timer.start()
        try:
            assert process.stdout is not None
            in_hunks = False
            for raw in process.stdout:
                in_hunks = in_hunks or raw.startswith(b"@@")
                if in_hunks:
                    yield raw.decode("utf-8", "surrogateescape")
        finally:
            timer.cancel()
            if process.poll() is None:
                process.kill()
            returncode = process.wait()
        if returncode not in (0, 1) and not self.timed_out:
            raise GitError(f"git diff ended with status {returncode}", returncode=returncode)


def _render(line: str) -> str:
    """One hunk line with nothing hidden (and no function context on ``@@`` lines)."""
    if line.startswith("@@"):
        end = line.find("@@", 2)
        return line[: end + 2] + "\n" if end > 0 else line
    if line.startswith("\\"):
        return line
    body = line[:-1] if line.endswith("\n") else line
    return line[:1] + visible(body[1:]) + "\n"


def _summary(change: Change, old: _Side, new: _Side, why: str) -> str:
    def one(name: str, side: _Side) -> str:
        if side.scan is None:
            return "/dev/null"
        scan = side.scan
        return f"{name} {scan.size} bytes, {scan.lines} lines, sha256 {scan.sha256}"

    path = visible(change.path)
    return f"{why}: {one('a/' + path, old)}; {one('b/' + path, new)}\n"


def _flags(change: Change, new: _Side, binary: bool) -> list[str]:
    flags = set(path_flags(change.path)) | set(mode_flags(change.old.mode, change.new.mode))
    flags |= scan_bytes(change.path.encode()).flags & {"bidi_control", "invisible_character"}
    if new.scan is not None and not binary:
        flags |= new.scan.flags
    return sorted(flags)


def _longest(scan: Scan | None) -> int | None:
    if scan is None:
        return 0
    if scan.longest_exact or scan.longest_line > LONG_LINE:
        return scan.longest_line
    return None  # summarized, and no line over LONG_LINE: not measured


def _symlink_target(new: _Side) -> str | None:
    if new.state.mode != "120000" or new.scan is None:
        return None
    return visible(new.scan.head.decode("utf-8", "surrogateescape"))


class _Budget:
    """The seconds a request's git diffs may still take together."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds


def _file(services: Services, change: Change, out: _Output, budget: _Budget) -> dict[str, Any]:
    settings = services.settings
    cap = settings.review_diff_max_file_bytes
    old, new = _side(services, change.old), _side(services, change.new)
    point("bundle_diff_file")
    scans = [s.scan for s in (old, new) if s.scan is not None]
    binary = any(s.binary for s in scans)
    small = all(s.size <= SMALL_BYTES and s.lines <= SMALL_LINES for s in scans)
    left = budget.left
    why = ""
    if not binary and any(s.size > cap for s in scans):
        why = f"File too large to diff here (over {cap} bytes)"
    elif not binary and not small and left <= 0:
        why = f"Not diffed: this request's {settings.review_diff_timeout:g} s for diffs are spent"
    for line in _header(change):
        out.add(line)
    a = f"a/{visible(change.path)}" if change.old.exists else "/dev/null"
    b = f"b/{visible(change.path)}" if change.new.exists else "/dev/null"
    added = removed = 0
    if binary:
        out.add(f"Binary files {a} and {b} differ\n")
    elif why:
        out.add(_summary(change, old, new, why))
    else:
        git = None if small else _GitDiff(old.path, new.path, left)
        started_at = time.monotonic()
        lines = _difflib_lines(old.data or b"", new.data or b"") if git is None else git.lines()
        started = False
        for line in lines:
            if not started:
                out.add(f"--- {a}\n")
                out.add(f"+++ {b}\n")
                started = True
            if line.startswith("+"):
                added += 1
            elif line.startswith("-"):
                removed += 1
            out.add(_render(line))
        if git is not None:
            budget.left -= time.monotonic() - started_at
        if git is not None and git.timed_out:
            spent = settings.review_diff_timeout
            why = f"Diff stopped: this request's {spent:g} s for diffs are spent"
            out.add(_summary(change, old, new, why))
    summarized = bool(why)
    return {
        "path": change.path,
        "path_shown": visible(change.path),
        "operation": change.operation,
        "old_mode": change.old.mode,
        "new_mode": change.new.mode,
        "old_bytes": change.old.bytes,
        "new_bytes": change.new.bytes,
        "old_sha256": change.old.sha256,
        "new_sha256": change.new.sha256,
        "old_lines": old.scan.lines if old.scan else None,
        "new_lines": new.scan.lines if new.scan else None,
        "longest_line": _longest(new.scan),
        "binary": binary,
        "summarized": summarized,
        "added": added,
        "removed": removed,
        "flags": _flags(change, new, binary),
        "symlink_target": _symlink_target(new),
    }


def bundle_diff(services: Services, bundle_id: str, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """``{bundle_id, files, unified_diff, truncated, limit, max_file_bytes}`` of a bundle.

    Blocking (reads blobs, may run git): call it in a worker thread.
    """
    bundle = load_bundle(services, bundle_id)
    out = _Output(limit)
    with _slot(services.settings.review_diff_concurrency):
        budget = _Budget(services.settings.review_diff_timeout)
        files = [_file(services, change, out, budget) for change in bundle.changes]
    return {
        "bundle_id": bundle.bundle_id,
        "files": files,
        "unified_diff": "".join(out.parts),
        "truncated": out.truncated,
        "limit": limit,
        "max_file_bytes": services.settings.review_diff_max_file_bytes,
    }
