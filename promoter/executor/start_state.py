"""A sandbox starts from the person's worktree as it is (protocol: runs#sandbox-boundary).

This module owns the start state of a ``promoter run`` sandbox: ``capture_into`` reads
the person's worktree with a ``SeededShadow`` (tracked files with their uncommitted
content, staged or not; untracked files that are not ignored; modes and symlinks; a
private index and object directory, so the person's ``.git`` and worktree are only
read), lays every difference from HEAD into the fresh sandbox clone (through directory
descriptors opened without following links, in promoter's own sandbox only: the clone is
an ``OwnTree`` of ``promoter.fs.own_entry``, which removes only what is inside it), writes
the captured blobs and the start tree into the clone's object directory, and returns
the grant's ``target_preconditions``: for each path whose worktree or index state
differs from HEAD, ``old`` is the captured state and ``index`` the person's index
entry (``None`` when the path is not in the index). A path with a merge conflict or an
intent-to-add entry has no precondition (the implicit one, HEAD's, then refuses an
edit of it); gitlinks and nested repositories are not captured and are named in
``skipped``. A FIFO, socket or device over a tracked file or directory, and a tracked
directory git cannot open, refuse the start (``PathUnsafe``, named as the person's, with
what they can do): git would take the files below for deleted, or for HEAD's. The
reading is closed (its private directory removed) in a thread once the files are laid,
beside the rest of the start; the process ends only once it is done.

Fault point: ``start_state_laid`` (the files are in the clone, the start tree is not
written yet).

Deliberately not here: cloning (``sandbox.py``), building bundles (``builder.py``
diffs against the start tree this module records) and any command that moves a
worktree (no checkout, reset or stash: the clone's files are written one by one).
"""

from __future__ import annotations

import os
import shlex
import stat
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from promoter import faults
from promoter.domain.hidden import visible
from promoter.domain.paths import check_path, sort_key, wire_path
from promoter.errors import ConfigError, PathInvalid, PathUnsafe
from promoter.executor import layers, start_watch
from promoter.executor.loose_objects import LooseObjects
from promoter.executor.seeded import SeededShadow
from promoter.executor.tree_edit import edited_tree
from promoter.fs.own_entry import OwnDir, OwnTree
from promoter.git.layout import RepoLayout, discover, repo_env
from promoter.git.objects import CatFile
from promoter.git.readback import blob_sha256, index_entries, tree_entries
from promoter.git.records import (
    DiffEntry,
    IndexEntry,
    check_pathspec_paths,
    decode_path,
    require_oid,
)
from promoter.git.runner import run_git
from promoter.git.worktree_tree import SPECIAL_OVER, special_over
from promoter.lazy_log import LazyLogger

__all__ = ["StartState", "capture_into"]

_NULL_OID = "0" * 40
_LINK = "120000"
_EXEC = "100755"
_MODES = ("100644", _EXEC, _LINK)
_START_INDEX = "start-index"
_TOO_LONG = "File name too long"  # git's reason for a directory too deep to name
_CUT = (None, _TOO_LONG)  # a name git cut or could not name: not a path to ask about again

log = LazyLogger("promoter.run")


class StartState(NamedTuple):
    """What ``capture_into`` laid into the clone."""

    tree: str
    """The start tree, in the clone's objects: HEAD's tree with the person's changes."""
    preconditions: list[dict[str, Any]]
    """Wire ``Precondition`` documents, sorted by path."""
    skipped: list[dict[str, str]]
    """Paths not captured (gitlinks, nested repositories) or captured without a
    precondition (``_admissible``), each with its reason."""


def _index_only(worktree: str, env: dict[str, str], base_tree: str) -> list[str]:
    """Paths whose index entry differs from ``base_tree`` (staged changes); reads only."""
    result = run_git(
        ["diff-index", "--cached", "-z", "--no-renames", "--name-only", base_tree, "--"],
        cwd=worktree,
        env=env,
    )
    return [decode_path(raw) for raw in result.stdout.split(b"\0") if raw]


def _index_of(
    layout: RepoLayout, paths: list[str], known: dict[str, IndexEntry | None] | None
) -> dict[str, list[IndexEntry]]:
    """The person's index entries of ``paths``: as the status pass read them (``known``),
    and from the index for any path it did not name."""
    found: dict[str, list[IndexEntry]] = {}
    for path in paths:
        if known is not None and path in known:
            entry = known[path]
            found[path] = [] if entry is None else [entry]
    rest = [p for p in paths if p not in found]
    return {**found, **(index_entries(layout, rest) if rest else {})}


