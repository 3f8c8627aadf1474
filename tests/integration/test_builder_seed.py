"""The builder's stat-seeded scan gives the bundle the full re-read gives, racy cases included.

Each case edits a real clone, then builds twice from the same worktree: seeded from the
clone's own index (the default) and with ``seed=False`` (every file read, the seed
ignored). The two must agree exactly: the same sealed changes and blob bytes, or the
same refusal. The cases name the ways a stat cache can lie (a touch without a change, a
change that keeps size and mtime, an entry as new as its index, flags that tell git not
to look) and the index states an executor leaves behind (staged, committed, removed
from the index, split, version 4).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from promoter.domain.canonical import canonical_bytes
from promoter.domain.documents import sealed_grant
from promoter.domain.models import GrantV1
from promoter.errors import PromoterError
from promoter.executor import build_bundle, seed_index
from promoter.executor.seed_index import NotPlain, plain_index
from promoter.git import runner
from tests.gitutil import blob_oid, commit_all, git, tree_digest
from tests.support.flows import make_grant

IDENTITY = "repo_" + "5" * 32
STAMP = "2026-01-02T03:04:05Z"

BASE_FILES: dict[str, bytes] = {
    "README.md": b"# project\n",
    ".gitignore": b"*.log\nbuild/\n",
    "src/app.py": b"print('v1')\n",
    "src/util.py": b"def util():\n    return 1\n",
    "src/deep/er/mod.py": b"x = 1\n",
    "docs/guide.md": b"guide\n",
    "bin/tool": b"#!/bin/sh\necho tool\n",
}


def _source(path: Path, files: dict[str, bytes]) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    os.chmod(path / "bin/tool", 0o755)
    git(path, "add", "-A")
    git(path, "add", "-f", "--", *[rel for rel in files if rel.endswith(".log")])
    git(path, "commit", "-q", "-m", "base")
    return path


def _grant(source: Path, **overrides: Any) -> GrantV1:
    return sealed_grant(GrantV1.model_validate(make_grant(source, IDENTITY, **overrides)))


def _outcome(executor: Path, grant: GrantV1, *, seed: bool) -> tuple[Any, bool | None]:
    """(the sealed changes and every blob's bytes, or the refusal; whether it was seeded)."""
    try:
        with build_bundle(executor, grant, created_at=STAMP, seed=seed) as built:
            blobs = {digest: built.read_blob(digest) for digest in sorted(built.blobs)}
            return (built.bundle["changes"], blobs, built.bundle["bundle_sha256"]), built.seeded
    except PromoterError as exc:
        return (type(exc).__name__, exc.code, exc.detail), None


def _digest(executor: Path) -> dict[str, Any]:
    """``tree_digest``, but a split index's shared part without its mtime: git refreshes
    that whenever anything reads the index (``readback``'s gitlink look-up does, with or
    without the seed), so that its expiry never removes a shared part still in use."""
    found: dict[str, Any] = tree_digest(executor)
    for rel, (kind, mode, _, digest) in list(found.items()):
        if rel.startswith(".git/sharedindex."):
            found[rel] = (kind, mode, digest)
    return found


def _agree(executor: Path, grant: GrantV1) -> tuple[Any, bool | None]:
    before = _digest(executor)
    seeded, used_seed = _outcome(executor, grant, seed=True)
    full, used_full = _outcome(executor, grant, seed=False)
    assert seeded == full
    assert used_full in (False, None)
    assert _digest(executor) == before  # nothing written, not even a timestamp
    return seeded, used_seed


def _paths(outcome: Any) -> list[str]:
    return [c["path"] for c in outcome[0]]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return _source(tmp_path / "source", BASE_FILES)


@pytest.fixture
def executor(tmp_path: Path, source: Path) -> Path:
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    return tmp_path / "executor"


def _touch_everything(executor: Path) -> None:
    for rel in BASE_FILES:
        os.utime(executor / rel, ns=(1, 2_000_000_000_000_000_000))


def _rewrite_same_bytes(executor: Path) -> None:
    for rel, data in BASE_FILES.items():
        (executor / rel).write_bytes(data)


def _same_size_and_mtime(executor: Path) -> None:
    target = executor / "src/app.py"
    before = os.lstat(target)
    target.write_bytes(b"print('v2')\n")  # same size
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))


