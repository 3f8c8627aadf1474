"""Read-back that scales with the paths asked about, not with the repository.

Each test compares the batched look-ups of ``promoter.git.readback`` with the answers
the one-fact-per-command functions give on the same real repository, and pins how many
git processes the batched ones start (``promoter.git.runner.counting``). That a
directory's contents are never listed is checked on git's own output for the exact
pathspecs.
"""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.errors import GitError
from promoter.git import index_memo, readback, runner, tree_reader
from promoter.git.gitlinks import gitlinks_and_nested
from promoter.git.head import HeadState, commit_tree, head_commit, read_head, symbolic_head
from promoter.git.layout import repo_env
from promoter.git.objects import CatFile
from promoter.git.readback import (
    discover,
    exact_pathspec,
    index_entries,
    path_entries,
    prefixes_of,
    tree_entries,
)
from promoter.git.records import parse_ls_files_stage
from tests.gitutil import commit_all, git, git_bytes, make_repo
from tests.support.repos import merge_conflict

ODD = ["a*", "ab", ":x", "[x]", "x", "back\\slash", "q?", "sp ace", "new\nline", "-n", "café"]


FILES = {
    **{rel: rel.encode() + b"\n" for rel in ["src/app.py", "flat/keep.txt", "run.sh"]},
    **{rel: rel.encode() + b"\n" for rel in [*(f"odd/{n}" for n in ODD), *ODD]},
    **{f"flat/f{i:04d}.txt": b"%d\n" % i for i in range(300)},
}
pytestmark = pytest.mark.repo(FILES, shape="based")


@pytest.fixture(autouse=True)
def _guarded(repo: Path) -> Iterator[None]:
    """``repo`` served as a daemon guarding it serves it (``tree_reader.serve``): its
    trees are read through a long-lived cat-file, stopped after the test."""
    tree_reader.serve(discover(repo))
    yield
    tree_reader.close_all()


def _ls_files(repo: Path, paths: list[str]) -> list[str]:
    layout = discover(repo)
    out = runner.run_git(
        ["ls-files", "-s", "-z", "--", *(exact_pathspec(p) for p in paths)],
        cwd=layout.worktree,
        env=repo_env(layout),
    ).stdout
    return [path for path, _ in parse_ls_files_stage(out, debug=False)]


def test_an_exact_pathspec_matches_the_path_and_nothing_below_it(repo: Path) -> None:
    assert _ls_files(repo, ["flat"]) == []
    assert _ls_files(repo, ["flat", "flat/f0007.txt"]) == ["flat/f0007.txt"]
    assert _ls_files(repo, ["odd"]) == []
    assert sorted(_ls_files(repo, ODD)) == sorted(ODD)
    for name in ODD:
        assert _ls_files(repo, [name]) == [name]
        assert _ls_files(repo, [f"odd/{name}"]) == [f"odd/{name}"]
    assert _ls_files(repo, ["*", "?", "a?", "[a]b", "odd/*"]) == []


def test_index_entries_of_leading_directories_list_nothing_below(repo: Path) -> None:
    layout = discover(repo)
    with runner.counting() as started:
        entries = index_entries(layout, ["flat", "flat/f0001.txt", "src", "src/app.py"])
    assert started == ["ls-files"]
    assert entries["flat"] == [] and entries["src"] == []
    assert len(entries["flat/f0001.txt"]) == 1 and len(entries["src/app.py"]) == 1


