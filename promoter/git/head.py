"""HEAD and commits of a git repository, read only.

Symbolic HEAD, HEAD's commit and its tree, whether an id names a commit, and a commit's
tree. Every git command here only reads (plumbing, ``GIT_OPTIONAL_LOCKS=0`` through
``repo_env``, the repository pinned once discovered).

``read_head`` reads symbolic HEAD, HEAD's commit and its tree without a process where
the files answer as git would: ``HEAD`` in the worktree's git directory in its plain
form (``ref: refs/heads/<name>`` or a detached commit id), the branch's loose ref in
the common directory or else its line in ``packed-refs``, and the commit's tree as git
gave it before (an object's content never changes for its id, and git here reads no
replace refs). Anything else is asked of git: a file that is a symlink, not a regular
file, oversize or in any other form, a ref that is symbolic or missing (unborn), a
branch name out of the plain form, reftable, a commit git has not answered for yet.
Then one ``git for-each-ref`` of the branch HEAD is expected on (the caller's, else the
one HEAD's file names; ``%(HEAD)`` marks the ref HEAD resolves to, and the ref's object
type and tree come with it) answers; any other case (detached, unborn, another branch,
not a commit) is answered by ``symbolic_head``, ``head_commit`` and ``commit_tree``
exactly as before. ``commit_tree_at_head`` answers a commit's tree the same way when
HEAD's files name that commit (a grant on HEAD's commit), else asks ``commit_tree``.

Deliberately not here: the index, trees below the root and blobs (``readback.py``),
deciding what HEAD means for a promotion (the engine compares).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import threading

from promoter.domain.record_type import record
from promoter.errors import GitError
from promoter.git.layout import RepoLayout, repo_env
from promoter.git.records import require_oid
from promoter.git.runner import GitResult, run_git, stderr_tail

__all__ = [
    "HeadState",
    "commit_exists",
    "commit_tree",
    "commit_tree_at_head",
    "head_commit",
    "head_from_files",
    "head_from_git",
    "head_on_branch",
    "read_head",
    "symbolic_head",
]


def _git(layout: RepoLayout, args: list[str], *, check: bool = True) -> GitResult:
    return run_git(args, cwd=layout.worktree, env=repo_env(layout), check=check)


def symbolic_head(layout: RepoLayout) -> str | None:
    """The ref HEAD points at (``refs/heads/main``), or ``None`` when HEAD is detached."""
    result = _git(layout, ["symbolic-ref", "-q", "HEAD"], check=False)
    if result.returncode == 1:
        return None
    if result.returncode != 0:
        raise GitError("git symbolic-ref HEAD failed", stderr=stderr_tail(result.stderr))
    return result.stdout.decode("utf-8", "surrogateescape").rstrip("\n")


def head_commit(layout: RepoLayout) -> str | None:
    """HEAD's commit id, or ``None`` on an unborn branch; ``GitError`` if HEAD is no commit."""
    result = _git(layout, ["rev-parse", "-q", "--verify", "HEAD"], check=False)
    if result.returncode != 0:
        return None
    oid = result.stdout.decode("ascii", "replace").strip()
    require_oid(oid, "HEAD")
    if not commit_exists(layout, oid):
        raise GitError(f"HEAD points at {oid}, which is not a commit in the repository")
    return oid


@record(frozen=True)
class HeadState:
    """Symbolic HEAD (``None``: detached), HEAD's commit (``None``: unborn) and its tree."""

    branch: str | None
    commit: str | None
    tree: str | None


def read_head(layout: RepoLayout, expected_branch: str | None = None) -> HeadState:
    """``symbolic_head``, ``head_commit`` and ``commit_tree`` of HEAD, read together.

    From the files where they answer as git would (``head_from_files``), else as git
    answers (``head_from_git``, expecting ``expected_branch``, or when it is ``None`` the
    branch HEAD's file names): the answers are always those of the three functions.
    """
    read = head_from_files(layout)
    if read is not None:
        return read
    return head_from_git(layout, expected_branch or _named_branch(layout))


def head_from_git(layout: RepoLayout, expected_branch: str | None = None) -> HeadState:
    """``read_head`` as git answers it: one ``git for-each-ref`` when HEAD is
    ``expected_branch`` at a commit, else ``symbolic_head``, ``head_commit`` and
    ``commit_tree`` one by one."""
    if expected_branch is not None:
        fast = head_on_branch(layout, expected_branch)
        if fast is not None:
            return fast
    branch = symbolic_head(layout)
    commit = head_commit(layout)
    tree = commit_tree(layout, commit) if commit else None
    return HeadState(branch, commit, tree)