def _every_kind(executor: Path) -> None:
    (executor / "src/app.py").write_bytes(b"print('a longer v2')\n")
    (executor / "src/util.py").unlink()
    os.chmod(executor / "bin/tool", 0o644)
    os.chmod(executor / "docs/guide.md", 0o755)
    (executor / "new/dir").mkdir(parents=True)
    (executor / "new/dir/file.txt").write_bytes(b"new\n")
    (executor / "empty").write_bytes(b"")
    (executor / "debug.log").write_bytes(b"ignored\n")
    (executor / "build").mkdir()
    (executor / "build/out.o").write_bytes(b"ignored directory\n")


def _file_becomes_directory(executor: Path) -> None:
    (executor / "docs/guide.md").unlink()
    (executor / "docs/guide.md").mkdir()
    (executor / "docs/guide.md/inside.md").write_bytes(b"now a directory\n")


def _directory_deleted(executor: Path) -> None:
    for name in ("mod.py",):
        (executor / "src/deep/er" / name).unlink()
    (executor / "src/deep/er").rmdir()
    (executor / "src/deep").rmdir()


def _directory_becomes_link(executor: Path) -> None:
    (executor / "src/deep/er/mod.py").unlink()
    (executor / "src/deep/er").rmdir()
    os.symlink("../docs", executor / "src/deep/er")


def _file_becomes_link(executor: Path) -> None:
    (executor / "src/util.py").unlink()
    os.symlink("app.py", executor / "src/util.py")


def _staged_and_unstaged(executor: Path) -> None:
    (executor / "src/staged.py").write_bytes(b"staged\n")
    (executor / "src/app.py").write_bytes(b"staged edit\n")
    git(executor, "add", "src/staged.py", "src/app.py")
    (executor / "src/app.py").write_bytes(b"edited again after staging\n")


def _committed(executor: Path) -> None:
    (executor / "src/app.py").write_bytes(b"committed edit\n")
    (executor / "src/committed.py").write_bytes(b"committed new file\n")
    (executor / "docs/guide.md").unlink()
    commit_all(executor, "the executor's own commit")
    (executor / "docs/guide.md").write_bytes(b"guide\n")  # back, untracked now


def _committed_then_reverted(executor: Path) -> None:
    (executor / "src/app.py").write_bytes(b"committed edit\n")
    commit_all(executor, "an edit")
    (executor / "src/app.py").write_bytes(BASE_FILES["src/app.py"])


def _removed_from_the_index(executor: Path) -> None:
    git(executor, "rm", "-q", "--cached", "src/util.py")  # still a file: tracked in the base


def _ignored_file_force_added(executor: Path) -> None:
    (executor / "keep.log").write_bytes(b"force-added, ignored by pattern\n")
    git(executor, "add", "-f", "keep.log")


def _assume_unchanged(executor: Path) -> None:
    git(executor, "update-index", "--assume-unchanged", "src/app.py")
    (executor / "src/app.py").write_bytes(b"hidden by a flag\n")


def _skip_worktree(executor: Path) -> None:
    git(executor, "update-index", "--skip-worktree", "src/app.py")
    (executor / "src/app.py").write_bytes(b"hidden by a flag\n")


def _intent_to_add(executor: Path) -> None:
    (executor / "src/later.py").write_bytes(b"intent to add\n")
    git(executor, "add", "-N", "src/later.py")


def _untracked_attributes(executor: Path) -> None:
    (executor / ".gitattributes").write_bytes(b"*.py text eol=crlf\n")
    (executor / "src/app.py").write_bytes(b"print('v3')\r\n")


def _no_index(executor: Path) -> None:
    (executor / ".git/index").unlink()
    (executor / "src/app.py").write_bytes(b"no index at all\n")


def _split_index(executor: Path) -> None:
    git(executor, "update-index", "--split-index")
    (executor / "src/app.py").write_bytes(b"split index\n")


