"""Shadow snapshot repositories (SPEC §8): one private bare repository per worktree.

This module owns ``<state>/snapshots/<repository_identity>.git``: creating it, keeping
its configuration, ignore rules and neutral attributes current, ``capture`` (the tree of
the worktree's current files, through the shadow's own persistent index), keeping
captured trees reachable (one ref ``refs/snapshots/<tree>`` per tree) and collecting
the rest, ``diff`` between two trees (raw entries plus a size-capped unified diff),
tree listings and blob reads for a restore.

How the user's repository stays untouched: every command runs with ``GIT_DIR`` set to
the shadow and ``GIT_INDEX_FILE`` to ``<shadow>/promoter-index``; only the capture
commands also set ``GIT_WORK_TREE`` to the worktree, which they read and never write.
The user's ``.git`` is neither a git directory nor an object store for them (no
alternates: every blob is written into the shadow), git never descends into a ``.git``
entry, and the shadow's ``info/exclude`` names ``.git`` as well. Untracked nested
repositories are skipped, never added as gitlinks. The configuration, attributes and
hermetic options are those of ``worktree_tree.ShadowTree`` (bytes in equal bytes out).

Capture: ``add -u`` (the stat cache makes it O(changed files); git re-hashes racily
clean entries, whose mtime is not older than the index file's), tracked entries that are
now ignored are dropped, untracked files that ``.gitignore``, the repository's
``info/exclude`` and the shadow's own rules do not ignore are added, then
``write-tree``. The tree is therefore a function of the worktree's files alone, not of
the capture history. promoter's own temp files are never captured.

``capture_paths`` is the same capture limited to some paths, for a caller that knows
nothing else can differ from the shadow index (``promoter.engine.snapshots.capture`` says when):
each path is brought to what is on disk (``update-index --add --remove``), dropped again
if ignored, and the tree written. It declines (``None``) when the exclude rules changed,
a path is a ``.gitignore``, or a path is a directory on disk, since then other paths'
answers could differ too.

``capture_changed`` is the capture when only some paths (and what is below them) can
differ from a tree this shadow captured (``promoter.git.shadow_watch`` knows which,
from an inotify watch): the paths are listed the way the full capture lists untracked
files, into a private index that is never kept, and set into that tree by
``promoter.git.tree_edit``; the shadow index is neither read nor written.
``ignored_directories`` names the directories ignored as a whole, which a watch skips.

Deliberately not here: the shadow's own files on disk (``shadow_files.py``), the diff's
shape and its capped read (``shadow_diff.py``), the repository lock (callers hold it
around ``capture`` and ``collect_garbage``), the database, and any write to the worktree.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from promoter.errors import GitError, StorageError
from promoter.git.layout import RepoLayout
from promoter.git.objects import CatFile
from promoter.git.records import (
    DiffEntry,
    TreeEntry,
    decode_path,
    parse_diff_raw,
    parse_ls_tree,
    require_oid,
)
from promoter.git.runner import GitResult, run_git, stderr_tail
from promoter.git.shadow_diff import DIFF_FLAGS, DIFF_LIMIT, SnapshotDiff, bounded_stdout
from promoter.git.shadow_files import OWN_EXCLUDES, ensure_shadow, put_file, unlink_missing_ok
from promoter.git.tree_edit import TreeConflict, edit_tree
from promoter.git.worktree_tree import NO_CONVERSION, ShadowTree

__all__ = ["DIFF_LIMIT", "INDEX_NAME", "Capture", "ShadowRepository", "SnapshotDiff"]

INDEX_NAME = "promoter-index"
DELTA_INDEX_NAME = "promoter-index-delta"  # capture_changed's private index, never kept
REF_PREFIX = "refs/snapshots/"
_PATHS_BYTES = 128 * 1024  # capture_paths names its paths in one argv


@dataclass(frozen=True)
class Capture:
    """A captured tree and the untracked nested repositories that were left out."""

    tree: str
    nested_repositories: tuple[str, ...]


class ShadowRepository:
    """The shadow bare repository of one worktree; ``open`` creates it when missing."""

    def __init__(self, layout: RepoLayout, path: str, *, timeout: float = 600.0) -> None:
        self.layout = layout
        self.path = path
        self.timeout = timeout
        index = os.path.join(path, INDEX_NAME)
        self._env = {"GIT_DIR": path, "GIT_INDEX_FILE": index}
        self._work_env = {**self._env, "GIT_WORK_TREE": layout.worktree}

    @classmethod
    def open(cls, layout: RepoLayout, snapshots_dir: str, identity: str) -> ShadowRepository:
        """The shadow of ``layout`` under ``snapshots_dir``, created or refreshed."""
        if not identity.startswith("repo_") or "/" in identity:
            raise ValueError(f"not a repository identity: {identity!r}")
        path = os.path.join(os.path.realpath(snapshots_dir), identity + ".git")
        try:
            ensure_shadow(path)
        except OSError as exc:
            raise StorageError(f"cannot prepare the shadow repository {path}: {exc}") from exc
        return cls(layout, path)

    # --- capture ------------------------------------------------------------------------

    def capture(self) -> Capture:
        """Bring the shadow index to the worktree's files and write their tree."""
        self._refresh_excludes()
        unlink_missing_ok(os.path.join(self.path, INDEX_NAME + ".lock"))  # a killed capture's
        self._work(["add", "-u"])
        ignored = self._work(["ls-files", "-z", "-c", "-i", "--exclude-standard"]).stdout
        if ignored:
            self._work(["update-index", "--force-remove", "-z", "--stdin"], input=ignored)
        listing = self._work(["ls-files", "-z", "-o", "--exclude-standard"]).stdout
        files: list[bytes] = []
        nested: list[str] = []
        for raw in listing.split(b"\0")[:-1]:
            if raw.endswith(b"/"):
                nested.append(decode_path(raw[:-1]))
            else:
                files.append(raw)
        if files:
            stdin = b"".join(raw + b"\0" for raw in files)
            self._work(["update-index", "--add", "--replace", "-z", "--stdin"], input=stdin)
        tree = self._work(["write-tree"]).stdout.decode("ascii", "replace").strip()
        return Capture(require_oid(tree, "written tree"), tuple(nested))

    def capture_paths(self, paths: Sequence[str]) -> Capture | None:
        """Capture when only ``paths`` can differ from the shadow index; ``None``: declined.

        The result equals ``capture()`` under that condition (module docstring).
        """
        if any(path.rsplit("/", 1)[-1] == ".gitignore" for path in paths):
            return None
        if sum(len(os.fsencode(path)) + 9 for path in paths) > _PATHS_BYTES:
            return None
        if any(_is_dir(os.path.join(self.layout.worktree, path)) for path in paths):
            return None
        if self._refresh_excludes():
            return None
        unlink_missing_ok(os.path.join(self.path, INDEX_NAME + ".lock"))
        if paths:
            listing = b"".join(os.fsencode(path) + b"\0" for path in paths)
            updated = self._work(
                ["update-index", "--add", "--remove", "--replace", "-z", "--stdin"],
                input=listing,
                check=False,
            )
            if updated.returncode != 0:  # a directory (or worse) at a path: capture all
                return None
            ignored = self._work(
                ["ls-files", "-z", "-c", "-i", "--exclude-standard", "--", *paths]
            ).stdout
            if ignored:
                self._work(["update-index", "--force-remove", "-z", "--stdin"], input=ignored)
        tree = self._work(["write-tree"]).stdout.decode("ascii", "replace").strip()
        return Capture(require_oid(tree, "written tree"), ())

    def capture_changed(self, base: str, paths: Iterable[bytes]) -> Capture | None:
        """Capture when only ``paths`` (and what is below them) can differ from ``base``.

        ``base`` is a tree this shadow captured and ``paths`` are worktree-relative. The
        result equals ``capture()`` under that condition; ``None``: declined (the exclude
        rules changed, or git or the tree edit refused), so the caller captures in full.
        The shadow index is neither read nor written: each path is listed the way the
        full capture lists untracked files (``ls-files -o --exclude-standard``, nested
        repositories left out), hashed into a private index of its own, and set into
        ``base`` by ``promoter.git.tree_edit``.
        """
        wanted = _coarsened(_outermost(paths), _PATHS_BYTES)
        if wanted is None or self._refresh_excludes():
            return None
        if not wanted:
            return Capture(require_oid(base, "tree"), ())
        delta = os.path.join(self.path, DELTA_INDEX_NAME)
        unlink_missing_ok(delta)
        unlink_missing_ok(delta + ".lock")
        try:
            return self._capture_delta(base, wanted, delta)
        finally:
            unlink_missing_ok(delta)

    def ignored_directories(self) -> list[bytes]:
        """The worktree's directories that are ignored themselves (nothing below is captured).

        ``ls-files -o -i --directory`` against an empty private index names each directory
        whose whole content is ignored; ``check-ignore`` keeps those a rule ignores as a
        directory (a directory that merely holds only ignored files is not one of them:
        a new file there may be captured).
        """
        delta = os.path.join(self.path, DELTA_INDEX_NAME)
        unlink_missing_ok(delta)
        args = ["ls-files", "-z", "-o", "-i", "--exclude-standard", "--directory"]
        listing = self._work(args, index=delta).stdout
        candidates = [raw for raw in listing.split(b"\0") if raw.endswith(b"/")]
        if not candidates:
            return []
        stdin = b"".join(raw + b"\0" for raw in candidates)
        checked = self._work(
            ["check-ignore", "-z", "--stdin", "--no-index"],
            input=stdin,
            index=delta,
            check=False,
            literal=False,  # check-ignore takes names, and refuses pathspec magic
        )
        if checked.returncode not in (0, 1):  # 1: none of them is ignored
            raise GitError("git check-ignore failed", stderr=stderr_tail(checked.stderr))
        return [raw[:-1] for raw in checked.stdout.split(b"\0") if raw.endswith(b"/")]

    def _capture_delta(self, base: str, wanted: list[bytes], delta: str) -> Capture | None:
        specs = [os.fsdecode(path) for path in wanted]
        listing = self._work(
            ["ls-files", "-z", "-o", "--exclude-standard", "--", *specs], index=delta, check=False
        )
        if listing.returncode != 0:
            return None
        files: list[bytes] = []
        nested: list[str] = []
        for raw in listing.stdout.split(b"\0")[:-1]:
            if raw.endswith(b"/"):
                nested.append(decode_path(raw[:-1]))
            else:
                files.append(raw)
        added: dict[bytes, tuple[bytes, str]] = {}
        if files:
            stdin = b"".join(raw + b"\0" for raw in files)
            args = ["update-index", "--add", "--remove", "-z", "--stdin"]
            if self._work(args, input=stdin, index=delta, check=False).returncode != 0:
                return None
            for record in self._work(["ls-files", "-s", "-z"], index=delta).stdout.split(b"\0"):
                if record:
                    meta, path = record.split(b"\t", 1)
                    mode, oid, _stage = meta.split(b" ")
                    added[path] = (mode, oid.decode("ascii"))
        try:
            with self.reader() as cat:
                objects = os.path.join(self.path, "objects")
                tree = edit_tree(cat, objects, base, wanted, added)
        except TreeConflict:
            return None
        return Capture(tree, tuple(nested))

    def _refresh_excludes(self) -> bool:
        """Bring the shadow's exclude file up to date; whether it changed."""
        user = ShadowTree(self.layout)._user_excludes()  # the same copy ShadowTree makes
        data = user + (b"" if not user or user.endswith(b"\n") else b"\n")
        try:
            return put_file(
                os.path.join(self.path, "info", "exclude"), data + OWN_EXCLUDES.encode()
            )
        except OSError as exc:
            raise StorageError(f"cannot write the shadow's exclude file: {exc}") from exc

    # --- reachability ---------------------------------------------------------------------

    def keep(self, tree: str) -> None:
        """Keep ``tree`` (and so its blobs) reachable: ``refs/snapshots/<tree>``."""
        require_oid(tree, "tree")
        self._git(["update-ref", REF_PREFIX + tree, tree])

    def kept_trees(self) -> set[str]:
        """Every tree a ``refs/snapshots/`` ref keeps."""
        out = self._git(["for-each-ref", "--format=%(objectname)", REF_PREFIX]).stdout
        return {line for line in out.decode("ascii", "replace").split("\n") if line}

    def forget(self, tree: str) -> None:
        """Drop the ref of ``tree``; its objects go at the next ``collect_garbage``."""
        require_oid(tree, "tree")
        self._git(["update-ref", "-d", REF_PREFIX + tree])

    def collect_garbage(self) -> None:
        """Pack what is kept (refs and the shadow index) and prune everything else."""
        self._git(["gc", "--prune=now", "--quiet"])

    # --- reading ------------------------------------------------------------------------

    def has_tree(self, oid: str) -> bool:
        """Whether ``oid`` is a tree object in the shadow."""
        require_oid(oid, "tree")
        result = self._git(["cat-file", "-t", oid], check=False)
        return result.returncode == 0 and result.stdout.strip() == b"tree"

    def tree_files(self, tree: str) -> dict[str, TreeEntry]:
        """Every non-directory entry of ``tree``, recursively."""
        require_oid(tree, "tree")
        return dict(parse_ls_tree(self._git(["ls-tree", "-r", "-z", "--full-tree", tree]).stdout))

    def tree_dirs(self, tree: str) -> set[str]:
        """Every directory of ``tree``, recursively."""
        require_oid(tree, "tree")
        out = self._git(["ls-tree", "-r", "-t", "-z", "--full-tree", tree]).stdout
        return {path for path, entry in parse_ls_tree(out) if entry.type == "tree"}

    def diff_entries(self, from_tree: str, to_tree: str) -> list[DiffEntry]:
        """Raw changes from ``from_tree`` to ``to_tree`` (renames as delete + create)."""
        require_oid(from_tree, "tree")
        require_oid(to_tree, "tree")
        args = ["diff-tree", *DIFF_FLAGS, "-z", "--no-abbrev", from_tree, to_tree]
        return parse_diff_raw(self._git(args).stdout)

    def diff(self, from_tree: str, to_tree: str, *, limit: int = DIFF_LIMIT) -> SnapshotDiff:
        """Entries plus a unified diff of at most ``limit`` bytes, cut at a line end."""
        entries = self.diff_entries(from_tree, to_tree)
        data, truncated = b"", False
        if entries:
            args = ["diff-tree", *DIFF_FLAGS, "-p", from_tree, to_tree]
            data, truncated = bounded_stdout(
                args, cwd=self.path, env=self._env, timeout=self.timeout, limit=limit
            )
        if truncated:
            cut = data.rfind(b"\n", 0, limit)
            data = data[: cut + 1] if cut >= 0 else data[:limit]
        return SnapshotDiff(tuple(entries), data.decode("utf-8", "replace"), truncated)

    @contextmanager
    def reader(self) -> Iterator[CatFile]:
        """One ``cat-file --batch`` on the shadow's objects, for many blob reads."""
        with CatFile(cwd=self.path, env=self._env, timeout=self.timeout) as cat:
            yield cat

    # --- running git ----------------------------------------------------------------------

    def _git(self, args: list[str], *, input: bytes | None = None, check: bool = True) -> GitResult:
        return run_git(
            [*NO_CONVERSION, *args],
            cwd=self.path,
            env=self._env,
            input=input,
            timeout=self.timeout,
            check=check,
        )

    def _work(
        self,
        args: list[str],
        *,
        input: bytes | None = None,
        check: bool = True,
        index: str | None = None,
        literal: bool = True,
    ) -> GitResult:
        env = {**self._work_env, "GIT_LITERAL_PATHSPECS": "1"} if literal else {**self._work_env}
        if index is not None:
            env["GIT_INDEX_FILE"] = index
        return run_git(
            [*NO_CONVERSION, *args],
            cwd=self.layout.worktree,
            env=env,
            input=input,
            timeout=self.timeout,
            check=check,
        )


def _outermost(paths: Iterable[bytes]) -> list[bytes]:
    """``paths`` without those below another of them, sorted."""
    unique = set(paths)
    kept = set()
    for path in unique:
        parts = path.split(b"/")
        if not any(b"/".join(parts[:end]) in unique for end in range(1, len(parts))):
            kept.add(path)
    return sorted(kept)


def _coarsened(paths: list[bytes], limit: int) -> list[bytes] | None:
    """``paths`` replaced by their parents until they fit ``limit`` argv bytes; ``None``: never."""
    while sum(len(path) + 9 for path in paths) > limit:
        parents = {path.rpartition(b"/")[0] for path in paths}
        if b"" in parents:
            return None  # it comes to the whole worktree: a full capture
        paths = _outermost(parents)
    return paths


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