def _remove_leaf(folder: OwnDir, name: bytes) -> None:
    mode = folder.mode(name)
    if mode is None:
        return
    if stat.S_ISDIR(mode):
        raise ConfigError(
            f"the sandbox holds a directory at {os.fsdecode(name)!r} where the person's "
            "worktree has a file"
        )
    folder.remove_entry(name)


def _delete(clone: OwnTree, path: str) -> None:
    *parents, name = os.fsencode(path).split(b"/")
    try:
        folder = clone.directory(parents)
    except (FileNotFoundError, NotADirectoryError):
        return
    with folder:
        _remove_leaf(folder, name)
    for depth in range(len(parents), 0, -1):  # directories the deletes left empty
        try:
            folder = clone.directory(parents[: depth - 1])
        except OSError:
            return
        with folder:
            if not folder.remove_empty_dir(parents[depth - 1]):
                return


def _whiteout(layer: OwnTree, path: str) -> None:
    """Mark ``path`` deleted in an overlay's start layer: a whiteout (a character device
    0,0, which the kernel lets anyone make) hides the base's entry below it."""
    *parents, name = os.fsencode(path).split(b"/")
    with layer.directory(parents, create=True) as folder:
        _remove_leaf(folder, name)
        os.mknod(name, stat.S_IFCHR | 0o600, os.makedev(0, 0), dir_fd=folder.fd)


def _write(clone: OwnTree, path: str, mode: str, chunks: Iterable[bytes]) -> None:
    """Write ``path`` in the clone: a link (its target text) or a file, as a new leaf."""
    *parents, name = os.fsencode(path).split(b"/")
    with clone.directory(parents, create=True) as folder:
        fd = folder.fd
        _remove_leaf(folder, name)
        if mode == _LINK:
            os.symlink(b"".join(chunks), name, dir_fd=fd)
            return
        perms = 0o777 if mode == _EXEC else 0o666
        out = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            perms,
            dir_fd=fd,
        )
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
            if mode == _EXEC:  # the umask may have cleared it; set it where read is set
                current = os.fstat(out).st_mode & 0o777
                os.fchmod(out, current | ((current & 0o444) >> 2))
        finally:
            os.close(out)


def _start_tree(
    clone: Path, home: Path, base_tree: str, entries: list[DiffEntry], alternates: str | None
) -> str:
    """HEAD's tree with ``entries`` applied, written into the clone's objects."""
    index = home / _START_INDEX
    # absolute: git runs in the clone, and the state directory may be given relative
    env = {"GIT_DIR": str(clone.absolute() / ".git"), "GIT_INDEX_FILE": str(index.absolute())}
    if alternates is not None:  # an overlay's start layer: HEAD's objects are the person's
        env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = alternates
    try:
        run_git(["read-tree", base_tree], cwd=clone, env=env)
        lines = b"".join(
            b"%s %s\t%s\0"
            % (
                (e.new_mode or "0").encode(),
                (e.new_oid or _NULL_OID).encode(),
                os.fsencode(e.path),
            )
            for e in entries
        )
        if lines:
            run_git(
                ["update-index", "-z", "--index-info"],
                cwd=clone,
                env={**env, "GIT_LITERAL_PATHSPECS": "1"},
                input=lines,
            )
        tree = run_git(["write-tree"], cwd=clone, env=env).stdout.decode("ascii", "replace")
    finally:  # the sandbox directory is promoter's: its scratch index goes
        with OwnTree.open(home) as sandbox, sandbox.directory([]) as top:
            top.remove_entry(_START_INDEX)
    return require_oid(tree.strip(), "start tree")


def _read_person(
    layout: RepoLayout,
    base_tree: str,
    planned: start_watch.Plan | None,
    reader: CatFile | None,
) -> SeededShadow:
    """The person's worktree read (entered: the caller closes it), narrowed as ``planned``
    says unless the index, excludes or config moved while it was read: then in full
    (``reader``: the start layer's, which reaches the base's trees)."""
    only = None if planned is None else planned.candidates
    known = None if planned is None else planned.index_walk
    shadow = SeededShadow(layout, base_tree=base_tree, only=only, known_index=known, trees=reader)
    _enter(shadow)
    if planned is None or only is None or start_watch.unmoved(layout, planned):
        return shadow
    shadow.close()
    shadow = SeededShadow(layout, base_tree=base_tree)
    _enter(shadow)
    return shadow


