"""What a stored bundle would change, as a unified diff from its own old and new blobs.

``bundle_diff`` reads the bundle and its stored blobs and returns one entry per path
(operation, modes, sizes, hashes, line counts, binary or summarized, ``flags`` from
``promoter.engine.review.scan``) and one unified diff cut at a line end past ``limit``
(protocol: api#what-a-review-shows). Small files are diffed by ``difflib``, the rest by a
hermetic ``git diff --no-index`` sharing ``review_diff_timeout``: on a page that diffs
every file, all of them in one process (``promoter.engine.review.batch``; file by file
when that cannot stand for it). At most ``review_diff_concurrency`` diffs are built at
once. Fault point: ``bundle_diff_file``.

Not here: the worktree (the preflight's), rendering (the CLI's).
"""

from __future__ import annotations

import difflib
import io
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NotRequired

from promoter.domain import renames
from promoter.domain.answers import BundleDiffView, DiffFlag, FileDiffView, Shown, UnseenFileView
from promoter.domain.models import Change, FileState, PatchBundleV1
from promoter.domain.renames import Rename
from promoter.engine.intake.bundles import load_bundle
from promoter.engine.ports import Archive, Contents, Reviewing
from promoter.engine.review import batch as batches
from promoter.engine.review.scan import (
    LONG_LINE,
    Scan,
    count_bytes,
    mode_flags,
    path_flags,
    scan_blob,
    scan_bytes,
    visible,
)
from promoter.errors import GitError, PromoterError, ValidationFailed
from promoter.faults import point
from promoter.git.runner import popen_git

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "Cursor", "bundle_diff", "parse_cursor", "unseen_at_bound"]

DEFAULT_LIMIT = 1 << 20  # bytes of unified diff returned unless asked otherwise (a setting)
MAX_LIMIT = 8 << 20
SMALL_BYTES = 64 * 1024  # both sides at most this (and SMALL_LINES): difflib in memory
SMALL_LINES = 2000
NO_NEWLINE = "\\ No newline at end of file\n"
log = logging.getLogger("promoter.review")

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


def _side(services: Contents, state: FileState, *, shown: bool = True) -> _Side:
    """A side read and scanned; ``shown=False`` (an old side: its flags and longest line
    are never answered): a small side only counted. A small blob is hashed once, by
    ``blobs.read``."""
    side = _Side(state)
    if not state.exists or state.sha256 is None:
        return side
    side.path = services.blobs.location(state.sha256)
    if (state.bytes or 0) <= SMALL_BYTES:
        side.data = services.blobs.read(state.sha256)
        if shown:
            side.scan = scan_bytes(side.data, state.sha256)
        else:
            side.scan = count_bytes(side.data, state.sha256)
    else:
        exact = (state.bytes or 0) <= services.settings.review_diff_max_file_bytes
        side.scan = scan_blob(side.path, state.sha256, exact=exact)
    return side


Cursor = tuple[int, int]  # (the change's index in the bundle, a byte of its diff text)
_CURSOR = re.compile(r"([0-9]{1,9}):([0-9]{1,12})")


def parse_cursor(text: str, count: int) -> Cursor:
    """``"I:K"`` as a cursor into a bundle of ``count`` changes (``validation_failed``)."""
    found = _CURSOR.fullmatch(text)
    if found is None or int(found.group(1)) >= count:
        raise ValidationFailed(
            f"cursor {text!r} is not I:K with I a change of the bundle (0..{count - 1}) and "
            "K a byte offset in its diff: pass a next_cursor the diff answered"
        )
    return int(found.group(1)), int(found.group(2))


def _cursor(cursor: Cursor) -> str:
    return f"{cursor[0]}:{cursor[1]}"


def _head(encoded: bytes, size: int) -> int:
    """The largest cut of ``encoded`` at most ``size`` bytes that splits no character, or
    its first character when even that is larger (a page of 1 to 3 bytes moves on too)."""
    cut = min(size, len(encoded))
    while 0 < cut < len(encoded) and encoded[cut] & 0xC0 == 0x80:
        cut -= 1
    if cut == 0 and size > 0 and encoded:
        cut = 1
        while cut < len(encoded) and encoded[cut] & 0xC0 == 0x80:
            cut += 1
    return cut


