"""The git tree of a worktree's current files, computed without writing its ``.git``.

This module owns the executor's shadow computation (protocol: snapshots#executor-side-shadow):
given a worktree and a seed tree, the id of the tree ``git add -A`` would write after
``git read-tree <seed>``, the raw diff of that tree against a base, and the new blobs'
bytes, all through a private git directory that leaves the repository untouched
(protocol: snapshots#executor-side-untouched). ``unsupported`` reports symlinks, gitlinks
and untracked nested repositories.

Not here: judging the result (no path rule or allowlist is applied here).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Sequence

from promoter.domain.closing import Closing
from promoter.domain.paths import wire_path
from promoter.errors import GitError, PathUnsafe, RepositoryInvalid
from promoter.fs.scratch import remove_scratch_dir, scratch_dir
from promoter.git.head import commit_tree, head_commit
from promoter.git.layout import RepoLayout
from promoter.git.objects import CHUNK_SIZE, CatFile
from promoter.git.records import (
    EMPTY_TREE,
    DiffEntry,
    decode_path,
    parse_diff_raw,
    require_oid,
    unopened_directories,
)
from promoter.git.runner import GitResult, run_git

__all__ = ["EMPTY_TREE", "SPECIAL_OVER", "DiffEntry", "ShadowTree", "special_over", "worktree_tree"]

UNSUPPORTED_MODES = {"120000": "a symbolic link", "160000": "a gitlink (submodule)"}
SPECIAL_OVER = "a FIFO, socket or device over a file or directory: git cannot carry it"

_CONFIG = """\
[core]
\trepositoryformatversion = 0
\tbare = false
\tfilemode = true
\tsymlinks = true
\tignorecase = false
\tautocrlf = false
\tsafecrlf = false
\tfsmonitor = false
\tuntrackedCache = false
\tsplitIndex = false
[gc]
\tauto = 0
[index]
\tsparse = false
"""

_ATTRIBUTES = "* -text -eol -crlf -filter -ident -working-tree-encoding\n"

NO_CONVERSION = ("-c", "core.autocrlf=false", "-c", "core.safecrlf=false")


class ShadowTree(Closing):
    """A worktree's current tree in a private object directory; a context manager.

    ``base_tree`` seeds the private index and defines which files count as tracked;
    ``None`` means HEAD's tree (no tree at all on an unborn branch). On entry the tree
    is computed (``.tree``); until exit its new objects stay readable through
    ``read_blob``, ``iter_blob`` and ``blob_sha256``. Exit deletes the private directory.
    """

    def __init__(
        self,
        layout: RepoLayout,
        *,
        base_tree: str | None = None,
        tmpdir: str | None = None,
        timeout: float = 600.0,
    ) -> None:
        if base_tree is not None:
            require_oid(base_tree, "base tree")
        self.layout = layout
        self.base_tree = base_tree
        self._tmpdir = tmpdir
        self._timeout = timeout
        self._root: str | None = None
        self._env: dict[str, str] = {}
        self._read_env: dict[str, str] = {}
        self._cat: CatFile | None = None
        self._tree: str | None = None
        self.nested_repositories: tuple[str, ...] = ()
        # directories git could not open while listing untracked files (it left them out)
        self.unopened: dict[str, str | None] = {}

    # --- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> ShadowTree:
        self._root = scratch_dir("promoter-shadow-", self._tmpdir)
        try:
            self._env = self._prepare(self._root)
            objects = os.path.join(self.layout.common_dir, "objects")
            self._read_env = {**self._env, "GIT_ALTERNATE_OBJECT_DIRECTORIES": _quote(objects)}
            self._tree = self._compute()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop any reader and delete the private directory."""
        if self._cat is not None:
            self._cat.close()
            self._cat = None
        if self._root is not None:
            remove_scratch_dir(self._root)
            self._root = None

    @property
    def tree(self) -> str:
        """The id of the worktree's tree."""
        if self._tree is None or self._root is None:
            raise RuntimeError("ShadowTree is not open; use it as a context manager")
        return self._tree

    # --- computing --------------------------------------------------------------------

    def _prepare(self, root: str) -> dict[str, str]:
        objects = os.path.join(self.layout.common_dir, "objects")
        if not os.path.isdir(objects):
            raise RepositoryInvalid(f"{objects} is not an object directory")
        git_dir = os.path.join(root, "git")
        for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
            os.makedirs(os.path.join(git_dir, sub), mode=0o700)
        _write(os.path.join(git_dir, "HEAD"), b"ref: refs/heads/main\n")
        _write(os.path.join(git_dir, "config"), _CONFIG.encode())
        _write(os.path.join(git_dir, "info/attributes"), _ATTRIBUTES.encode())
        _write(os.path.join(git_dir, "info/exclude"), self._user_excludes())
        return {
            "GIT_DIR": git_dir,
            "GIT_WORK_TREE": self.layout.worktree,
            "GIT_INDEX_FILE": os.path.join(root, "index"),
        }

    def _user_excludes(self) -> bytes:
        """The repository's ``info/exclude``, so it ignores what ``git status`` ignores."""
        path = os.path.join(self.layout.common_dir, "info", "exclude")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise RepositoryInvalid(f"{path} cannot be read: {exc.strerror or exc}") from exc
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise RepositoryInvalid(f"{path} is not a regular file")
            return handle.read()

    def _compute(self) -> str:
        seed = self.base_tree
        if seed is None:
            head = head_commit(self.layout)
            seed = None if head is None else commit_tree(self.layout, head)
            self.base_tree = seed
        if seed is not None:
            self._git(["read-tree", seed], read=True)
            # Hash (without writing) what is unchanged, so add writes only new content.
            self._git(["update-index", "-q", "--refresh"], read=True)
        # From here on git writes objects and must not see the repository's.
        try:
            self._git(["add", "-u"])
        except GitError:
            self._refuse_special()
            raise
        untracked = self._git(["ls-files", "-o", "-z", "--exclude-standard", "--full-name"])
        self.unopened = unopened_directories(untracked.stderr)
        files: list[str] = []
        nested: list[str] = []
        for raw in untracked.stdout.split(b"\0")[:-1]:
            if raw.endswith(b"/"):
                nested.append(decode_path(raw[:-1]))
            else:
                files.append(decode_path(raw))
        self.nested_repositories = tuple(nested)
        if files:
            listing = b"".join(os.fsencode(path) + b"\0" for path in files)
            self._git(
                ["add", "--pathspec-from-file=-", "--pathspec-file-nul"],
                input=listing,
                literal=True,
            )
        tree = self._git(["write-tree", "--missing-ok"]).stdout.decode("ascii", "replace").strip()
        return require_oid(tree, "written tree")

    def _refuse_special(self) -> None:
        """``PathUnsafe`` naming every tracked path a FIFO, socket or device now covers
        (the path itself or a directory above it), which ``git add`` cannot add: read
        only once git refused, so a healthy pass lists nothing more."""
        listed = self._git(["ls-files", "-z", "--full-name"], read=True).stdout
        found = special_over(
            self.layout.worktree, (decode_path(p) for p in listed.split(b"\0") if p)
        )
        if found:
            items = [{"path": wire_path(path), "reason": why} for path, why in found.items()]
            listing = "; ".join(f"{item['path']!r}: {item['reason']}" for item in items)
            raise PathUnsafe(
                f"the worktree has changes that cannot be promoted: {listing}", paths=items
            )

    def _git(
        self,
        args: list[str],
        *,
        input: bytes | None = None,
        literal: bool = False,
        read: bool = False,
    ) -> GitResult:
        """Run git in the private directory; ``read`` lets it see the repository's objects."""
        env = dict(self._read_env if read else self._env)
        if literal:
            env["GIT_LITERAL_PATHSPECS"] = "1"
        return run_git(
            [*NO_CONVERSION, *args],
            cwd=self.layout.worktree,
            env=env,
            input=input,
            timeout=self._timeout,
        )

    # --- results ----------------------------------------------------------------------

    def diff(self, base_tree: str | None = None) -> list[DiffEntry]:
        """Every created, modified, type-changed and deleted file from ``base_tree``.

        ``None`` means the seed tree (the empty tree when there was none). Renames are
        reported as a deletion and a creation.
        """
        base = base_tree or self.base_tree or EMPTY_TREE
        require_oid(base, "base tree")
        result = self._git(
            [
                "diff-tree",
                "-r",
                "-z",
                "--no-renames",
                "--no-abbrev",
                "--no-ext-diff",
                base,
                self.tree,
            ],
            read=True,
        )
        return parse_diff_raw(result.stdout)

    def unsupported(
        self, entries: Sequence[DiffEntry] | None = None, *, symlinks: bool = False
    ) -> dict[str, str]:
        """Changed paths that cannot be promoted, with the reason.

        Gitlinks (and symlinks unless ``symlinks``) on either side of a change, untracked
        nested repositories,
        and changed paths on or under a gitlink or a nested repository (see
        ``gitlinks_and_nested``).
        """
        from promoter.git.gitlinks import gitlinks_and_nested

        found, others = self._by_mode(entries, symlinks=symlinks)
        for path, reason in gitlinks_and_nested(self.layout, others).items():
            found.setdefault(path, reason)
        return dict(sorted(found.items()))

    def _by_mode(
        self, entries: Sequence[DiffEntry] | None, *, symlinks: bool
    ) -> tuple[dict[str, str], list[str]]:
        """The first half of ``unsupported``: the changed paths refused by their modes
        (gitlinks, symlinks unless ``symlinks``) or as untracked nested repositories, with
        the reason, and the other changed paths, still to check against gitlinks."""
        changes = self.diff() if entries is None else list(entries)
        found: dict[str, str] = {}
        for entry in changes:
            for side, mode in (("new", entry.new_mode), ("old", entry.old_mode)):
                if mode in UNSUPPORTED_MODES and not (symlinks and mode == "120000"):
                    found.setdefault(entry.path, f"the {side} state is {UNSUPPORTED_MODES[mode]}")
        for path in self.nested_repositories:
            found.setdefault(path, "an untracked nested repository (it holds a .git entry)")
        others = [entry.path for entry in changes if entry.path not in found]
        return found, others

    def _reader(self) -> CatFile:
        if self._cat is None:
            if self._root is None:
                raise RuntimeError("ShadowTree is not open; use it as a context manager")
            self._cat = CatFile(cwd=self.layout.worktree, env=self._read_env, timeout=self._timeout)
            self._cat.__enter__()
        return self._cat

    def read_blob(self, oid: str) -> bytes:
        """The whole content of blob ``oid`` (new or from the repository)."""
        return self._reader().read_blob(oid)

    def iter_blob(self, oid: str, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Blob ``oid`` in chunks; read it to the end before asking for another object."""
        return self._reader().blob_chunks(oid, chunk_size)

    def blob_sha256(self, oids: Iterable[str]) -> dict[str, tuple[str, int]]:
        """For each blob id, the sha256 of its exact bytes and its size (streamed)."""
        return self._reader().blob_sha256(oids)


def worktree_tree(
    layout: RepoLayout, *, base_tree: str | None = None, tmpdir: str | None = None
) -> str:
    """The id of the worktree's current tree (see ``ShadowTree``); nothing is kept."""
    with ShadowTree(layout, base_tree=base_tree, tmpdir=tmpdir) as shadow:
        return shadow.tree


def _quote(path: str) -> str:
    """A path as one entry of ``GIT_ALTERNATE_OBJECT_DIRECTORIES`` (C-quoted if needed)."""
    if not any(char in path for char in ':"\\\n\t'):
        return path
    escaped = path.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\t", "\\t") + '"'


def special_over(worktree: str, paths: Iterable[str]) -> dict[str, str]:
    """The paths among ``paths`` and the directories above them that are a FIFO, socket
    or device in ``worktree``, each with ``SPECIAL_OVER``: git cannot carry one, and
    sees the files it covers only gone. Each directory is looked at once."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            here = "/".join(parts[:depth])
            if here in seen:
                continue
            seen.add(here)
            try:
                mode = os.lstat(os.path.join(worktree, here)).st_mode
            except OSError:
                break  # gone, or not a directory: nothing of it is covered
            if stat.S_ISDIR(mode):
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                found[here] = SPECIAL_OVER
            break
    return dict(sorted(found.items()))


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