def _index_version_4(executor: Path) -> None:
    git(executor, "update-index", "--index-version", "4")
    (executor / "src/deep/er/mod.py").write_bytes(b"x = 2\n")


def _nested_repository(executor: Path) -> None:
    nested = executor / "src/nested"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "file.txt").write_bytes(b"in a nested repository\n")


def _tracked_file_inside_a_new_nested_repository(executor: Path) -> None:
    git(executor / "src/deep", "init", "-q")
    (executor / "src/deep/er/mod.py").write_bytes(b"x = 3\n")


def _gitlink_added_in_the_index(executor: Path) -> None:
    git(executor, "update-index", "--add", "--cacheinfo", f"160000,{'b' * 40},src/sub")
    (executor / "src/sub").mkdir()
    (executor / "src/sub/x.txt").write_bytes(b"under a gitlink only the index knows\n")
    (executor / "src/app.py").write_bytes(b"print('v2')\n")


CASES: list[tuple[Callable[[Path], None], list[str] | str, bool | None]] = [
    (_touch_everything, [], True),
    (_rewrite_same_bytes, [], True),
    (_same_size_and_mtime, ["src/app.py"], True),
    (
        _every_kind,
        ["bin/tool", "docs/guide.md", "empty", "new/dir/file.txt", "src/app.py", "src/util.py"],
        True,
    ),
    (_file_becomes_directory, "PathInvalid", None),  # a deleted file and a file under it
    (_directory_deleted, ["src/deep/er/mod.py"], True),
    (_directory_becomes_link, "PathUnsafe", None),  # refused: the grant allows no links
    (_file_becomes_link, "PathUnsafe", None),
    (_staged_and_unstaged, ["src/app.py", "src/staged.py"], True),
    (_committed, ["src/app.py", "src/committed.py"], True),
    (_committed_then_reverted, [], True),
    (_removed_from_the_index, [], True),
    (_ignored_file_force_added, [], True),
    (_assume_unchanged, ["src/app.py"], False),
    (_skip_worktree, ["src/app.py"], False),
    (_intent_to_add, ["src/later.py"], False),
    (_untracked_attributes, [".gitattributes", "src/app.py"], False),
    (_no_index, ["src/app.py"], False),
    (_split_index, ["src/app.py"], False),
    (_index_version_4, ["src/deep/er/mod.py"], True),
    (_nested_repository, "PathUnsafe", None),
    (_tracked_file_inside_a_new_nested_repository, "PathUnsafe", None),
    (_gitlink_added_in_the_index, "PathUnsafe", None),
]


@pytest.mark.parametrize(("edit", "paths", "seeded"), CASES, ids=[c[0].__name__[1:] for c in CASES])
def test_the_seeded_scan_gives_the_full_scan_bundle(
    source: Path,
    executor: Path,
    edit: Callable[[Path], None],
    paths: list[str] | str,
    seeded: bool | None,
) -> None:
    edit(executor)
    outcome, used_seed = _agree(executor, _grant(source))
    if isinstance(paths, str):
        assert outcome[0] == paths, outcome
    else:
        assert _paths(outcome) == paths
    assert used_seed is seeded


def _forge_clean_entry(executor: Path, path: str, claimed: bytes) -> None:
    """Make the index claim ``path`` holds ``claimed`` with the stat data of its new bytes."""
    git(executor, "update-index", "--index-version", "2")
    git(executor, "update-index", path)  # the stat data (and id) of the current bytes
    index = executor / ".git/index"
    data = bytearray(index.read_bytes())
    current = bytes.fromhex(blob_oid((executor / path).read_bytes()))
    assert data.count(current) == 1
    at = data.index(current)
    data[at : at + 20] = bytes.fromhex(blob_oid(claimed))
    data[-20:] = hashlib.sha1(bytes(data[:-20]), usedforsecurity=False).digest()
    index.write_bytes(bytes(data))