class _Output:
    """The unified diff being built: whole lines from ``start`` while they fit in ``limit``
    bytes (a line longer than a whole page is cut at a character, so every page moves on).

    ``begin`` starts a file; ``pos`` counts the bytes of its diff text, ``first`` is the
    first byte of it this answer holds (None: none), ``cut`` whether any byte after that
    is missing; once ``truncated``, ``next`` is where the next page begins."""

    def __init__(self, limit: int, start: Cursor) -> None:
        self.limit = limit
        self.start = start
        self.size = 0
        self.parts: list[str] = []
        self.truncated = False
        self.next: Cursor | None = None
        self.index = 0
        self.pos = 0
        self.first: int | None = None
        self.cut = False

    def begin(self, index: int) -> None:
        self.index, self.pos, self.first, self.cut = index, 0, None, False

    def add(self, line: str) -> None:
        encoded = line.encode("utf-8")
        begin = self.pos
        self.pos += len(encoded)
        if (self.index, self.pos) <= self.start:
            return  # wholly before the cursor
        if self.truncated:
            self.cut = True
            return
        skip = 0
        if (self.index, begin) < self.start:  # the cursor points inside this line
            skip = self.start[1] - begin
            while skip < len(encoded) and encoded[skip] & 0xC0 == 0x80:
                skip += 1
        take = encoded[skip:]
        if self.size + len(take) > self.limit:
            head = _head(take, self.limit) if self.size == 0 else 0
            if head:
                self._keep(take[:head], begin + skip)
            self.truncated, self.cut = True, True
            self.next = (self.index, begin + skip + head)
            return
        self._keep(take, begin + skip)

    def _keep(self, data: bytes, at: int) -> None:
        self.parts.append(data.decode("utf-8"))
        self.size += len(data)
        if self.first is None:
            self.first = at

    @property
    def shown(self) -> Shown:
        """How much of the current file this answer holds: full, partial or none."""
        if self.first is None:
            return "none"
        return "full" if self.first == 0 and not self.cut else "partial"


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


def _rename_header(change: Change, rename: Rename, source: Change) -> list[str]:
    """git's header of a rename: the paths, the similarity, and a mode that changed."""
    old, new = visible(source.path), visible(change.path)
    lines = [f"diff --git a/{old} b/{new}\n"]
    if source.old.mode != change.new.mode:
        lines += [f"old mode {source.old.mode}\n", f"new mode {change.new.mode}\n"]
    lines += [
        f"similarity index {rename.similarity}%\n",
        f"rename from {old}\n",
        f"rename to {new}\n",
    ]
    return lines


@dataclass
class _Moves:
    """The bundle's renames by path: ``into`` a created path (with the deleted path's
    change), ``out`` of a deleted one."""

    into: dict[str, tuple[Rename, Change]] = field(default_factory=dict)
    out: dict[str, Rename] = field(default_factory=dict)


def _moves(services: Archive, changes: list[Change]) -> _Moves:
    """Which of the bundle's deletes and creates are renames (``promoter.domain.renames``;
    contents of at most ``SMALL_BYTES`` compared, read from the blob store)."""

    def content(sha256: str) -> bytes | None:
        try:
            return services.blobs.read(sha256)
        except (OSError, PromoterError):
            return None

    by_path = {c.path: c for c in changes}
    moves = _Moves()
    for rename in renames.pairs(changes, content, max_bytes=SMALL_BYTES):
        moves.into[rename.target] = (rename, by_path[rename.source])
        moves.out[rename.source] = rename
    return moves


