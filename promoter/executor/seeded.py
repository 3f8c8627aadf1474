"""The builder's shadow tree, seeded from the worktree's own index: it scales with the change.

This module owns ``SeededShadow``: the same answers as ``worktree_tree.ShadowTree`` (the
changes of a worktree against its seed ``base_tree``) from a copy of the worktree's index
(checked by ``seed_index.py``), one read-only ``git status --porcelain=v2`` on that copy,
and a single read of each named path (``loose_objects.py``: git blob id, sha256 and an
uncompressed loose object in one pass). It is used only where the seed cannot change the
answer, else ``ShadowTree`` runs (protocol: snapshots#seeded-shadow).

Not here: judging the changes (``builder.py``), any write to the worktree or its ``.git``;
the tree id is computed only when asked (``tree``).
"""

from __future__ import annotations

import mmap
import os
import re
import stat
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

from promoter.domain.record_type import replace
from promoter.errors import GitError
from promoter.executor.loose_objects import IN_MEMORY, LooseObjects, Unstable
from promoter.executor.seed_index import (
    Index,
    NotPlain,
    PlainIndex,
    candidates_index,
    converting_config,
    copy_index,
    harmless_attributes,
    plain_index,
)
from promoter.git.head import read_head
from promoter.git.layout import RepoLayout
from promoter.git.objects import CHUNK_SIZE, CatFile
from promoter.git.readback import prefixes_of, tree_entries, tree_entries_read
from promoter.git.records import (
    DiffEntry,
    DiffStatus,
    IndexEntry,
    check_pathspec_paths,
    decode_path,
    require_oid,
    unopened_directories,
)
from promoter.git.runner import GitResult, run_git
from promoter.git.tree_edit import TREE_MODE, tree_bytes
from promoter.git.worktree_tree import NO_CONVERSION, ShadowTree

__all__ = ["SeededShadow"]

# Objects the shadow writes are thrown away with it: never spend time compressing them.
_NO_COMPRESSION = ("-c", "core.compression=0", "-c", "core.looseCompression=0")
# One pass over the copy, as ``git status`` makes it: the base (the private HEAD) against
# the index, the index against the files (stat-dirty entries compared by content first,
# so a touched file is not named) and the untracked files, each listed.
_STATUS = [
    "status",
    "--porcelain=v2",
    "-z",
    "--untracked-files=all",
    "--ignored=no",
    "--no-renames",
    "--ignore-submodules=dirty",
]
_UNTRACKED = ["ls-files", "-o", "-z", "--exclude-standard", "--full-name"]
# The private commit of the base tree that status compares the index against (HEAD).
_BASE_COMMIT = b"tree %s\nauthor promoter <> 0 +0000\ncommitter promoter <> 0 +0000\n\nbase\n"
_GITLINK = "160000"
_LINK = "120000"
_NULL_OID = "0" * 40


class _Walk(threading.Thread):
    """``plain_index(data)`` in a thread of its own, its answer or its error kept for
    ``result`` (a thread, not a pool: ``concurrent.futures`` would load ``logging``)."""

    def __init__(self, data: Index) -> None:
        super().__init__(name="promoter-index-walk")
        self._data = data
        self._answer: PlainIndex | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._answer = plain_index(self._data)
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc

    def result(self) -> PlainIndex:
        self.join()
        if self._error is not None:
            raise self._error
        assert self._answer is not None
        return self._answer


class _NoSeed(Exception):
    """The seed cannot be trusted to give ShadowTree's answer; compute in full."""