def _enter(shadow: SeededShadow) -> None:
    """Enter ``shadow``; a FIFO, socket or device over a tracked file is named as the
    person's own, with what they can do (the shadow's words speak of a bundle)."""
    try:
        shadow.__enter__()
    except PathUnsafe as exc:
        items = exc.context.get("paths")
        if not items or any(item["reason"] != SPECIAL_OVER for item in items):
            raise
        raise _persons_special(items) from exc


def _refuse_special_over(worktree: str, entries: list[DiffEntry]) -> None:
    """A FIFO, socket or device over a tracked directory: git sees only the files below
    it gone (no error, as over a file), which are never taken for the person's
    deletions; named as over a file (``_enter``)."""
    found = special_over(worktree, [e.path for e in entries if e.new_oid is None])
    if found:
        raise _persons_special([{"path": wire_path(p), "reason": r} for p, r in found.items()])


def _persons_special(items: list[dict[str, str]]) -> PathUnsafe:
    """``PathUnsafe`` naming ``items`` (paths of the person's worktree where a FIFO,
    socket or device covers what git tracks) as theirs, with the two remedies."""
    named = ", ".join(repr(item["path"]) for item in items)
    return PathUnsafe(
        f"your worktree has a FIFO, socket or device where git tracks a file or "
        f"directory ({named}): git cannot read it, so the run cannot start from your "
        f"files; nothing was changed; next: remove it or move it out of the worktree "
        f"and run again, or start at HEAD without your uncommitted work: "
        f"promoter run --from-head -- CMD",
        paths=items,
    )


def _refuse_unreadable(layout: RepoLayout, base_tree: str, unopened: dict[str, str | None]) -> None:
    """A directory git tracks files in (in HEAD or the person's index) that git could not
    open (a mode that shuts the person out): git takes HEAD's files for what it holds,
    which may not be the person's, so the run does not start from them; named, with what
    the person can do. One too deep for the host to name holds nothing git tracks."""
    named = [p for p, why in unopened.items() if why is not None and why != _TOO_LONG]
    if not named:
        return
    check_pathspec_paths(named)
    head = tree_entries(layout, base_tree, named)
    listed = run_git(  # the index only: nothing below the directories is read
        ["ls-files", "-z", "--full-name", "--", *named],
        cwd=layout.worktree,
        env={**repo_env(layout), "GIT_LITERAL_PATHSPECS": "1"},
    ).stdout
    indexed = {decode_path(raw) for raw in listed.split(b"\0") if raw}
    tracked = [
        path
        for path in sorted(named, key=sort_key)
        if head[path] is not None or any(p.startswith(path + "/") for p in indexed)
    ]
    if not tracked:
        return
    items = [
        {"path": wire_path(p), "reason": f"git could not open it ({unopened[p]})"} for p in tracked
    ]
    shown = ", ".join(f"{wire_path(p)!r}: {unopened[p]}" for p in tracked)
    quoted = " ".join(visible(shlex.quote(wire_path(p))) for p in tracked)
    raise PathUnsafe(
        f"your worktree has a directory git tracks that git cannot open ({shown}): what "
        f"you have in it cannot be read, so the run cannot start from your files; nothing "
        f"was changed; next: make it readable (chmod u+rx {quoted}) and run again, or "
        f"start at HEAD without your uncommitted work: promoter run --from-head -- CMD",
        paths=items,
    )


def _unopened(shadow: SeededShadow) -> dict[str, str]:
    """The person's directories git could not open while it listed untracked files, each
    with why: what they hold is not in the start, and the run's first line says so (a
    name git cut, thousands of bytes long, shown by its first 80 characters)."""
    found: dict[str, str] = {}
    for path, reason in shadow.unopened.items():
        if reason is None or reason == _TOO_LONG:
            found[path[:80] + "..."] = (
                "too deep for the host to name: git could not open it, so what it holds "
                "is not in the sandbox"
            )
        else:
            found[path] = f"git could not open it ({reason}): what it holds is not in the sandbox"
    return found


