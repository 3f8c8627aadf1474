"""The hermetic git runner and the cat-file stream, against real git."""

from __future__ import annotations

import hashlib
import os
import resource
from pathlib import Path

import pytest

from promoter.errors import GitError
from promoter.git.objects import AHEAD, CatFile
from promoter.git.runner import git_environment, run_git
from tests.gitutil import blob_oid, commit_all, git, make_repo


def _child_env(tmp_path: Path, **env: str) -> dict[str, str]:
    # A shell alias prints the environment git hands its children.
    result = run_git(["-c", "alias.showenv=!env", "showenv"], cwd=tmp_path, env=env or None)
    lines = result.stdout.decode().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_caller_environment_does_not_leak_into_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_DIR", "/somewhere/else/.git")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.autocrlf=true'")
    monkeypatch.setenv("PROMOTER_SECRET", "hunter2")
    seen = _child_env(tmp_path)
    assert "PROMOTER_SECRET" not in seen
    assert seen.get("GIT_DIR") is None
    assert "autocrlf" not in seen.get("GIT_CONFIG_PARAMETERS", "")
    assert seen["LC_ALL"] == "C"
    assert seen["GIT_CONFIG_NOSYSTEM"] == "1"
    assert seen["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert seen["GIT_OPTIONAL_LOCKS"] == "0"
    assert seen["GIT_TERMINAL_PROMPT"] == "0"
    assert seen["GIT_NO_REPLACE_OBJECTS"] == "1"


def test_global_config_of_the_caller_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[core]\n\tautocrlf = true\n")
    monkeypatch.setenv("HOME", str(home))
    result = run_git(["config", "--get", "core.autocrlf"], cwd=tmp_path, check=False)
    assert result.returncode == 1
    assert result.stdout == b""


def test_fixed_variables_cannot_be_loosened() -> None:
    with pytest.raises(ValueError, match="GIT_OPTIONAL_LOCKS"):
        git_environment({"GIT_OPTIONAL_LOCKS": "1"})


def test_a_string_instead_of_argv_is_refused() -> None:
    with pytest.raises(TypeError):
        run_git("status")


def test_failure_carries_argv_returncode_and_stderr(tmp_path: Path) -> None:
    with pytest.raises(GitError) as caught:
        run_git(["rev-parse", "--verify", "no-such-ref"], cwd=tmp_path)
    error = caught.value
    assert error.code == "git_error"
    assert error.context["returncode"] == 128
    assert error.context["argv"][-2:] == ["--verify", "no-such-ref"]
    assert "not a git repository" in error.context["stderr"]


def test_unchecked_failure_returns_the_result(tmp_path: Path) -> None:
    result = run_git(["rev-parse", "--verify", "x"], cwd=tmp_path, check=False)
    assert result.returncode == 128
    assert result.stdout == b""


def test_timeout_kills_git_and_raises(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="timed out"):
        run_git(["-c", "alias.nap=!sleep 5", "nap"], cwd=tmp_path, timeout=0.3)


def test_a_command_ends_while_the_descriptors_are_past_1024(tmp_path: Path) -> None:
    """A daemon's descriptors may pass 1024, where ``select`` refuses one: git's end is
    waited on all the same, with and without input."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip("the descriptor limit cannot pass 1024 here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    held: list[int] = []
    try:
        while not held or held[-1] < 1100:  # every new descriptor is numbered above 1100
            held.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        assert run_git(["--version"], cwd=tmp_path).stdout.startswith(b"git version")
        result = run_git(["hash-object", "--stdin"], cwd=tmp_path, input=b"abc")
        assert result.stdout.decode().strip() == blob_oid(b"abc")
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_input_reaches_stdin(tmp_path: Path) -> None:
    result = run_git(["hash-object", "--stdin"], cwd=tmp_path, input=b"abc")
    assert result.stdout.decode().strip() == blob_oid(b"abc")


def test_cat_file_streams_large_blob_in_bounded_chunks(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    data = bytes(range(256)) * 20_000 + b"tail\r\n"
    (repo / "big.bin").write_bytes(data)
    (repo / "small").write_bytes(b"x")
    commit_all(repo)
    big, small = blob_oid(data), blob_oid(b"x")
    with CatFile(cwd=repo) as cat:
        chunks = list(cat.blob_chunks(big, chunk_size=4096))
        assert max(len(chunk) for chunk in chunks) <= 4096
        assert b"".join(chunks) == data
        # Interleaved requests, and an unread body skipped by the next request.
        info = cat.request(big)
        assert info is not None and info.size == len(data) and info.type == "blob"
        assert cat.read_blob(small) == b"x"
        assert cat.blob_sha256([big, small, big]) == {
            big: (hashlib.sha256(data).hexdigest(), len(data)),
            small: (hashlib.sha256(b"x").hexdigest(), 1),
        }
        assert cat.request("f" * 40) is None


def test_cat_file_refuses_a_tree_as_a_blob_and_stays_usable(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "f").write_bytes(b"content")
    commit_all(repo)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    with CatFile(cwd=repo) as cat:
        with pytest.raises(GitError, match="is a tree, not a blob"):
            cat.read_blob(tree)
        assert cat.read_blob(blob_oid(b"content")) == b"content"


def test_cat_file_hashes_many_blobs_with_requests_ahead_of_large_answers(
    tmp_path: Path,
) -> None:
    """More blobs than one window of requests, some far larger than a pipe: every answer
    is read in order and nothing deadlocks (git's writes wait for this side's reads)."""
    repo = make_repo(tmp_path)
    contents = [
        (bytes([i % 251]) * (300_000 if i % 40 == 0 else i + 1)) for i in range(3 * AHEAD + 5)
    ]
    for i, data in enumerate(contents):
        (repo / f"f{i:03d}").write_bytes(data)
    commit_all(repo)
    oids = [blob_oid(data) for data in contents]
    with CatFile(cwd=repo) as cat:
        assert cat.blob_sha256(oids) == {
            blob_oid(d): (hashlib.sha256(d).hexdigest(), len(d)) for d in contents
        }


@pytest.mark.parametrize("where", [0, AHEAD // 2, AHEAD - 1, AHEAD + 3])
def test_cat_file_refuses_a_missing_blob_inside_a_window_and_stays_in_step(
    tmp_path: Path, where: int
) -> None:
    repo = make_repo(tmp_path)
    contents = [f"blob {i}\n".encode() * (i + 1) for i in range(2 * AHEAD)]
    for i, data in enumerate(contents):
        (repo / f"f{i:03d}").write_bytes(data)
    (repo / "after").write_bytes(b"read after the failure")
    commit_all(repo)
    oids = [blob_oid(data) for data in contents]
    oids[where] = "e" * 40  # not in the repository
    with CatFile(cwd=repo) as cat:
        with pytest.raises(GitError, match="is not in the repository"):
            cat.blob_sha256(oids)
        # every answer in flight was read: the next requests get their own answers
        assert cat.read_blob(blob_oid(b"read after the failure")) == b"read after the failure"
        assert cat.blob_sha256([blob_oid(contents[1])]) == {
            blob_oid(contents[1]): (hashlib.sha256(contents[1]).hexdigest(), len(contents[1]))
        }


def test_cat_file_refuses_revision_expressions(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    with CatFile(cwd=repo) as cat, pytest.raises(ValueError):
        cat.request("HEAD:f")


def test_cat_file_outside_a_repository_fails_cleanly(tmp_path: Path) -> None:
    with CatFile(cwd=tmp_path) as cat, pytest.raises(GitError):
        cat.request("a" * 40)


def test_cat_file_reads_head_by_name_only_and_stays_in_step(tmp_path: Path) -> None:
    """``HEAD`` and ``HEAD^{tree}``, the two names it sends, answer with the ids they name
    (nothing on an unborn branch); the next request gets its own answer."""
    repo = make_repo(tmp_path)
    with CatFile(cwd=repo) as cat:
        assert cat.head() == (None, None)
    (repo / "f").write_bytes(b"content")
    commit_all(repo)
    commit, tree = git(repo, "rev-parse", "HEAD", "HEAD^{tree}").split("\n")
    with CatFile(cwd=repo) as cat:
        head, head_tree = cat.head()
        assert head is not None and (head.oid, head.type) == (commit, "commit")
        assert head_tree is not None and (head_tree.oid, head_tree.type) == (tree, "tree")
        assert cat.read_blob(blob_oid(b"content")) == b"content"
        with pytest.raises(ValueError):
            cat.request("HEAD")  # a name only through head()