def test_index_entries_listed_whole_or_by_pathspec_give_the_same_answers(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree, paths = _mixed(repo)
    merge_conflict(repo)  # c.txt in stages 1 to 3
    (repo / "planned").write_bytes(b"later\n")
    git(repo, "add", "-N", "planned")
    (repo / "src" / "app.py").write_bytes(b"staged\n")
    git(repo, "add", "src/app.py")
    asked = [*paths, "c.txt", "planned", "flat", "odd", "mod", "vendor/lib", "absent"]
    asked += [*ODD, *(f"odd/{n}" for n in ODD), *(p for x in paths for p in prefixes_of(x))]
    layout = discover(repo)
    monkeypatch.setattr(index_memo, "identity", lambda _layout: None)  # nothing recalled
    answers = []
    for per_path in (0, 10**9):  # by pathspec, then the whole index listed
        monkeypatch.setattr(readback, "WHOLE_LISTING_PER_PATH", per_path)
        answers.append(index_entries(layout, asked))
    assert answers[0] == answers[1]
    assert [e.stage for e in answers[1]["c.txt"]] == [1, 2, 3]
    assert answers[1]["planned"][0].intent_to_add
    assert answers[1]["mod"][0].mode == "160000" and answers[1]["flat"] == []


def test_the_whole_index_is_listed_only_when_it_is_small_beside_the_paths_asked(
    repo: Path, tmp_path: Path
) -> None:
    layout = discover(repo)
    entries = len(ODD) * 2 + 3 + 300
    assert not readback._whole_listing_is_cheaper(layout, 2)
    assert not readback._whole_listing_is_cheaper(layout, entries // 2 - 1)
    assert readback._whole_listing_is_cheaper(layout, (entries + 1) // 2)
    with runner.counting() as started:
        index_entries(layout, ["flat/f0001.txt"])
    assert started == ["ls-files"]
    unborn = make_repo(tmp_path, "unborn")  # no index file yet: nothing to list
    assert readback._whole_listing_is_cheaper(discover(unborn), 1)
    assert index_entries(discover(unborn), ["a"]) == {"a": []}


def test_a_fifo_in_place_of_the_index_is_not_waited_on(repo: Path) -> None:
    layout = discover(repo)
    index = Path(layout.git_dir) / "index"
    index.unlink()
    os.mkfifo(index)
    assert not readback._whole_listing_is_cheaper(layout, 10**6)


def _mixed(repo: Path) -> tuple[str, list[str]]:
    """A tree with a gitlink checked out as a directory, one not on disk, a blob in the
    way, a directory gone from disk; and paths through each of them."""
    (repo / "gone").mkdir()
    (repo / "gone" / "f.txt").write_bytes(b"gone\n")
    commit = commit_all(repo, "gone")
    for sub in ("mod", "vendor/lib"):
        git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},{sub}")
    git(repo, "commit", "-q", "-m", "gitlinks")
    (repo / "mod").mkdir()
    (repo / "mod" / "file.c").write_bytes(b"x\n")
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    for path in (repo / "gone").iterdir():
        path.unlink()
    (repo / "gone").rmdir()
    paths = [
        "src/app.py",
        "src/new/deeper/made.txt",
        "flat/f0003.txt",
        "flat/new/x.txt",
        "mod/file.c",
        "vendor/lib/a/b.c",
        "run.sh/below",
        "gone/f.txt",
        "brand/new/file",
        "odd/[x]",
        "odd/a*",
    ]
    return tree, paths


def test_path_entries_equal_tree_entries_of_every_leading_directory(repo: Path) -> None:
    tree, paths = _mixed(repo)
    layout = discover(repo)
    everything = list(dict.fromkeys(p for path in paths for p in prefixes_of(path)))
    with runner.counting() as started:
        found = path_entries(layout, tree, paths)
    assert found == tree_entries(layout, tree, everything)
    assert set(found) == set(everything)
    # the trees are read through the repository's one long-lived cat-file
    assert started == ["cat-file"]
    assert found["mod"] is not None and found["mod"].type == "commit"


def test_tree_entries_read_through_a_running_reader_equal_ls_tree(repo: Path) -> None:
    tree, paths = _mixed(repo)
    layout = discover(repo)
    everything = list(dict.fromkeys(p for path in paths for p in prefixes_of(path)))
    below = [f"{p}/x" for p in everything]  # below a blob, a gitlink, a tree or nothing
    asked = [*everything, *below, "absent", "absent/deeper"]
    with CatFile(cwd=repo, env=repo_env(layout)) as cat, runner.counting() as started:
        found = readback.tree_entries_read(cat, tree, asked)
    assert started == []  # no ls-tree: the reader's trees
    assert found == tree_entries(layout, tree, asked)
    assert found["mod"] is not None and found["mod"].type == "commit"
    assert found["mod/x"] is None


def test_path_entries_in_one_process_when_nothing_is_in_the_way(repo: Path) -> None:
    layout = discover(repo)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    with runner.counting() as started:
        found = path_entries(layout, tree, ["flat/f0009.txt", "src/new/made.txt", "x"])
    assert started == ["cat-file"]
    assert found["flat"] is not None and found["flat"].type == "tree"
    assert found["src/new"] is None and found["src/new/made.txt"] is None


def test_gitlinks_and_nested_with_read_answers_equal_its_own(repo: Path) -> None:
    tree, paths = _mixed(repo)
    layout = discover(repo)
    prefixes = list(dict.fromkeys(p for path in paths for p in prefixes_of(path)))
    own = gitlinks_and_nested(layout, paths)
    given = gitlinks_and_nested(
        layout,
        paths,
        index=index_entries(layout, prefixes),
        head_tree=(tree, path_entries(layout, tree, paths)),
    )
    assert own == given
    assert set(own) == {"mod/file.c", "vendor/lib/a/b.c"}


def _triple(repo: Path) -> HeadState:
    layout = discover(repo)
    commit = head_commit(layout)
    return HeadState(symbolic_head(layout), commit, commit_tree(layout, commit) if commit else None)


def test_read_head_on_the_expected_branch_is_one_process_then_none(repo: Path) -> None:
    layout = discover(repo)
    with runner.counting() as started:
        head = read_head(layout, "refs/heads/main")
    assert started == ["for-each-ref"]
    assert head == _triple(repo)
    git(repo, "pack-refs", "--all")
    with runner.counting() as started:  # the commit's tree is known: the files answer
        packed = read_head(layout, "refs/heads/main")
    assert started == []
    assert packed == _triple(repo)


@pytest.mark.parametrize("case", ["detached", "other branch", "symref chain", "tag ref"])
def test_read_head_elsewhere_answers_as_the_single_reads(repo: Path, case: str) -> None:
    if case == "detached":
        git(repo, "checkout", "-q", "--detach")
    elif case == "other branch":
        git(repo, "checkout", "-q", "-b", "topic")
    elif case == "symref chain":
        git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
        git(repo, "symbolic-ref", "HEAD", "refs/heads/alias")
    else:
        git(repo, "tag", "-a", "-m", "t", "v1")
        git(repo, "symbolic-ref", "HEAD", "refs/tags/v1")  # HEAD at an annotated tag
    layout = discover(repo)
    names = ("refs/heads/main", "refs/heads/alias", "refs/heads/topic", "refs/tags/v1", None)
    for expected in names:
        try:
            triple = _triple(repo)
        except Exception as exc:  # a HEAD that is no commit: both refuse alike
            with pytest.raises(type(exc)):
                read_head(layout, expected)
        else:
            assert read_head(layout, expected) == triple


def test_read_head_on_an_unborn_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "empty")
    assert read_head(discover(repo), "refs/heads/main") == HeadState("refs/heads/main", None, None)


def test_read_head_of_a_linked_worktree(repo: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    (linked / "side.txt").write_bytes(b"side\n")
    commit_all(linked, "side")
    layout = discover(linked)
    head = read_head(layout, "refs/heads/side")
    assert head == _triple(linked)
    assert head.commit == git(linked, "rev-parse", "HEAD") != git(repo, "rev-parse", "HEAD")


def test_commit_tree_is_one_process(repo: Path) -> None:
    layout = discover(repo)
    commit = git(repo, "rev-parse", "HEAD")
    with runner.counting() as started:
        assert commit_tree(layout, commit) == git(repo, "rev-parse", "HEAD^{tree}")
    assert started == ["cat-file"]
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    assert commit_tree(layout, tree) is None
    assert commit_tree(layout, "0" * 40) is None
    assert os.path.isdir(repo / ".git")


def test_path_entries_are_remembered_per_tree(repo: Path) -> None:
    layout = discover(repo)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    first = path_entries(layout, tree, ["src/app.py", "gen/new.txt"])
    with runner.counting() as started:
        again = path_entries(layout, tree, ["gen/new.txt", "src/app.py"])
        part = path_entries(layout, tree, ["src/app.py", "run.sh"])
    assert again == first
    assert started == []  # run.sh was new: its tree was read by the running cat-file
    assert part == tree_entries(layout, tree, ["src", "src/app.py", "run.sh"])
    (repo / "src" / "app.py").write_bytes(b"changed\n")
    commit_all(repo, "next")
    newer = git(repo, "rev-parse", "HEAD^{tree}")
    with runner.counting() as started:
        fresh = path_entries(layout, newer, ["src/app.py"])
    assert started == []  # another tree is read afresh by the same cat-file
    assert fresh["src/app.py"] != first["src/app.py"]


@pytest.fixture
def stopped_readers() -> Iterator[None]:
    """The long-lived tree readers stopped after the test (the repository goes away)."""
    yield
    tree_reader.close_all()


def test_a_tree_too_large_to_parse_here_is_asked_through_ls_tree(
    repo: Path, monkeypatch: pytest.MonkeyPatch, stopped_readers: None
) -> None:
    tree, paths = _mixed(repo)
    layout = discover(repo)
    everything = list(dict.fromkeys(p for path in paths for p in prefixes_of(path)))
    monkeypatch.setattr(tree_reader, "MAX_TREE_BYTES", 64)
    with runner.counting() as started:
        found = path_entries(layout, tree, paths)
    assert found == tree_entries(layout, tree, everything)
    # the root tree is larger than 64 bytes: the old listing, with the checked-out
    # gitlink "mod" asked about in a second ls-tree
    assert started[-2:] == ["ls-tree", "ls-tree"]


def test_a_killed_tree_reader_is_replaced_and_answers_the_same(
    repo: Path, stopped_readers: None
) -> None:
    tree, paths = _mixed(repo)
    layout = discover(repo)
    everything = list(dict.fromkeys(p for path in paths for p in prefixes_of(path)))
    first = path_entries(layout, tree, ["src/app.py"])
    reader = tree_reader._readers[os.fspath(layout.common_dir)]
    proc = reader._cat._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with runner.counting() as started:
        found = path_entries(layout, tree, paths)
    assert started == ["cat-file"]  # a new reader, once
    assert found == tree_entries(layout, tree, everything)
    assert found["src/app.py"] == first["src/app.py"]


def test_a_tree_reader_answers_git_s_own_entries_for_every_odd_name(
    repo: Path, stopped_readers: None
) -> None:
    layout = discover(repo)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    children = tree_reader.children(layout, tree)
    assert children is not None
    assert children == tree_entries(layout, tree, list(children))
    assert set(ODD) <= set(children)


def test_a_repository_no_daemon_guards_keeps_no_git_process_running(tmp_path: Path) -> None:
    """An executor's clone or a sandbox is read with ``ls-tree``: no cat-file is left
    running with its working directory inside (a sandbox with a live process in it is
    never pruned)."""
    clone = make_repo(tmp_path, "clone")
    (clone / "d").mkdir()
    (clone / "d" / "f.txt").write_bytes(b"f\n")
    commit_all(clone, "a clone")
    layout = discover(clone)
    tree = git(clone, "rev-parse", "HEAD^{tree}")
    assert tree_reader.children(layout, tree) is None
    with runner.counting() as started:
        found = path_entries(layout, tree, ["d/f.txt"])
    assert found["d/f.txt"] is not None and "cat-file" not in started
    assert os.fspath(layout.common_dir) not in tree_reader._readers


def _blob_ids(repo: Path) -> dict[str, str]:
    listed = git(repo, "ls-tree", "-r", "HEAD").splitlines()
    return {line.split("\t", 1)[1]: line.split()[2] for line in listed if " blob " in line}


def _digests_alone(repo: Path, oids: list[str]) -> dict[str, tuple[str, int]]:
    """What a cat-file of its own answers (a repository no daemon guards)."""
    layout = discover(repo)
    tree_reader.close_all()
    with CatFile(cwd=layout.worktree, env=repo_env(layout)) as cat:
        return cat.blob_sha256(oids)


def test_blob_digests_come_through_the_running_reader_with_no_process_started(
    repo: Path, stopped_readers: None
) -> None:
    layout = discover(repo)
    oids = sorted(set(_blob_ids(repo).values()))
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    assert tree_reader.children(layout, tree) is not None  # the reader runs
    with runner.counting() as started:
        found = readback.blob_sha256(layout, oids)
    assert started == []
    assert found == _digests_alone(repo, oids)
    assert found[oids[0]][1] == len(git_bytes(repo, "cat-file", "blob", oids[0]))


def test_a_busy_reader_is_not_waited_for_a_process_of_its_own_answers(
    repo: Path, stopped_readers: None
) -> None:
    layout = discover(repo)
    oids = sorted(set(_blob_ids(repo).values()))
    tree_reader.children(layout, git(repo, "rev-parse", "HEAD^{tree}"))
    reader = tree_reader._readers[os.fspath(layout.common_dir)]
    with reader.lock:  # another thread is being answered
        assert tree_reader.blob_sha256(layout, oids) is None
        with runner.counting() as started:
            found = readback.blob_sha256(layout, oids)
    assert started == ["cat-file"]
    assert found == _digests_alone(repo, oids)


def test_a_missing_blob_is_the_error_it_always_was_and_the_next_question_is_answered(
    repo: Path, stopped_readers: None
) -> None:
    layout = discover(repo)
    oids = sorted(set(_blob_ids(repo).values()))
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    tree_reader.children(layout, tree)
    missing = "0" * len(oids[0])
    with pytest.raises(GitError) as through_reader:
        readback.blob_sha256(layout, [oids[0], missing])
    assert os.fspath(layout.common_dir) not in tree_reader._readers  # that reader stopped
    with pytest.raises(GitError) as alone:
        _digests_alone(repo, [oids[0], missing])
    assert str(through_reader.value) == str(alone.value)
    tree_reader.children(layout, tree)  # a new reader
    assert readback.blob_sha256(layout, oids) == _digests_alone(repo, oids)


def test_blob_digests_of_a_repository_no_daemon_guards_start_a_process_left_running_nowhere(
    tmp_path: Path,
) -> None:
    clone = make_repo(tmp_path, "clone")
    (clone / "f.txt").write_bytes(b"f\n")
    commit_all(clone, "a clone")
    layout = discover(clone)
    oid = git(clone, "rev-parse", "HEAD:f.txt")
    with runner.counting() as started:
        found = readback.blob_sha256(layout, [oid])
    assert started == ["cat-file"]
    assert found == {oid: (hashlib.sha256(b"f\n").hexdigest(), 2)}
    assert os.fspath(layout.common_dir) not in tree_reader._readers