def capture_into(
    worktree: str,
    clone: Path,
    home: Path,
    base_tree: str,
    *,
    whiteouts: bool = False,
    alternates: str | None = None,
    found: RepoLayout | None = None,
    watched: start_watch.Watched | None = None,
    asking: start_watch.Asking | None = None,
) -> StartState:
    """Lay the person's worktree state into ``clone`` (at ``base_tree``); its preconditions.

    ``home`` is the sandbox directory (a scratch index lives there for a moment). Reads
    the person's worktree and ``.git`` only; writes only inside ``clone``. With
    ``whiteouts`` ``clone`` is an overlay's start layer (``layers.py``), empty but its
    ``.git``: differences are laid as files, and deletions as whiteouts over the base;
    ``alternates`` then names the person's object directory (HEAD's objects). ``found``:
    the worktree's layout, when the caller discovered it already. With ``watched`` the
    daemon's watch may narrow the status pass (``start_watch.plan``), and the pass is
    kept as the next start's baseline; ``asking``: that watch asked already, beside the
    caller's work (``start_watch.Asking``).
    """
    layout = found or discover(worktree)
    if alternates is None:
        planned = _plan(watched, asking, layout, base_tree)
        return _capture(layout, clone, home, base_tree, whiteouts, None, planned, watched)
    start_env = {  # an overlay's start layer: HEAD's objects are the person's
        "GIT_DIR": str(clone.absolute() / ".git"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": alternates,
    }
    with CatFile(cwd=clone, env=start_env) as reader:  # git starts while the daemon answers
        planned = _plan(watched, asking, layout, base_tree)
        return _capture(layout, clone, home, base_tree, whiteouts, reader, planned, watched)


def _plan(
    watched: start_watch.Watched | None,
    asking: start_watch.Asking | None,
    layout: RepoLayout,
    base_tree: str,
) -> start_watch.Plan | None:
    if asking is not None:
        return asking.plan(base_tree)
    return None if watched is None else start_watch.plan(watched, layout, base_tree)


class _Closing(threading.Thread):
    """A reading of the person's worktree closed beside the rest of the start and the run
    (its reader stopped, its private directory removed: unlinks that may wait for the
    disk). Not a daemon thread: the process ends only once it is done; a failure is
    logged (the directory is a private temporary one)."""

    def __init__(self, shadow: SeededShadow) -> None:
        super().__init__(name="promoter-start-close")
        self._shadow = shadow

    def run(self) -> None:
        try:
            self._shadow.close()
        except Exception as exc:  # nothing waits for it: said, not raised
            log.warning("the start's reading of the worktree was not closed: %s", exc)


def _capture(
    layout: RepoLayout,
    clone: Path,
    home: Path,
    base_tree: str,
    whiteouts: bool,
    reader: CatFile | None,
    planned: start_watch.Plan | None,
    watched: start_watch.Watched | None,
) -> StartState:
    """``capture_into`` once the plan is made (``reader``: the overlay layer's objects)."""
    env = repo_env(layout)
    objects = LooseObjects(str(clone / ".git" / "objects"))
    laid: list[DiffEntry] = []
    captured: dict[str, tuple[str, str, int] | None] = {}  # path -> (sha256, mode, size)
    shadow = _read_person(layout, base_tree, planned, reader)
    try:
        entries = shadow.diff()
        _refuse_special_over(layout.worktree, entries)
        _refuse_unreadable(layout, base_tree, shadow.unopened)
        if watched is not None and planned is not None and shadow.narrowable:
            # a folder git could not open is kept a candidate: the narrowed pass names it again
            unopened = [os.fsencode(p) for p, why in shadow.unopened.items() if why not in _CUT]
            start_watch.record(
                watched,
                layout,
                planned,
                base_tree,
                [*shadow.status_paths, *unopened],
                shadow.index_walk,
            )
        skipped = shadow.unsupported(entries, symlinks=True)
        skipped.update(_unopened(shadow))
        with OwnTree.open(clone) as into:
            ordered = sorted(entries, key=lambda e: sort_key(e.path))
            written = {e.path for e in ordered if e.path not in skipped and e.new_oid}
            for entry in ordered:  # deletions first: a file may replace a directory
                if entry.path not in skipped and entry.new_oid is None:
                    if not whiteouts:
                        _delete(into, entry.path)
                    elif not layers.needs_no_whiteout(entry.path, written):
                        _whiteout(into, entry.path)
                    captured[entry.path] = None
                    laid.append(entry)
            for entry in ordered:
                if entry.path in skipped or entry.new_oid is None or entry.new_mode is None:
                    continue
                if entry.new_mode == _LINK:
                    target = shadow.read_blob(entry.new_oid)
                    _write(into, entry.path, _LINK, [target])
                    oid = objects.store_bytes(target)
                else:  # streamed into the clone, then stored from there and re-hashed
                    _write(into, entry.path, entry.new_mode, shadow.iter_blob(entry.new_oid))
                    oid = objects.store_file(os.fsencode(clone / entry.path))
                if oid != entry.new_oid:
                    raise ConfigError(f"{entry.path!r} changed while it was captured; run again")
                sha256, size = objects.digests[oid]
                captured[entry.path] = (sha256, entry.new_mode, size)
                laid.append(entry)
        staged_in, index_states = shadow.staged, shadow.index_states
    finally:
        _Closing(shadow).start()
    faults.point("start_state_laid")
    if reader is None:
        tree = _start_tree(clone, home, base_tree, laid, None)
    else:  # an overlay's start layer: only the trees on the laid paths are read
        edits = [(os.fsencode(e.path), e.new_mode, e.new_oid) for e in laid]
        tree = edited_tree(reader, objects.store_object, base_tree, edits)
    if staged_in is None:  # the status pass did not list the staged paths: git names them
        staged_in = _index_only(layout.worktree, env, base_tree)
    staged = [p for p in staged_in if p not in skipped]
    paths = sorted(set(captured) | set(staged), key=sort_key)
    unchanged = [p for p in paths if p not in captured]
    if unchanged:  # staged only: the worktree holds HEAD's content there
        base = tree_entries(layout, base_tree, unchanged)
        oids = [e.oid for e in base.values() if e is not None]
        digests = blob_sha256(layout, oids) if oids else {}
        for path in unchanged:
            head = base.get(path)
            if head is not None and head.mode not in _MODES:
                skipped.setdefault(path, f"mode {head.mode} in HEAD (not a file or link)")
                paths.remove(path)
            elif head is None:
                captured[path] = None
            else:
                sha256, size = digests[head.oid]
                captured[path] = (sha256, head.mode, size)
    index = _index_of(layout, paths, index_states)
    preconditions: list[dict[str, Any]] = []
    for path in paths:
        listed = index.get(path, [])
        if len(listed) > 1 or any(e.stage != 0 or e.intent_to_add for e in listed):
            continue  # unmerged or intent-to-add: no precondition can say it
        state = captured[path]
        old = (
            {"exists": False, "sha256": None, "mode": None}
            if state is None
            else {"exists": True, "sha256": state[0], "mode": state[1]}
        )
        spec = listed[0] if listed else None
        preconditions.append(
            {
                "path": wire_path(path),
                "old": old,
                "index": None if spec is None else {"mode": spec.mode, "oid": spec.oid, "stage": 0},
            }
        )
    admitted, refused = _admissible(preconditions)
    return StartState(
        tree=tree,
        preconditions=admitted,
        skipped=[{"path": p, "reason": why} for p, why in skipped.items()] + refused,
    )


def _admissible(
    preconditions: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The preconditions a grant can hold (protocol: documents#path-rules, documents#path-set), and
    the rest.

    A file that replaced a directory (or the reverse) gives two paths, one a prefix
    directory of the other: the one whose captured state is missing is left out. A path
    left out has the implicit precondition (HEAD's), which refuses an edit of it.
    """
    refused: list[dict[str, str]] = []
    valid: dict[str, dict[str, Any]] = {}
    for item in preconditions:
        try:
            check_path(item["path"])
        except PathInvalid as exc:
            refused.append({"path": item["path"], "reason": f"no precondition: {exc.detail}"})
            continue
        valid[item["path"]] = item
    folded: dict[str, list[str]] = {}
    for path in valid:
        folded.setdefault(path.casefold(), []).append(path)
    drop = {p for group in folded.values() if len(group) > 1 for p in group}
    for path in valid:
        parts = path.casefold().split("/")
        for depth in range(1, len(parts)):
            for prefix in folded.get("/".join(parts[:depth]), []):
                pair = (prefix, path)
                gone = [p for p in pair if not valid[p]["old"]["exists"]]
                drop.update(gone or pair)
    for path in sorted(drop, key=sort_key):
        why = "no precondition: its path collides with another changed path"
        refused.append({"path": path, "reason": why})
    return [item for path, item in valid.items() if path not in drop], refused