class SeededShadow(ShadowTree):
    """``ShadowTree`` for the builder; ``seed=False`` forces the full computation.

    After entry ``seeded`` says which computation ran, ``gitlinks`` holds the base
    tree's gitlink paths when the seed showed them (``None``: list the base tree).
    ``head_tree``: HEAD's tree when the caller has read it (``None``: ``unsupported``
    reads it with ``head.read_head``: from HEAD's files, no git process, when this
    process's git named that commit's tree before). ``only``: the status pass reads
    these paths (literal pathspecs) and nothing else; the caller vouches that no other
    path differs (``start_watch.plan``).
    An index with gitlinks is then computed in full (a submodule's HEAD moves with no
    event in the worktree). ``known_index``: an earlier walk of an index (``index_key``),
    used when the copy has that key instead of walking it again; when it is a walk of
    the very index file, a limited pass reads the candidates' index
    (``seed_index.candidates_index``), not a copy of the whole, with the base pruned to the
    candidates read through ``trees`` (a running ``cat-file --batch`` that reaches the
    base's objects) when the caller has one, else by ``ls-tree``. With no gitlink in the
    index nor among the staged changes, a seeded pass leaves ``staged`` (the paths whose
    index entry differs from the base, as ``git diff-index --cached`` names them) and
    ``index_states`` (the index entry of every path it named) as read from the same index.
    """

    def __init__(
        self,
        layout: RepoLayout,
        *,
        base_tree: str,
        tmpdir: str | None = None,
        timeout: float = 600.0,
        seed: bool = True,
        head_tree: str | None = None,
        only: Sequence[bytes] | None = None,
        known_index: tuple[str, PlainIndex] | None = None,
        trees: CatFile | None = None,
    ) -> None:
        super().__init__(layout, base_tree=base_tree, tmpdir=tmpdir, timeout=timeout)
        self._seed = seed
        self._head_tree = head_tree
        self._only = None if only is None else list(only)
        self._trees = trees  # a running reader of the base's trees, if the caller has one
        self.status_paths: list[bytes] = []  # every path the seeded status pass named
        self.narrowable = False  # whether that pass may be limited next time (start_watch)
        self.index_walk = known_index  # (index_key of the copy, its walk), once walked
        self.staged: list[str] | None = None  # paths whose index entry differs from the base
        self.index_states: dict[str, IndexEntry | None] | None = None  # of the paths named
        self._entries: list[DiffEntry] | None = None
        self._objects = LooseObjects("")  # its directory is known on entry
        self.seeded = False
        self.gitlinks: tuple[str, ...] | None = None
        self._index_gitlinks: frozenset[str] | None = None

    # --- computing --------------------------------------------------------------------

    def _compute(self) -> str:
        if self._seed and self.base_tree is not None:
            try:
                self._entries = self._seeded(self.base_tree)
            except _NoSeed:
                self._entries = None
                self.gitlinks = None
                self.nested_repositories = ()
            else:
                self.seeded = True
                return ""  # the tree id is written only when asked for
        return super()._compute()

    def _git(
        self,
        args: list[str],
        *,
        input: bytes | None = None,
        literal: bool = False,
        read: bool = False,
    ) -> GitResult:
        return super()._git([*_NO_COMPRESSION, *args], input=input, literal=literal, read=read)

    def _seeded(self, base: str) -> list[DiffEntry]:
        assert self._root is not None
        self._objects = LooseObjects(os.path.join(self._env["GIT_DIR"], "objects"))
        if converting_config(self.layout.common_dir, self.layout.git_dir):
            raise _NoSeed
        seed = os.path.join(self._root, "seed-index")
        known = self.index_walk
        try:
            data, source, head = self._seed_index(seed, known, base)
        except NotPlain as exc:
            raise _NoSeed from exc
        self._point_head_at(head)
        env = {**self._read_env, "GIT_INDEX_FILE": seed}
        limit: list[str] = []
        literal: dict[str, str] = {}
        if self._only is not None:
            limit = ["--", *(os.fsdecode(p) for p in self._only)]
            literal = {"GIT_LITERAL_PATHSPECS": "1"}
        key = index_key(data) if data is not None else None if known is None else known[0]
        reuse = known is not None and key is not None and known[0] == key
        walked: _Walk | None = None
        if data is not None and not (reuse and known is not None and known[1].source == source):
            walked = _Walk(data)  # while git reads the copy (its marks name this file)
            walked.start()
        try:
            if self._only == []:
                status = b""  # no candidate: no path differs
            else:
                status = self._seed_git([*_STATUS, *limit], {**env, **literal})
        finally:
            if walked is not None:
                walked.join()
            if isinstance(data, mmap.mmap):
                data.close()  # the map of the copy: walked, and read by git
        try:
            index = walked.result() if walked is not None else _known(known)
        except NotPlain as exc:
            raise _NoSeed from exc
        if walked is not None:
            index = replace(index, source=source)
        self.index_walk = None if key is None else (key, index)
        if self._only is not None and index.gitlinks:
            raise _NoSeed
        files, cached, untracked = _parse_status(status)
        self.status_paths = _named(status)
        if b".gitattributes" in untracked:
            raise _NoSeed
        if any(e.status == "A" for e in files):  # intent-to-add
            raise _NoSeed
        if any(os.path.basename(e.path) == ".gitattributes" for e in cached):
            raise _NoSeed
        same_paths = all(e.status in "MT" for e in cached)
        same_links = not any(_GITLINK in (e.old_mode, e.new_mode) for e in cached)
        if not (same_paths and same_links):
            self._git(["read-tree", base], read=True)  # the base's own index, no stat data
            untracked = self._seed_git([*_UNTRACKED, *limit], {**self._env, **literal})
        touched = {e.path for e in files} | {e.path for e in cached}
        for path in index.attributes:  # as checked out and added, and harmless
            if path in touched or not self._harmless_attributes(path):
                raise _NoSeed
        self._index_gitlinks = frozenset(index.gitlinks)
        if same_links:
            self.gitlinks = tuple(sorted(self._index_gitlinks))
        try:
            changes = self._changes(files, cached, untracked)
        except OSError as exc:  # unreadable, or no room: git's own error, from the full run
            raise _NoSeed from exc
        self.narrowable = not index.gitlinks and not self.nested_repositories
        if not index.gitlinks and same_links:  # status named every staged path, as it is
            self.staged = [e.path for e in cached]
            self.index_states = _index_states(files, cached, untracked)
        return changes

    def _seed_index(
        self, seed: str, known: tuple[str, PlainIndex] | None, base: str
    ) -> tuple[Index | None, tuple[int, ...], str]:
        """The status pass's index at ``seed`` and the tree its private HEAD holds.

        For a pass limited to a few paths, when ``known`` is a walk of the very index
        file: the candidates' index (no bytes returned) and ``base`` pruned to those
        paths (status compares HEAD with the index over every tree first, and filters
        by the pathspec after). Else a copy of the whole index (the map of it) and ``base``.
        With the identity of the index file read."""
        source = os.path.join(self.layout.git_dir, "index")
        if self._only is not None and known is not None and self.layout.object_format == "sha1":
            try:
                entries, mtime = candidates_index(source, known[1], known[0], self._only)
                head = self._pruned_tree(base, [os.fsdecode(p) for p in self._only])
            except (NotPlain, ValueError, GitError):
                pass  # the whole copy, walked again
            else:
                fd = os.open(seed, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(entries)
                os.utime(seed, ns=(mtime, mtime))
                return None, known[1].source, head
        data, identity = copy_index(source, seed)
        return data, identity, base

    def _pruned_tree(self, base: str, paths: list[str]) -> str:
        """``base`` holding only the entries of ``paths`` (a directory with all it holds),
        written into the shadow's objects: the same answer for those paths, read fast."""
        check_pathspec_paths(paths)
        top: dict[bytes, Any] = {}  # name -> (mode, id) or a folder's own dict
        if self._trees is not None:  # no ls-tree started: the caller's reader reads them
            found = tree_entries_read(self._trees, base, paths)
        else:
            found = tree_entries(self.layout, base, paths)
        for path, entry in sorted(found.items()):
            if entry is None:
                continue
            *folders, name = os.fsencode(path).split(b"/")
            node: dict[bytes, Any] | None = top
            for folder in folders:
                assert node is not None
                child = node.setdefault(folder, {})
                node = child if isinstance(child, dict) else None  # kept whole above
                if node is None:
                    break
            if node is not None:
                node[name] = (entry.mode.lstrip("0").encode(), bytes.fromhex(entry.oid))
        return self._store_tree(top).hex()

    def _store_tree(self, node: dict[bytes, Any]) -> bytes:
        entries = {
            name: (TREE_MODE, self._store_tree(child)) if isinstance(child, dict) else child
            for name, child in node.items()
        }
        return bytes.fromhex(self._objects.store_object(b"tree", tree_bytes(entries)))

    def _point_head_at(self, base: str) -> None:
        """The private HEAD (``refs/heads/main``) at a private commit of the tree ``base``."""
        commit = self._objects.store_object(b"commit", _BASE_COMMIT % base.encode("ascii"))
        ref = os.path.join(self._env["GIT_DIR"], "refs", "heads", "main")
        fd = os.open(ref, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(commit.encode("ascii") + b"\n")

    def _harmless_attributes(self, path: str) -> bool:
        full = os.path.join(os.fsencode(self.layout.worktree), os.fsencode(path))
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(full, flags)
        except OSError:
            return False
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > IN_MEMORY:
                return False
            return harmless_attributes(handle.read())

    def _seed_git(self, args: list[str], env: dict[str, str]) -> bytes:
        try:
            result = run_git(
                [*NO_CONVERSION, *args], cwd=self.layout.worktree, env=env, timeout=self._timeout
            )
        except GitError as exc:  # e.g. a split index whose shared part is not here
            raise _NoSeed from exc
        self.unopened.update(unopened_directories(result.stderr))
        return result.stdout

    def _changes(
        self, files: list[DiffEntry], cached: list[DiffEntry], untracked: bytes
    ) -> list[DiffEntry]:
        """The base-to-worktree changes at every path the seed could not vouch for."""
        base: dict[str, tuple[str, str | None] | None] = {}
        for entry in cached:  # base -> index
            base[entry.path] = None if entry.old_mode is None else (entry.old_mode, entry.old_oid)
        for entry in files:  # index -> files; the index equals the base where not cached
            if entry.path not in base and entry.old_mode is not None:
                base[entry.path] = (entry.old_mode, entry.old_oid)
        added: list[str] = []
        nested: list[str] = []
        for raw in untracked.split(b"\0")[:-1]:
            if raw.endswith(b"/"):
                nested.append(decode_path(raw[:-1]))
            elif base.get(decode_path(raw)) is None:
                added.append(decode_path(raw))
        self.nested_repositories = tuple(nested)
        moved = {e.path for e in files if e.new_mode == _GITLINK}
        entries: list[DiffEntry] = []
        for path, old in base.items():
            if old is None:
                continue
            if old[0] == _GITLINK and path in moved:  # its HEAD moved: refused by the caller
                entries.append(DiffEntry("M", path, old[0], _GITLINK, old[1], None))
                continue
            new = self._read(path, tracked_gitlink=old[0] == _GITLINK, known=old[1])
            if new is None:
                entries.append(DiffEntry("D", path, old[0], None, old[1], None))
            elif new != old:
                status: DiffStatus = "M" if _kind(new[0]) == _kind(old[0]) else "T"
                entries.append(DiffEntry(status, path, old[0], new[0], old[1], new[1]))
        for path in added:
            new = self._read(path, tracked_gitlink=False)
            if new is not None:
                entries.append(DiffEntry("A", path, None, new[0], None, new[1]))
        return sorted(entries, key=lambda e: os.fsencode(e.path))  # diff-tree's order

    # --- reading the worktree ---------------------------------------------------------

    def _read(
        self, path: str, *, tracked_gitlink: bool, known: str | None = None
    ) -> tuple[str, str] | None:
        """(mode, blob id) of ``path`` in the worktree, stored; ``None`` when absent.

        Bytes whose id is ``known`` (the base's) are hashed and not stored.
        """
        raw = os.fsencode(path)
        top = os.fsencode(self.layout.worktree)
        parts = raw.split(b"/")
        for depth in range(1, len(parts)):  # a leading symlink or file: git sees no entry
            try:
                if not stat.S_ISDIR(os.lstat(os.path.join(top, *parts[:depth])).st_mode):
                    return None
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as exc:
                raise _NoSeed from exc
        full = os.path.join(top, raw)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise _NoSeed from exc  # git's own error, from the full computation
        if stat.S_ISDIR(st.st_mode):
            if tracked_gitlink:
                raise _NoSeed  # whatever the directory holds, ShadowTree's add decides
            return None
        if stat.S_ISLNK(st.st_mode):
            return _LINK, self._objects.store_bytes(os.readlink(full), known)
        if not stat.S_ISREG(st.st_mode):
            raise _NoSeed  # git's own refusal, with its own message
        mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
        try:
            return mode, self._objects.store_file(full, known)
        except Unstable as exc:  # changed while read: as git would see it, again
            raise _NoSeed from exc

    # --- results ----------------------------------------------------------------------

    @property
    def tree(self) -> str:
        """The id of the worktree's tree (written on first use after a seeded scan)."""
        if self._tree is None or self._root is None:
            raise RuntimeError("ShadowTree is not open; use it as a context manager")
        if self._tree == "":
            self._tree = self._write_tree()
        return self._tree

    def _write_tree(self) -> str:
        assert self._entries is not None and self.base_tree is not None
        self._git(["read-tree", self.base_tree], read=True)
        lines = b""
        for e in self._entries:
            mode = e.new_mode or "0"
            oid = (e.new_oid or e.old_oid or _NULL_OID) if e.new_mode else _NULL_OID
            lines += b"%s %s\t%s\0" % (mode.encode(), oid.encode(), os.fsencode(e.path))
        if lines:
            self._git(["update-index", "-z", "--index-info"], input=lines, literal=True)
        tree = self._git(["write-tree", "--missing-ok"]).stdout.decode("ascii", "replace").strip()
        return require_oid(tree, "written tree")

    def unsupported(
        self, entries: Sequence[DiffEntry] | None = None, *, symlinks: bool = False
    ) -> dict[str, str]:
        """``ShadowTree.unsupported``, answered from the seed's listing when it holds the
        gitlinks of the index and of HEAD (HEAD's tree is the base tree); the same
        reasons, in the same order as ``gitlinks.gitlinks_and_nested`` gives them."""
        if self._index_gitlinks is None or self.gitlinks is None:
            return super().unsupported(entries, symlinks=symlinks)
        head_tree = self._head_tree
        if head_tree is None:  # from HEAD's files when git answered for that commit before
            head_tree = read_head(self.layout).tree
        if head_tree != self.base_tree:
            return super().unsupported(entries, symlinks=symlinks)
        found, others = self._by_mode(entries, symlinks=symlinks)
        check_pathspec_paths(others)
        if not others:  # no other path to look up
            return dict(sorted(found.items()))
        from promoter.git.gitlinks import first_gitlink_reason

        in_index, in_head = set(self._index_gitlinks), set(self.gitlinks)
        seen: dict[str, str | None] = {}
        for path in others:
            reason = first_gitlink_reason(self.layout, prefixes_of(path), in_index, in_head, seen)
            if reason is not None:
                found.setdefault(path, reason)
        return dict(sorted(found.items()))

    def diff(self, base_tree: str | None = None) -> list[DiffEntry]:
        if self._entries is not None and base_tree in (None, self.base_tree):
            return list(self._entries)
        return super().diff(base_tree)

    def read_blob(self, oid: str) -> bytes:
        """``ShadowTree.read_blob``; a blob the seeded pass stored is read from its own
        loose object, with no ``cat-file`` started."""
        own = self._objects.chunks(oid) if self.seeded else None
        return super().read_blob(oid) if own is None else b"".join(own)

    def iter_blob(self, oid: str, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """``ShadowTree.iter_blob``; a blob the seeded pass stored is read from its own
        loose object (in the store's chunks), with no ``cat-file`` started."""
        own = self._objects.chunks(oid) if self.seeded else None
        return super().iter_blob(oid, chunk_size) if own is None else own

    def blob_sha256(
        self, oids: Iterable[str], *, base: CatFile | None = None
    ) -> dict[str, tuple[str, int]]:
        """``ShadowTree.blob_sha256``; after a seeded scan every blob it did not store is
        one of the repository's, read through ``base`` (a reader of the repository's
        objects, already running) when given."""
        wanted = list(dict.fromkeys(oids))
        known = {oid: self._objects.digests[oid] for oid in wanted if oid in self._objects.digests}
        rest = [oid for oid in wanted if oid not in known]
        if not rest:
            return known
        if base is not None and self.seeded:
            return {**known, **base.blob_sha256(rest)}
        return {**known, **super().blob_sha256(rest)}


def _parse_status(out: bytes) -> tuple[list[DiffEntry], list[DiffEntry], bytes]:
    """``git status --porcelain=v2 -z`` (``_STATUS``) as diff-files entries (index to
    files), diff-index ``--cached`` entries (base to index) and the untracked names,
    each NUL-terminated as ``ls-files -o -z`` gives them.

    Any other record (an unmerged entry, a rename) or shape is ``_NoSeed``.
    """
    files: list[DiffEntry] = []
    cached: list[DiffEntry] = []
    untracked: list[bytes] = []
    if out and not out.endswith(b"\0"):
        raise _NoSeed
    for record in out.split(b"\0")[:-1]:
        if record.startswith(b"? "):
            untracked.append(record[2:])
            continue
        fields = record.split(b" ", 8)
        if len(fields) != 9 or fields[0] != b"1" or not _STATUS_FIELDS.fullmatch(record):
            raise _NoSeed
        _, xy, _, head, index, work, head_oid, index_oid, raw = fields
        path = decode_path(raw)
        staged, unstaged = chr(xy[0]), chr(xy[1])
        if staged != ".":
            cached.append(_entry(staged, path, head, index, head_oid, index_oid))
        if unstaged != ".":
            files.append(_entry(unstaged, path, index, work, index_oid, None))
    return files, cached, b"".join(raw + b"\0" for raw in untracked)


def _index_states(
    files: list[DiffEntry], cached: list[DiffEntry], untracked: bytes
) -> dict[str, IndexEntry | None]:
    """The index entry (stage 0) of every path a ``_STATUS`` listing named, from its
    records' index mode and id; ``None``: not in the index (deleted there, untracked)."""
    states: dict[str, IndexEntry | None] = {}
    for raw in untracked.split(b"\0")[:-1]:
        states[decode_path(raw)] = None
    for entry in files:  # index -> files: the index side is old
        states[entry.path] = (
            None
            if entry.old_mode is None or entry.old_oid is None
            else IndexEntry(entry.old_mode, entry.old_oid, 0)
        )
    for entry in cached:  # base -> index: the index side is new
        states[entry.path] = (
            None
            if entry.new_mode is None or entry.new_oid is None
            else IndexEntry(entry.new_mode, entry.new_oid, 0)
        )
    return states


def _known(known: tuple[str, PlainIndex] | None) -> PlainIndex:
    assert known is not None
    return known[1]


def index_key(data: Index) -> str | None:
    """What identifies an index's bytes: its length and git's checksum trailer (a hash of
    everything before it); ``None`` when git wrote no checksum (``index.skipHash``)."""
    trailer = data[-20:]
    if len(data) < 52 or not trailer.strip(b"\0"):
        return None
    return f"{len(data)}:{trailer.hex()}"


def _named(out: bytes) -> list[bytes]:
    """Every path a ``_STATUS`` listing names (a nested repository's with its ``/``)."""
    named: list[bytes] = []
    for record in out.split(b"\0")[:-1]:
        named.append(record[2:] if record.startswith(b"? ") else record.split(b" ", 8)[-1])
    return named


_STATUS_FIELDS = re.compile(
    rb"1 [.MTAD]{2} (?:N\.\.\.|S[.C][.M][.U])(?: [0-7]{6}){3}(?: [0-9a-f]{40}){2} .+", re.DOTALL
)
_ABSENT = b"000000"


def _entry(
    status: str, path: str, old: bytes, new: bytes, old_oid: bytes, new_oid: bytes | None
) -> DiffEntry:
    """A raw diff entry from status's fields; ``_NoSeed`` when status and modes disagree."""
    old_absent, new_absent = old == _ABSENT, new == _ABSENT
    if (status == "A") != old_absent or (status == "D") != new_absent:
        raise _NoSeed
    return DiffEntry(
        cast(DiffStatus, status),  # _STATUS_FIELDS admits only these (and ".", not passed)
        path,
        None if old_absent else old.decode("ascii"),
        None if new_absent else new.decode("ascii"),
        None if old_absent else old_oid.decode("ascii"),
        None if new_absent or new_oid is None else new_oid.decode("ascii"),
    )


def _kind(mode: str) -> str:
    return mode[:3]  # 100 file, 120 link, 160 gitlink