def test_an_entry_as_new_as_its_index_is_compared_by_content(source: Path, executor: Path) -> None:
    """Racy git: same size, same stat data, and an index no older than the file."""
    target = executor / "src/app.py"
    target.write_bytes(b"print('v9')\n")  # the base's size
    _forge_clean_entry(executor, "src/app.py", BASE_FILES["src/app.py"])
    mtime = os.lstat(target).st_mtime_ns
    os.utime(executor / ".git/index", ns=(mtime, mtime))  # racily clean

    outcome, used_seed = _agree(executor, _grant(source))

    assert used_seed is True
    assert _paths(outcome) == ["src/app.py"]
    assert outcome[1][hashlib.sha256(b"print('v9')\n").hexdigest()] == b"print('v9')\n"
    assert git(executor, "status", "--porcelain") == " M src/app.py"


def test_a_clean_stat_entry_is_trusted_exactly_as_git_status_trusts_it(
    source: Path, executor: Path
) -> None:
    """An index forged to claim new bytes are the base's leaves them out, as status does."""
    target = executor / "src/app.py"
    target.write_bytes(b"print('v9')\n")
    _forge_clean_entry(executor, "src/app.py", BASE_FILES["src/app.py"])
    later = os.lstat(target).st_mtime_ns + 10_000_000_000
    os.utime(executor / ".git/index", ns=(later, later))

    with build_bundle(executor, _grant(source), created_at=STAMP) as built:
        assert built.seeded and built.bundle["changes"] == []
    assert git(executor, "status", "--porcelain") == ""
    with build_bundle(executor, _grant(source), created_at=STAMP, seed=False) as built:
        assert [c["path"] for c in built.bundle["changes"]] == ["src/app.py"]


def test_bytes_converted_at_checkout_are_seen_raw_as_before(tmp_path: Path) -> None:
    """A checkout that converted line endings: the seed is not used; the raw bytes count."""
    files = {**BASE_FILES, ".gitattributes": b"*.md text eol=crlf\n", "tracked.log": b"log\n"}
    source = _source(tmp_path / "source", files)
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    executor = tmp_path / "executor"
    assert (executor / "README.md").read_bytes() == b"# project\r\n"
    (executor / "tracked.log").write_bytes(b"tracked in the base, ignored by pattern\n")

    outcome, used_seed = _agree(executor, _grant(source))

    assert used_seed is False
    assert _paths(outcome) == ["README.md", "docs/guide.md", "tracked.log"]


def test_a_tracked_ignored_file_and_a_gitlink_keep_their_meaning(tmp_path: Path) -> None:
    files = {**BASE_FILES, "tracked.log": b"log\n"}
    source = _source(tmp_path / "source", files)
    git(source, "update-index", "--add", "--cacheinfo", f"160000,{'a' * 40},vendor/lib")
    git(source, "commit", "-q", "-m", "a submodule")
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    executor = tmp_path / "executor"
    (executor / "tracked.log").write_bytes(b"tracked in the base, ignored by pattern\n")
    (executor / "src/app.py").write_bytes(b"print('v2')\n")

    outcome, used_seed = _agree(executor, _grant(source))
    assert used_seed is True
    assert _paths(outcome) == ["src/app.py", "tracked.log"]

    (executor / "vendor/lib/hidden.txt").write_bytes(b"git does not see this\n")
    refused, _ = _agree(executor, _grant(source))
    assert refused[0] == "PathUnsafe" and "vendor/lib" in refused[2]

    (executor / "vendor/lib/hidden.txt").unlink()
    (executor / "vendor/lib").rmdir()  # the gitlink deleted
    refused, _ = _agree(executor, _grant(source))
    assert refused[0] == "PathUnsafe" and "the old state is a gitlink" in refused[2]


def test_the_tree_id_is_the_one_the_full_scan_writes(source: Path, executor: Path) -> None:
    _every_kind(executor)
    with build_bundle(executor, _grant(source), seed=False) as full:
        expected = full.tree
    with build_bundle(executor, _grant(source)) as built:
        assert built.seeded
        assert built.tree == expected