# --- HEAD from the files ------------------------------------------------------------------

_REF_LIMIT = 4096  # bytes of a HEAD or loose ref file read here; a larger one: git answers
_PACKED_LIMIT = 1 << 20  # bytes of packed-refs read here; a larger one: git answers
_HEX40 = re.compile(rb"[0-9a-f]{40}")
# a branch in the plain form: components of letters, digits, ``_``, ``-`` and inner dots
_BRANCH = re.compile(
    rb"refs/heads/(?:[A-Za-z0-9_-](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?/)*"
    rb"[A-Za-z0-9_-](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?"
)
_TREES_LIMIT = 4096
# (common dir, commit) -> the commit's tree, as git answered it
_TREES: dict[tuple[str, str], str] = {}
_TREES_LOCK = threading.Lock()


class _AskGit(Exception):
    """A file in a form this module does not read: git answers instead."""


def _remember(layout: RepoLayout, commit: str | None, tree: str | None) -> None:
    """Note git's answer that ``commit`` is a commit whose tree is ``tree``."""
    if commit is None or tree is None:
        return
    with _TREES_LOCK:
        if len(_TREES) >= _TREES_LIMIT:
            _TREES.clear()
        _TREES[(layout.common_dir, commit)] = tree


def _tree_of(layout: RepoLayout, commit: str) -> str:
    with _TREES_LOCK:
        tree = _TREES.get((layout.common_dir, commit))
    if tree is None:
        raise _AskGit(commit)
    return tree