def _split(data: bytes) -> list[str]:
    """Lines as git splits them (at line feeds only, each kept with its own; a last line
    without one as it is), decoded losslessly. A text stream whose ``newline`` is a line
    feed ends lines there only and translates nothing: the lines are cut in C."""
    text = data.decode("utf-8", "surrogateescape")
    return io.StringIO(text, newline="\n").readlines()


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
    they come. Killed when ``timeout`` passes (``timed_out``: the diff is not whole, git
    ended by the timer's kill; a git that exited by itself as the timer fired is whole).
    Once its output ended git is waited for, not killed: it closes its output before it
    exits. Fault points as the batch's: ``review_diff_deadline``, ``review_diff_waited``."""

    def __init__(self, old: str | None, new: str | None, timeout: float) -> None:
        self.args = [*GIT_DIFF, old or "/dev/null", new or "/dev/null"]
        self.timeout = timeout
        self.timed_out = False  # set once git ended, by the reader only
        self._expired = False  # the timer's: its deadline passed

    def _expire(self, process: subprocess.Popen[bytes]) -> None:
        self._expired = True
        point("review_diff_deadline")  # the deadline reached, git not killed yet
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
        read = False  # the output read to its end
        try:
            assert process.stdout is not None
            in_hunks = False
            for raw in process.stdout:
                in_hunks = in_hunks or raw.startswith(b"@@")
                if in_hunks:
                    yield raw.decode("utf-8", "surrogateescape")
            read = True
        finally:
            if not read and process.poll() is None:  # its reader stopped early
                process.kill()
            returncode = process.wait()  # the timer still armed: a git that lingers is killed
            point("review_diff_waited")  # git ended, its timer not stopped yet
            timer.cancel()
        self.timed_out = self._expired and returncode == -signal.SIGKILL
        if returncode not in (0, 1) and not self.timed_out:
            raise GitError(f"git diff ended with status {returncode}", returncode=returncode)


def _differs(old: _Side, new: _Side) -> bool:
    """Whether a diff of the two sides must show a line: their contents differ (a created
    or deleted side is one that holds a byte). ``git diff --no-index`` exits 1 both for
    "differs" and for a side it could not read, printing no hunk for the latter."""
    if old.state.exists and new.state.exists:
        return old.state.sha256 != new.state.sha256
    present = new.state if new.state.exists else old.state
    return bool(present.exists and present.bytes)


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


def _flags(change: Change, new: _Side, binary: bool, large: bool) -> list[DiffFlag]:
    """The file's flags: from its path, modes and scans only, never from the answer's cut."""
    flags = set(path_flags(change.path)) | set(mode_flags(change.old.mode, change.new.mode))
    if not change.path.isascii():  # an ASCII path holds neither: nothing to scan
        flags |= scan_bytes(change.path.encode()).flags & {"bidi_control", "invisible_character"}
    if new.scan is not None and not binary:
        flags |= new.scan.flags
    if binary:
        flags.add("binary")
    if large:
        flags.add("large")
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


class FileEntry(FileDiffView):
    """One file of an answer, and the cursor of the page that shows it."""

    cursor: NotRequired[str]  # kept for ``unseen``, not answered in ``files``


class _Budget:
    """The seconds a request's git diffs may still take together."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds


@dataclass
class _Ready:
    """A file's sides scanned before the walk, and its place in the batch (None: not in it)."""

    old: _Side
    new: _Side
    batch: batches.Batch | None = None
    k: int | None = None


def _sides(services: Contents, change: Change, moves: _Moves) -> tuple[_Side, _Side]:
    came = moves.into.get(change.path)
    old = _side(services, came[1].old if came else change.old, shown=False)
    return old, _side(services, change.new)


def _data(services: Contents, side: _Side) -> bytes:
    """A small side's bytes: kept from its scan, else read again."""
    if side.data is not None:
        return side.data
    if not side.state.exists or side.state.sha256 is None:
        return b""
    return services.blobs.read(side.state.sha256)


def _prepare(
    services: Contents, changes: list[tuple[int, Change]], moves: _Moves, budget: _Budget
) -> list[_Ready]:
    """Every file's sides, and the files git diffs, run as one batch (``batch`` None:
    fewer than two such files, or the batch could not stand for them: file by file).
    Small sides' bytes are dropped (read again when diffed): one file's bytes at a time."""
    cap = services.settings.review_diff_max_file_bytes
    ready: list[_Ready] = []
    pairs: list[batches.Pair] = []
    for _, change in changes:
        old, new = _sides(services, change, moves)
        ready.append(_Ready(old, new))
        scans = [s.scan for s in (old, new) if s.scan is not None]
        if (
            change.path not in moves.out
            and not any(s.binary or s.size > cap for s in scans)
            and not all(s.size <= SMALL_BYTES and s.lines <= SMALL_LINES for s in scans)
        ):
            ready[-1].k = len(pairs)
            pairs.append((old.path, new.path))
        old.data = new.data = None
    if len(pairs) < 2 or budget.left <= 0:
        return ready
    batch = batches.run(os.fspath(services.blobs.tmp_dir), pairs, GIT_DIFF, budget.left)
    if batch is None:
        return ready
    budget.left -= batch.seconds
    for entry in ready:
        if entry.k is not None:
            entry.batch = batch
    return ready


def _file(
    services: Contents,
    index: int,
    change: Change,
    out: _Output,
    budget: _Budget,
    *,
    diff: bool = True,
    moves: _Moves | None = None,
    ready: _Ready | None = None,
) -> FileEntry:
    """One file's entry, its diff text written to ``out``. ``diff=False``: a file before
    the cursor or past the cut is scanned (flags, sizes) but not diffed (``added``,
    ``removed``, ``diff_bytes`` are then None). A rename's created path is diffed against
    its deleted path (``rename_from``); the deleted path names where it went
    (``renamed_to``) and shows no lines of its own. ``ready``: the sides already scanned,
    and the batch that diffed this file."""
    settings = services.settings
    cap = settings.review_diff_max_file_bytes
    out.begin(index)
    moves = moves or _Moves()
    came = moves.into.get(change.path)  # (the rename, the deleted path's change)
    went = moves.out.get(change.path)
    old, new = (ready.old, ready.new) if ready else _sides(services, change, moves)
    batch, k = (ready.batch, ready.k) if ready and ready.k is not None else (None, 0)
    point("bundle_diff_file")
    scans = [s.scan for s in (old, new) if s.scan is not None]
    binary = any(s.binary for s in scans)
    large = any(s.size > cap for s in scans)
    small = all(s.size <= SMALL_BYTES and s.lines <= SMALL_LINES for s in scans)
    diff = diff or (not out.truncated and index >= out.start[0])
    left = budget.left
    why = ""
    if not binary and large:
        why = f"File too large to diff here (over {cap} bytes)"
    elif not binary and not small and (batch.done[k] == "not_reached" if batch else left <= 0):
        why = f"Not diffed: this request's {settings.review_diff_timeout:g} s for diffs are spent"
    for line in _rename_header(change, came[0], came[1]) if came else _header(change):
        out.add(line)
    source = came[1] if came else change
    a = f"a/{visible(source.path)}" if source.old.exists else "/dev/null"
    b = f"b/{visible(change.path)}" if change.new.exists else "/dev/null"
    added: int | None = 0
    removed: int | None = 0
    if went is not None:
        out.add(f"renamed to {visible(went.target)} ({went.similarity} %): its diff is there\n")
    elif binary:
        out.add(f"Binary files {a} and {b} differ\n")
    elif why:
        out.add(_summary(change, old, new, why))
    elif not diff:
        added = removed = None
    else:
        git = None if small or batch else _GitDiff(old.path, new.path, left)
        started_at = time.monotonic()
        if batch is not None:
            lines = batch.lines(k)
        elif git is None:
            lines = _difflib_lines(_data(services, old), _data(services, new))
        else:
            lines = git.lines()
        started = False
        added = removed = 0
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
        if (git is not None and git.timed_out) or (batch and batch.done[k] == "stopped"):
            spent = settings.review_diff_timeout
            why = f"Diff stopped: this request's {spent:g} s for diffs are spent"
            out.add(_summary(change, old, new, why))
        elif not started and _differs(old, new):  # never an empty diff shown as the whole file
            why = "Not diffed: the diff came back empty, yet the two sides differ"
            log.error("review diff of %s came back empty for differing sides", visible(change.path))
            out.add(_summary(change, old, new, why))
    summarized = bool(why)
    rename = came[0] if came is not None else None
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
        "flags": _flags(change, new, binary, large),
        "symlink_target": _symlink_target(new),
        "shown": out.shown,
        "diff_bytes": None if added is None else out.pos,
        "cursor": _cursor(out.next) if out.next and out.next[0] == index else f"{index}:0",
        "rename_from": rename.source if rename else None,
        "rename_from_shown": visible(rename.source) if rename else None,
        "similarity": rename.similarity if rename else None,
        "renamed_to": went.target if went is not None else None,
    }


