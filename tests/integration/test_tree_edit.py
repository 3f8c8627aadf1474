"""``tree_edit.edited_tree`` gives git's own tree for every kind of edit (real git)."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from promoter.executor.loose_objects import LooseObjects
from promoter.executor.tree_edit import edited_tree
from promoter.git.objects import CatFile
from tests.support.flows import init_repo

FILES = {
    "a.txt": b"a\n",
    "dir/b.txt": b"b\n",
    "dir/sub/c.txt": b"c\n",
    "dir/sub/d.txt": b"d\n",
    "only/e.txt": b"e\n",
    "f": b"a file to turn into a directory\n",
    "g/h.txt": b"a directory to turn into a file\n",
    "z-": b"sorts after z/ as a file, before it as a directory\n",
    "z/i.txt": b"i\n",
}


def _git(repo: Path, *argv: str, data: bytes | None = None, **env: str) -> str:
    done = subprocess.run(
        ["git", *argv], cwd=repo, input=data, env={**os.environ, **env}, check=True,
        capture_output=True,
    )  # fmt: skip
    return done.stdout.decode().strip()


def _blob(repo: Path, data: bytes) -> str:
    return _git(repo, "hash-object", "-w", "--stdin", data=data)


def _expected(repo: Path, tmp: Path, edits: list[tuple[bytes, str | None, str | None]]) -> str:
    index = str(tmp / "index")
    _git(repo, "read-tree", "HEAD", GIT_INDEX_FILE=index)
    lines = b"".join(
        b"%s %s\t%s\0" % ((mode or "0").encode(), (oid or "0" * 40).encode(), path)
        for path, mode, oid in edits
    )
    _git(repo, "update-index", "-z", "--index-info", data=lines, GIT_INDEX_FILE=index)
    return _git(repo, "write-tree", GIT_INDEX_FILE=index)


@pytest.mark.parametrize("seed", range(6))
def test_an_edited_tree_is_the_tree_git_writes_for_the_same_edits(
    tmp_path: Path, seed: int
) -> None:
    repo = init_repo(tmp_path / "repo", FILES)
    new = _blob(repo, b"new\n")
    choices: list[list[tuple[bytes, str | None, str | None]]] = [
        [(b"a.txt", "100755", new)],  # exec bit and content
        [(b"dir/sub/c.txt", None, None), (b"dir/sub/d.txt", None, None)],  # emptied dir
        [(b"only/e.txt", None, None)],  # the only file of a top directory
        [(b"f", None, None), (b"f/inner.txt", "100644", new)],  # file -> directory
        [(b"g/h.txt", None, None), (b"g", "100644", new)],  # directory -> file
        [(b"new/deep/x.txt", "100644", new)],  # new directories
        [(b"link", "120000", _blob(repo, b"a.txt"))],
        [(b"z-", None, None), (b"z/j.txt", "100644", new)],  # git's sort order
    ]
    rng = random.Random(seed)
    edits = [edit for group in rng.sample(choices, rng.randint(1, len(choices))) for edit in group]
    git_dir = repo / ".git"
    objects = LooseObjects(str(git_dir / "objects"))
    base = _git(repo, "rev-parse", "HEAD^{tree}")
    with CatFile(cwd=repo, env={"GIT_DIR": str(git_dir)}) as cat:
        made = edited_tree(cat, objects.store_object, base, edits)
    assert made == _expected(repo, tmp_path, edits)
    assert _git(repo, "cat-file", "-t", made) == "tree"


def test_deleting_everything_gives_the_empty_tree(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"a": b"a\n"})
    objects = LooseObjects(str(repo / ".git" / "objects"))
    base = _git(repo, "rev-parse", "HEAD^{tree}")
    with CatFile(cwd=repo, env={"GIT_DIR": str(repo / ".git")}) as cat:
        made = edited_tree(cat, objects.store_object, base, [(b"a", None, None)])
    assert made == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