def _small_file(path: str, limit: int) -> bytes | None:
    """The bytes of the regular file at ``path`` (``None``: there is none), not followed
    if it is a symlink; ``_AskGit`` for anything else or more than ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise _AskGit(path) from exc
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_size > limit:
            raise _AskGit(path)
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, limit + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise _AskGit(path)
        return b"".join(chunks)
    except OSError as exc:
        raise _AskGit(path) from exc
    finally:
        os.close(fd)


def _packed_ref(common_dir: str, name: bytes) -> str | None:
    """``name``'s commit id in ``packed-refs`` (``None``: not there); ``_AskGit`` for a file
    in any form but git's: an optional ``# pack-refs with:`` header, then ``<id> <ref>``
    lines, each optionally followed by one ``^<peeled id>`` line."""
    data = _small_file(os.path.join(common_dir, "packed-refs"), _PACKED_LIMIT)
    if not data:
        return None
    if not data.endswith(b"\n"):
        raise _AskGit("packed-refs")
    lines = data[:-1].split(b"\n")
    if lines[0].startswith(b"# pack-refs with:"):
        lines = lines[1:]
    found: str | None = None
    peelable = False
    for line in lines:
        if line.startswith(b"^"):
            if not peelable or len(line) != 41 or not _HEX40.fullmatch(line, 1):
                raise _AskGit("packed-refs")
            peelable = False
            continue
        oid, space, ref = line[:40], line[40:41], line[41:]
        if space != b" " or not _HEX40.fullmatch(oid) or not ref or b" " in ref:
            raise _AskGit("packed-refs")
        if ref == name:
            if found is not None:
                raise _AskGit("packed-refs")
            found = oid.decode("ascii")
        peelable = True
    return found


def _branch_commit(layout: RepoLayout, name: bytes) -> str:
    """The commit id branch ``name`` points at: its loose ref, else its packed line."""
    loose = _small_file(os.path.join(layout.common_dir, os.fsdecode(name)), _REF_LIMIT)
    if loose is None:
        packed = _packed_ref(layout.common_dir, name)
        if packed is None:  # unborn, or a ref in a store not read here
            raise _AskGit(os.fsdecode(name))
        return packed
    if len(loose) != 41 or not loose.endswith(b"\n") or not _HEX40.fullmatch(loose, 0, 40):
        raise _AskGit(os.fsdecode(name))  # symbolic, or in another form
    return loose[:40].decode("ascii")


def _named_branch(layout: RepoLayout) -> str | None:
    """The branch HEAD's file names in the plain form (``None``: any other form); only a
    guess for git to confirm, never an answer itself."""
    try:
        head = _small_file(os.path.join(layout.git_dir, "HEAD"), _REF_LIMIT)
    except _AskGit:
        return None
    if head is None or not head.startswith(b"ref: ") or not head.endswith(b"\n"):
        return None
    name = head[5:-1]
    return name.decode("ascii") if _BRANCH.fullmatch(name) else None


def head_from_files(layout: RepoLayout) -> HeadState | None:
    """Symbolic HEAD, HEAD's commit and its tree read from the files, or ``None`` when
    git must answer (the module's docstring names the cases)."""
    try:
        if os.path.lexists(os.path.join(layout.common_dir, "reftable")):
            return None
        head = _small_file(os.path.join(layout.git_dir, "HEAD"), _REF_LIMIT)
        if head is None or not head.endswith(b"\n"):
            return None
        if head.startswith(b"ref: "):
            name = head[5:-1]
            if not _BRANCH.fullmatch(name) or b".." in name or name.endswith(b".lock"):
                return None
            if any(part.endswith(b".lock") for part in name.split(b"/")):
                return None
            commit = _branch_commit(layout, name)
            return HeadState(name.decode("ascii"), commit, _tree_of(layout, commit))
        if len(head) == 41 and _HEX40.fullmatch(head, 0, 40):
            commit = head[:40].decode("ascii")
            return HeadState(None, commit, _tree_of(layout, commit))
        return None
    except _AskGit:
        return None


def head_on_branch(layout: RepoLayout, branch: str) -> HeadState | None:
    """HEAD, its commit and tree when HEAD is ``branch`` at a commit, by one ``git
    for-each-ref``; ``None`` for any other case (detached, unborn, another branch, not a
    commit), which the caller asks git in its own way."""
    if not branch.startswith("refs/"):
        return None
    found = _head_from_ref(layout, branch)
    if found is not None:
        _remember(layout, found.commit, found.tree)
    return found


def _head_from_ref(layout: RepoLayout, branch: str) -> HeadState | None:
    fields = "%(HEAD)%00%(refname)%00%(objecttype)%00%(objectname)%00%(tree)"
    result = _git(layout, ["for-each-ref", f"--format={fields}", "--", branch], check=False)
    if result.returncode != 0:
        return None
    for line in result.stdout.split(b"\n"):
        parts = line.split(b"\0")
        if len(parts) != 5 or os.fsdecode(parts[1]) != branch:
            continue
        marker, _, kind, commit, tree = (part.decode("ascii", "replace") for part in parts)
        if marker != "*" or kind != "commit":
            return None
        return HeadState(branch, require_oid(commit, "HEAD"), require_oid(tree, "tree"))
    return None


def _peel(layout: RepoLayout, oid: str, kind: str) -> str | None:
    result = _git(layout, ["rev-parse", "-q", "--verify", f"{oid}^{{{kind}}}"], check=False)
    if result.returncode != 0:
        return None
    return result.stdout.decode("ascii", "replace").strip()


def commit_exists(layout: RepoLayout, oid: str) -> bool:
    """Whether ``oid`` names a commit object in the repository (a tag to one does not)."""
    require_oid(oid, "commit")
    return _peel(layout, oid, "commit") == oid


def commit_tree_at_head(layout: RepoLayout, commit: str) -> str | None:
    """The tree of ``commit`` as ``commit_tree`` answers it, without a process when HEAD's
    files name that commit (``head_from_files``: HEAD, or the branch it names, is
    ``commit`` and git told its tree before; a commit a ref names is in the repository);
    otherwise git answers (``commit_tree``)."""
    found = head_from_files(layout)
    if found is not None and found.commit == commit and found.tree is not None:
        return found.tree
    return commit_tree(layout, commit)


def commit_tree(layout: RepoLayout, commit: str) -> str | None:
    """The tree of commit ``commit``, or ``None`` if there is no such commit.

    One ``git cat-file --batch-check`` peels ``commit`` to a commit and to a tree.
    """
    require_oid(commit, "commit")
    request = f"{commit}^{{commit}}\n{commit}^{{tree}}\n".encode("ascii")
    result = run_git(
        ["cat-file", "--batch-check=%(objectname) %(objecttype)"],
        cwd=layout.worktree,
        env=repo_env(layout),
        input=request,
    )
    lines = result.stdout.decode("ascii", "replace").split("\n")
    if len(lines) != 3 or lines[2]:
        raise GitError("unexpected output from git cat-file --batch-check", commit=commit)
    if lines[0] != f"{commit} commit":
        return None
    oid, _, kind = lines[1].partition(" ")
    if kind != "tree":
        raise GitError(f"commit {commit} has no readable tree", commit=commit)
    tree = require_oid(oid, "tree")
    _remember(layout, commit, tree)
    return tree