def _unseen(files: list[FileEntry]) -> list[UnseenFileView]:
    """The files this answer does not show in full (a summarized file's content is never
    shown), with what a reviewer needs to judge them and the cursor that reaches them."""
    unseen: list[UnseenFileView] = []
    for entry in files:
        if entry["shown"] != "full" or entry["summarized"]:
            unseen.append(
                {
                    "path": entry["path"],
                    "path_shown": entry["path_shown"],
                    "operation": entry["operation"],
                    "old_bytes": entry["old_bytes"],
                    "new_bytes": entry["new_bytes"],
                    "diff_bytes": entry["diff_bytes"],
                    "added": entry["added"],
                    "removed": entry["removed"],
                    "flags": entry["flags"],
                    "shown": entry["shown"],
                    "summarized": entry["summarized"],
                    # nothing more to show of a file shown in full
                    "cursor": None if entry["shown"] == "full" else entry.get("cursor"),
                }
            )
    return unseen


def _walk(
    services: Contents,
    changes: list[tuple[int, Change]],
    limit: int,
    start: Cursor,
    *,
    rest: bool = True,
    every: list[Change] | None = None,
) -> tuple[list[FileEntry], _Output]:
    """``changes`` diffed into one answer; renames found among ``every`` change."""
    out = _Output(limit, start)
    with _slot(services.settings.review_diff_concurrency):
        moves = _moves(services, every if every is not None else [c for _, c in changes])
        budget = _Budget(services.settings.review_diff_timeout)
        if not rest:  # files past the cut are not diffed: one at a time, as they come
            files = [_file(services, i, c, out, budget, diff=rest, moves=moves) for i, c in changes]
            return files, out
        ready = _prepare(services, changes, moves, budget)
        try:
            files = [
                _file(services, i, c, out, budget, moves=moves, ready=r)
                for (i, c), r in zip(changes, ready, strict=True)
            ]
        finally:
            for entry in ready:
                if entry.batch is not None:
                    entry.batch.close()
    return files, out


