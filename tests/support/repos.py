"""Test repositories of the shapes the suite uses, made with real git (``tests.gitutil``).

``init_repo`` commits files at a path; ``Repos`` makes repositories below one test's
directory: committed with files (the common shape), empty, and linked worktrees. Nothing
here writes outside the directory it is given, and nothing starts a daemon
(``tests.support.daemon`` and ``tests.support.process`` do).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.gitutil import commit_all, git, make_repo
from tests.support.snapshot_repo import snapshot_worktree

DEFAULT_FILES = {"README.md": b"# project\n", "src/app.py": b"print('v1')\n"}


def write_files(
    root: Path,
    files: Mapping[str, bytes],
    *,
    executable: Iterable[str] = (),
    links: Mapping[str, str] | None = None,
) -> None:
    """``files`` written below ``root`` (parents made), ``executable`` ones mode 0755,
    and ``links`` as symbolic links (path: target)."""
    for rel, data in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for rel in executable:
        (root / rel).chmod(0o755)
    for rel, where in (links or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).symlink_to(where)


def init_repo(
    path: Path,
    files: Mapping[str, bytes] | None = None,
    *,
    message: str = "initial",
    executable: Iterable[str] = (),
    links: Mapping[str, str] | None = None,
) -> Path:
    """A repository at ``path`` on ``main`` with one commit of ``files`` (by default a
    README and ``src/app.py``)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    write_files(path, DEFAULT_FILES if files is None else files, executable=executable, links=links)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", message)
    return path


def merge_conflict(repo: Path) -> None:
    """``c.txt`` left in stages 1 to 3 of ``repo``'s index (``base``, ``ours`` on ``main``,
    ``theirs`` from branch ``other``) by a merge that stopped on it."""
    (repo / "c.txt").write_bytes(b"base\n")
    commit_all(repo, "add c")
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "c.txt").write_bytes(b"theirs\n")
    commit_all(repo, "theirs")
    git(repo, "checkout", "-q", "main")
    (repo / "c.txt").write_bytes(b"ours\n")
    commit_all(repo, "ours")
    git(repo, "merge", "-q", "other", check=False)


def clone(source: Path, dest: Path) -> Path:
    """``source`` cloned at ``dest`` (``git clone -q``), as an executor or a person would."""
    git(dest.parent, "clone", "-q", str(source), str(dest))
    return dest


class Repos:
    """Repositories below one directory (a test's ``tmp_path``), each under its own name."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(
        self,
        name: str = "work",
        files: Mapping[str, bytes] | None = None,
        *,
        message: str = "initial",
        executable: Iterable[str] = (),
        links: Mapping[str, str] | None = None,
    ) -> Path:
        """``name`` with one commit of ``files`` (see ``init_repo``)."""
        return init_repo(
            self.root / name, files, message=message, executable=executable, links=links
        )

    def empty(self, name: str = "repo", *, bare: bool = False) -> Path:
        """``name`` initialized on ``main`` with no commit."""
        return make_repo(self.root, name, bare=bare)

    def based(
        self,
        files: Mapping[str, bytes],
        name: str = "repo",
        *,
        executable: Iterable[str] = (),
        links: Mapping[str, str] | None = None,
    ) -> Path:
        """``files`` committed as ``base`` in a new ``name`` (``make_repo`` and ``commit_all``)."""
        path = make_repo(self.root, name)
        write_files(path, files, executable=executable, links=links)
        commit_all(path, "base")
        return path

    def snapshot(self, name: str = "work", extra: Mapping[str, bytes] | None = None) -> Path:
        """The snapshot tests' worktree (``tests.support.snapshot_repo``) at ``name``."""
        return snapshot_worktree(self.root / name, dict(extra or {}))

    def linked(self, main: Path, name: str = "linked", branch: str = "side") -> Path:
        """A worktree of ``main`` at ``name`` on a new ``branch`` (``git worktree add``)."""
        path = self.root / name
        git(main, "worktree", "add", "-q", "-b", branch, str(path))
        return path