def test_a_seeded_build_of_one_edit_starts_three_git_processes(
    source: Path, executor: Path
) -> None:
    """The layout; one reader of the base tree, HEAD and the base blob's bytes; one status
    pass."""
    (executor / "src/app.py").write_bytes(b"print('v2')\n")
    grant = _grant(source)
    with runner.counting() as started, build_bundle(executor, grant, created_at=STAMP) as built:
        assert built.seeded is True
        assert [c["path"] for c in built.bundle["changes"]] == ["src/app.py"]
    assert started == ["rev-parse", "cat-file", "status"]


def test_a_stale_untracked_cache_in_the_index_hides_no_new_file(
    source: Path, executor: Path
) -> None:
    """The person's git may trust the index's untracked cache; the status pass never does."""
    git(executor, "config", "core.untrackedCache", "true")
    git(executor, "config", "core.trustctime", "false")
    folder, old = executor / "src", (1, 1_000_000_000_000_000_000)
    os.utime(folder, ns=old)  # older than the index the next status writes
    git(executor, "status", "--porcelain")  # writes the cache into the index
    assert b"UNTR" in (executor / ".git/index").read_bytes()
    (folder / "hidden.py").write_bytes(b"new\n")
    os.utime(folder, ns=old)  # the stamp the cache holds for the folder
    assert git(executor, "status", "--porcelain") == ""  # hidden from the person's status

    outcome, used_seed = _agree(executor, _grant(source))

    assert used_seed is True
    assert _paths(outcome) == ["src/hidden.py"]


def test_many_touched_files_are_compared_by_git_before_any_is_read(tmp_path: Path) -> None:
    files = {**BASE_FILES, **{f"many/f{i:03d}.txt": b"file %d\n" % i for i in range(300)}}
    source = _source(tmp_path / "source", files)
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    executor = tmp_path / "executor"
    for rel in files:
        os.utime(executor / rel, ns=(1, 2_000_000_000_000_000_000))
    (executor / "many/f007.txt").write_bytes(b"file 7, edited\n")
    os.chmod(executor / "many/f008.txt", 0o755)

    outcome, used_seed = _agree(executor, _grant(source))

    assert used_seed is True
    assert _paths(outcome) == ["many/f007.txt", "many/f008.txt"]


def test_an_attributes_file_is_found_in_a_version_4_index_whose_names_are_compressed(
    tmp_path: Path,
) -> None:
    """v4 stores ``.gitattributes`` after ``.git-blame-ignore-revs`` as ``attributes``."""
    files = {**BASE_FILES, ".git-blame-ignore-revs": b"\n", ".gitattributes": b"*.py text\n"}
    source = _source(tmp_path / "source", files)
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    executor = tmp_path / "executor"
    git(executor, "update-index", "--index-version", "4")
    assert b".gitattributes" not in (executor / ".git/index").read_bytes()
    (executor / "src/app.py").write_bytes(b"print('v2')\n")

    outcome, used_seed = _agree(executor, _grant(source))

    assert used_seed is False
    assert _paths(outcome) == ["src/app.py"]