def bundle_diff(
    services: Reviewing,
    bundle_id: str,
    limit: int | None = None,
    *,
    path: str | None = None,
    cursor: str | None = None,
    stored: PatchBundleV1 | None = None,
) -> BundleDiffView:
    """``{bundle_id, files, unified_diff, truncated, limit, max_file_bytes, path, cursor,
    next_cursor, unseen}`` of a bundle, or of its one ``path``, from ``cursor`` on.

    ``limit`` defaults to ``review_diff_page_bytes``. A ``path`` not in the bundle, or a
    cursor outside it (or outside ``path``), is ``validation_failed``. ``stored``: the
    bundle ``bundle_id`` names as the caller just stored it, not read back. Blocking
    (reads blobs, may run git): call it in a worker thread.
    """
    settings = services.settings
    limit = settings.review_diff_page_bytes if limit is None else limit
    known = stored is not None and stored.bundle_id == bundle_id
    bundle = stored if stored is not None and known else load_bundle(services, bundle_id)
    changes = list(enumerate(bundle.changes))
    if path is not None:
        changes = [(i, c) for i, c in changes if c.path == path]
        if not changes:
            raise ValidationFailed(f"bundle {bundle_id} has no path {path!r}", path=path)
    start = (changes[0][0], 0) if path is not None else (0, 0)
    if cursor is not None:
        start = parse_cursor(cursor, len(bundle.changes))
        if path is not None and start[0] != changes[0][0]:
            raise ValidationFailed(f"cursor {cursor!r} is not in {path!r}", path=path)
    # the first page counts every file's lines; a later one diffs only what it shows
    rest = cursor is None or path is not None
    files, out = _walk(services, changes, limit, start, rest=rest, every=list(bundle.changes))
    return {
        "bundle_id": bundle.bundle_id,
        "files": [_answered(f) for f in files],
        "unified_diff": "".join(out.parts),
        "truncated": out.truncated,
        "limit": limit,
        "max_file_bytes": settings.review_diff_max_file_bytes,
        "path": path,
        "cursor": _cursor(start),
        "next_cursor": _cursor(out.next) if out.next is not None else None,
        "unseen": _unseen(files),
    }


def _answered(entry: FileEntry) -> FileDiffView:
    """The entry as ``files`` answers it: without its cursor."""
    answered = entry.copy()
    del answered["cursor"]
    return answered


def unseen_at_bound(services: Reviewing, bundle_id: str, limit: int) -> list[UnseenFileView]:
    """The files the bundle's first page of ``limit`` bytes does not show in full, as
    ``bundle_diff``'s ``unseen`` (files past the cut are scanned, not diffed)."""
    bundle = load_bundle(services, bundle_id)
    changes = list(enumerate(bundle.changes))
    files, _ = _walk(services, changes, limit, (0, 0), rest=False)
    return _unseen(files)