@pytest.mark.parametrize("version", ["2", "4"])  # git writes 3 only for extended flags
def test_the_index_reader_walks_every_version_long_names_and_gitlinks(
    tmp_path: Path, version: str
) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "a.txt").write_bytes(b"a\n")
    git(repo, "add", "-A")
    deep = "/".join(["d" * 200] * 21) + "/leaf.txt"  # longer than the 12-bit name field
    oid = git(repo, "hash-object", "-w", "a.txt")
    git(repo, "update-index", "--add", "--cacheinfo", f"100644,{oid},{deep}")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'c' * 40},sub/mod")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'d' * 40},zz")
    git(repo, "update-index", "--index-version", version)
    data = (repo / ".git/index").read_bytes()
    assert data[4:8] == int(version).to_bytes(4, "big")

    assert plain_index(data).gitlinks == ("sub/mod", "zz")

    git(repo, "update-index", "--assume-unchanged", "a.txt")
    with pytest.raises(NotPlain):
        plain_index((repo / ".git/index").read_bytes())
    git(repo, "update-index", "--no-assume-unchanged", "a.txt")
    git(repo, "update-index", "--skip-worktree", "a.txt")  # version 3 (or 4) now
    with pytest.raises(NotPlain):
        plain_index((repo / ".git/index").read_bytes())
    with pytest.raises(NotPlain):
        plain_index(data[: len(data) // 2])


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_attribute_files_are_found_by_their_whole_last_name_in_every_version(
    tmp_path: Path, version: str
) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    names = [".gitattributes", "a/.gitattributes", "a/x.gitattributes", "b/c/.gitattributes"]
    names += ["bgitattributes", "z.txt"]
    for name in names:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(b"* -diff\n")
    git(repo, "add", "-A")
    oid = git(repo, "hash-object", "-w", "z.txt")
    deep = "/".join(["n" * 200] * 21) + "/.gitattributes"  # a name past the 12-bit field
    git(repo, "update-index", "--add", "--cacheinfo", f"100644,{oid},{deep}")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'c' * 40},sub/mod")
    git(repo, "update-index", "--index-version", version)

    found = plain_index((repo / ".git/index").read_bytes())

    assert found.attributes == (".gitattributes", "a/.gitattributes", "b/c/.gitattributes", deep)
    assert found.gitlinks == ("sub/mod",)


def test_links_the_grant_allows_are_read_as_their_target_text(tmp_path: Path) -> None:
    source = _source(tmp_path / "source", BASE_FILES)
    os.symlink("app.py", source / "src/link")
    os.symlink("util.py", source / "src/kept")
    commit_all(source, "links")
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    executor = tmp_path / "executor"
    (executor / "src/link").unlink()
    os.symlink("util.py", executor / "src/link")  # retargeted, same length
    os.symlink("deep/er/mod.py", executor / "src/new-link")
    (executor / "src/util.py").unlink()
    os.symlink("app.py", executor / "src/util.py")  # a file became a link

    outcome, used_seed = _agree(executor, _grant(source, symlinks="inside"))

    assert used_seed is True
    assert _paths(outcome) == ["src/link", "src/new-link", "src/util.py"]
    assert b"deep/er/mod.py" in outcome[1].values()


@pytest.mark.parametrize(
    ("attributes", "seeded"),
    [
        (b"# binary assets\n*.png binary\n*.md linguist-documentation diff=markdown\n", True),
        (b"*.py -text !eol whitespace=trailing-space export-ignore\n", True),
        (b"* text=auto\n", False),
        (b"*.sh eol=lf\n", False),
        (b"*.dat filter=lfs\n", False),
        (b"[attr]mine text\n*.c mine\n", False),
        (b"*.c mine\n", False),  # a macro defined elsewhere
    ],
)
def test_attributes_that_never_change_bytes_keep_the_seed(
    tmp_path: Path, attributes: bytes, seeded: bool
) -> None:
    files = {**BASE_FILES, "src/.gitattributes": attributes, "img.png": b"\x89PNG\r\n"}
    source = _source(tmp_path / "source", files)
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    executor = tmp_path / "executor"
    (executor / "src/app.py").write_bytes(b"print('v2')\r\n")

    outcome, used_seed = _agree(executor, _grant(source))

    assert used_seed is seeded
    assert _paths(outcome) == ["src/app.py"]


def test_an_attributes_file_edited_after_checkout_drops_the_seed(tmp_path: Path) -> None:
    files = {**BASE_FILES, ".gitattributes": b"*.png binary\n"}
    source = _source(tmp_path / "source", files)
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    executor = tmp_path / "executor"
    (executor / ".gitattributes").write_bytes(b"*.png -text\n")  # harmless, yet edited

    outcome, used_seed = _agree(executor, _grant(source))

    assert used_seed is False
    assert _paths(outcome) == [".gitattributes"]


def test_files_above_the_in_memory_size_are_streamed_once(tmp_path: Path) -> None:
    big = bytes(range(256)) * (5 << 12)  # 5 MiB, read in chunks
    files = {**BASE_FILES, "data/same.bin": big, "data/edited.bin": big}
    source = _source(tmp_path / "source", files)
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    executor = tmp_path / "executor"
    os.utime(executor / "data/same.bin", ns=(1, 2_000_000_000_000_000_000))  # touched only
    (executor / "data/edited.bin").write_bytes(big[:-1] + b"!")
    (executor / "data/new.bin").write_bytes(big + b"more")

    outcome, used_seed = _agree(executor, _grant(source))

    assert used_seed is True
    assert _paths(outcome) == ["data/edited.bin", "data/new.bin"]
    assert outcome[1][hashlib.sha256(big + b"more").hexdigest()] == big + b"more"


# The bundle the seeded scan sealed for ``_every_kind`` (plus a harmless attributes file
# and a long name) before the build was made cheaper (how it copies and walks the index,
# how many git processes read the repository's objects): no such change may move a byte.
PINNED_BUNDLE_SHA256 = "2d2187df2de27c76cedb86868c131158068d0d1f1e043eafb41556b823efdc37"


def test_a_cheaper_build_seals_the_bytes_the_build_sealed_before(tmp_path: Path) -> None:
    long_name = "long/" + "/".join(["n" * 200] * 3) + ".txt"
    files = {**BASE_FILES, "src/.gitattributes": b"*.png binary\n", long_name: b"long\n"}
    source = _source(tmp_path / "source", files)
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    executor = tmp_path / "executor"
    _every_kind(executor)
    (executor / long_name).write_bytes(b"longer\n")
    fixed = {"not_before": "2026-01-01T00:00:00Z", "expires_at": "2099-01-01T00:00:00Z"}
    grant = _grant(source, **fixed)

    with build_bundle(executor, grant, created_at=STAMP) as built:
        assert built.seeded is True
        sealed = canonical_bytes(built.bundle)
    outcome, _ = _agree(executor, grant)

    assert hashlib.sha256(sealed).hexdigest() == PINNED_BUNDLE_SHA256
    assert outcome[0] == json.loads(sealed)["changes"]


def test_an_index_the_kernel_cannot_send_is_copied_by_reads_to_the_same_bundle(
    source: Path, executor: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system without ``sendfile``: the copy is read and written, byte for byte."""
    _every_kind(executor)
    grant = _grant(source)
    expected, _ = _outcome(executor, grant, seed=True)

    def refused(*args: object) -> int:
        raise OSError(errno.EINVAL, "sendfile refused")

    monkeypatch.setattr(seed_index.os, "sendfile", refused)
    outcome, used_seed = _agree(executor, grant)

    assert used_seed is True
    assert outcome == expected


def _git_reading(repo: Path, index: Path | None, *args: str) -> bytes:
    """``git args`` in ``repo`` with ``index`` as its index file, never writing it."""
    import subprocess

    from tests.gitutil import git_env

    env = git_env() | {"GIT_OPTIONAL_LOCKS": "0"}
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, check=True, timeout=60
    )
    return done.stdout


def _walked(index: Path, copy: Path) -> tuple[str, Any]:
    """The walk of ``index`` as a seeded pass keeps it: (its key, marks and identity)."""
    from promoter.domain.record_type import replace
    from promoter.executor.seed_index import copy_index
    from promoter.executor.seeded import index_key

    data, identity = copy_index(str(index), str(copy))
    key = index_key(data)
    assert key is not None
    return key, replace(plain_index(data), source=identity)


@pytest.mark.parametrize("version", ["2", "3"])
def test_the_candidates_index_holds_what_the_whole_index_holds_at_those_paths(
    tmp_path: Path, version: str
) -> None:
    from promoter.executor.seed_index import MARK_EVERY, candidates_index

    files = {f"d{d}/f{f:03d}.txt": b"%d %d\n" % (d, f) for d in range(3) for f in range(150)}
    files |= {"d1-x.txt": b"beside d1\n", "d1.txt": b"beside d1 too\n", "top.txt": b"top\n"}
    repo = _source(tmp_path / "repo", files | {"bin/tool": b"tool\n"})
    git(repo, "update-index", "--index-version", version)
    if version == "3":  # an extended entry that is still plain
        (repo / "d2/f149.txt").write_bytes(b"now staged\n")
        git(repo, "add", "d2/f149.txt")
    index = repo / ".git" / "index"
    key, walked = _walked(index, tmp_path / "copy")
    assert len(walked.marks) == -(-int(git(repo, "ls-files").count("\n") + 1) // MARK_EVERY)
    asked = [
        [b"d1/f075.txt"],  # one entry, in a middle block
        [b"d0/f000.txt", b"top.txt", b"missing/new.txt"],  # the first entry, the last
        [b"d1"],  # a directory: everything below it, not d1-x.txt nor d1.txt
        [b"d2/f149.txt", b"d0/nope.txt", b"zzz"],
    ]
    for paths in asked:
        data, mtime = candidates_index(str(index), walked, key, paths)
        small = tmp_path / "small"
        small.write_bytes(data)
        os.utime(small, ns=(mtime, mtime))
        spec = ["--", *(os.fsdecode(p) for p in paths)]
        for args in (
            ["ls-files", "-s", "--debug", *spec],
            ["status", "--porcelain=v2", "-z", "--untracked-files=all", *spec],
        ):
            assert _git_reading(repo, small, *args) == _git_reading(repo, None, *args)
        assert os.stat(small).st_mtime_ns == index.stat().st_mtime_ns


def test_marks_of_another_version_of_the_index_file_are_never_used(tmp_path: Path) -> None:
    from promoter.domain.record_type import replace
    from promoter.executor.seed_index import candidates_index

    repo = _source(tmp_path / "repo", BASE_FILES)
    index = repo / ".git" / "index"
    key, walked = _walked(index, tmp_path / "copy")
    candidates_index(str(index), walked, key, [b"src/app.py"])  # the very file: read
    data = index.read_bytes()
    stamp = index.stat().st_mtime_ns
    with open(index, "r+b") as same_inode:  # the same bytes written in place, mtime kept
        same_inode.write(data)
    os.utime(index, ns=(stamp, stamp))
    with pytest.raises(NotPlain):
        candidates_index(str(index), walked, key, [b"src/app.py"])
    key, walked = _walked(index, tmp_path / "copy2")
    for damaged in (
        replace(walked, marks=tuple(m + 8 for m in walked.marks)),
        replace(walked, marks=()),
    ):
        with pytest.raises(NotPlain):
            candidates_index(str(index), damaged, key, [b"src/app.py"])
    with pytest.raises(NotPlain):
        candidates_index(str(index), walked, key.replace(key[-4:], "0000"), [b"src/app.py"])


def test_an_index_whose_names_do_not_ascend_or_whose_marks_skip_is_not_plain(
    tmp_path: Path,
) -> None:
    """A mark's block is read once and bisected: names out of git's order, or marks one
    entry off from where the steps end, are ``NotPlain`` (the whole index is copied)."""
    from promoter.domain.record_type import replace
    from promoter.executor.seed_index import MARK_EVERY, candidates_index

    files = {f"d/f{f:03d}.txt": b"%d\n" % f for f in range(2 * MARK_EVERY)}
    repo = _source(tmp_path / "repo", files | {"bin/tool": b"tool\n"})
    git(repo, "update-index", "--index-version", "2")
    index = repo / ".git" / "index"
    key, walked = _walked(index, tmp_path / "copy")
    candidates_index(str(index), walked, key, [b"d/f100.txt"])  # as written: plain
    assert len(walked.marks) == 3
    second = walked.marks[1] + 80  # the next entry (62 bytes, 10 of name, padded): not the mark
    off_by_one = replace(walked, marks=(walked.marks[0], second, walked.marks[2]))
    with pytest.raises(NotPlain):
        candidates_index(str(index), off_by_one, key, [b"d/f100.txt"])
    body = index.read_bytes()[:-20]
    swapped = body.replace(b"d/f010.txt", b"d/f0XX.txt").replace(b"d/f011.txt", b"d/f010.txt")
    swapped = swapped.replace(b"d/f0XX.txt", b"d/f011.txt")  # two names, out of order
    index.write_bytes(swapped + hashlib.sha1(swapped, usedforsecurity=False).digest())
    key, walked = _walked(index, tmp_path / "copy2")
    with pytest.raises(NotPlain):
        candidates_index(str(index), walked, key, [b"d/f012.txt"])
