"""``GET /v1/trace``, ``promoter trace`` and ``promoter trailers`` on a real repository.

Two promotions write files into the worktree, the person edits one of them by hand, adds
a file of their own and commits everything: the trace names each promotion's receipt for
its paths, says the edited path changed after promotion and the person's own file was
never promoted, and nothing in the repository changes while it reads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from promoter.cli import trace_cmd
from tests.gitutil import git
from tests.support.daemon import Daemon
from tests.support.flows import sha
from tests.support.promotion import git_dir_digest, promote, submit, tree_bytes

INITIAL = {"README.md": b"# project\n", "src/app.py": b"print('v1')\n", "old.txt": b"old\n"}


pytestmark = pytest.mark.repo(files=INITIAL)


def _promote(daemon: Daemon, repo: Path, changes: list[Any], **grant: Any) -> dict[str, Any]:
    identity = daemon.services.registry.by_name("work").identity
    _, bundle, receipt = submit(daemon, repo, identity, changes, **grant)
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 200, answer.text
    view: dict[str, Any] = answer.json()
    assert view["status"] == "completed", view
    return view


def _receipt_sha(daemon: Daemon, operation_id: str) -> str:
    with daemon.orchestrator() as client:
        answer = client.get(f"/v1/operations/{operation_id}/receipt")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["receipt_sha256"])


def _repository_state(repo: Path) -> tuple[Any, ...]:
    """Refs, index, status, worktree bytes and every file under .git, to compare."""
    return (
        git(repo, "for-each-ref"),
        git(repo, "status", "--porcelain"),
        hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(),
        tree_bytes(repo),
        git_dir_digest(repo),
    )


@pytest.fixture
def history(daemon: Daemon, repo: Path) -> dict[str, str]:
    """Two promotions, one hand edit after them and one file of the person's, staged."""
    first = _promote(
        daemon,
        repo,
        [("src/app.py", b"print('v1')\n", b"print('v2')\n"), ("src/a.py", None, b"a1\n")],
        grant_id="grt_first",
        run_id="run_first",
    )
    second = _promote(
        daemon,
        repo,
        [("src/b.py", None, b"b1\n"), ("old.txt", b"old\n", None)],
        grant_id="grt_second",
        run_id="run_second",
        workflow_id="wf_2",
    )
    (repo / "src" / "a.py").write_bytes(b"a2 by hand\n")
    (repo / "notes.txt").write_bytes(b"mine\n")
    git(repo, "add", "-A")
    return {"first": first["operation_id"], "second": second["operation_id"]}


def _cli(daemon: Daemon, tmp_path: Path, *args: str) -> Any:
    app = typer.Typer()
    trace_cmd.register(app)
    token = tmp_path / "orchestrator.token"
    token.write_text(daemon.orchestrator_token)
    common = ["--url", daemon.url, "--token-file", str(token)]
    return CliRunner().invoke(app, [*args, *common])


def test_trace_names_both_promotions_and_the_hand_edit(
    daemon: Daemon, repo: Path, history: dict[str, str], tmp_path: Path
) -> None:
    git(repo, "commit", "-q", "-m", "the agents' work and mine")
    before = _repository_state(repo)
    commit = git(repo, "rev-parse", "HEAD")
    with daemon.orchestrator() as client:
        answer = client.get("/v1/trace", params={"repository": "work", "commit": commit})
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["commit"] == commit
    assert report["parent"] == git(repo, "rev-parse", "HEAD^")
    paths = {item["path"]: item for item in report["paths"]}
    assert sorted(paths) == ["notes.txt", "old.txt", "src/a.py", "src/app.py", "src/b.py"]

    first, second = history["first"], history["second"]
    app = paths["src/app.py"]
    assert (app["verdict"], app["change"], app["mode"]) == ("promoted", "M", "100644")
    assert app["sha256"] == sha(b"print('v2')\n")
    [by] = app["promotions"]
    assert by["operation_id"] == first
    assert (by["grant_id"], by["executor_run_id"]) == ("grt_first", "run_first")
    assert by["receipt_sha256"] == _receipt_sha(daemon, first)
    assert by["promoted_at"] and by["bundle_id"].startswith("bnd_")
    assert [p["operation_id"] for p in paths["src/b.py"]["promotions"]] == [second]
    deleted = paths["old.txt"]
    assert (deleted["verdict"], deleted["change"], deleted["exists"]) == ("promoted", "D", False)
    assert [p["operation_id"] for p in deleted["promotions"]] == [second]
    edited = paths["src/a.py"]
    assert edited["verdict"] == "changed_after_promotion"
    assert edited["sha256"] == sha(b"a2 by hand\n") and edited["promotions"] == []
    assert edited["last_promotion"]["operation_id"] == first
    mine = paths["notes.txt"]
    assert (mine["verdict"], mine["promotions"], mine["last_promotion"]) == (
        "not_promoted",
        [],
        None,
    )

    result = _cli(daemon, tmp_path, "trace", "HEAD", "--repo", "work")
    assert result.exit_code == 0, (result.output, result.exception)
    assert first in result.output and second in result.output
    assert "changed_after_promotion" in result.output and "not_promoted" in result.output
    as_json = _cli(daemon, tmp_path, "trace", commit, "--repo", "work", "--json")
    assert json.loads(as_json.output) == report
    assert _repository_state(repo) == before


def test_paths_given_the_commit_did_not_touch_are_untouched(
    daemon: Daemon, repo: Path, history: dict[str, str], tmp_path: Path
) -> None:
    git(repo, "commit", "-q", "-m", "the agents' work and mine")
    result = _cli(
        daemon, tmp_path, "trace", "HEAD", "src/b.py", "README.md", "--repo", "work", "--json"
    )
    assert result.exit_code == 0, (result.output, result.exception)
    paths = {item["path"]: item for item in json.loads(result.output)["paths"]}
    assert sorted(paths) == ["README.md", "src/b.py"]
    assert paths["src/b.py"]["verdict"] == "promoted"
    untouched = paths["README.md"]
    assert (untouched["verdict"], untouched["change"], untouched["sha256"]) == (
        "untouched",
        None,
        None,
    )


def test_trailers_name_the_promotions_of_what_is_staged(
    daemon: Daemon, repo: Path, history: dict[str, str], tmp_path: Path
) -> None:
    before = _repository_state(repo)
    result = _cli(daemon, tmp_path, "trailers", "--repo", "work")
    assert result.exit_code == 0, (result.output, result.exception)
    lines = result.output.splitlines()
    receipts = {op: _receipt_sha(daemon, op)[:12] for op in history.values()}
    assert sorted(lines) == sorted(f"Promoted-by: {op} ({r})" for op, r in receipts.items())
    assert _repository_state(repo) == before


def test_inside_the_guarded_worktree_repo_may_be_left_out(
    daemon: Daemon,
    repo: Path,
    history: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    named = _cli(daemon, tmp_path, "trailers", "--repo", "work")
    monkeypatch.chdir(repo / "src")
    here = _cli(daemon, tmp_path, "trailers")
    assert (here.exit_code, here.output) == (0, named.output), here.exception
    git(repo, "commit", "-q", "-m", "the agents' work and mine")
    traced = _cli(daemon, tmp_path, "trace", "HEAD")
    assert traced.exit_code == 0, (traced.output, traced.exception)
    assert traced.output == _cli(daemon, tmp_path, "trace", "HEAD", "--repo", "work").output
    monkeypatch.chdir(tmp_path)
    outside = _cli(daemon, tmp_path, "trace", "HEAD")
    assert outside.exit_code == 2
    assert "name the repository: --repo NAME (the current directory is not in a worktree" in (
        outside.output
    )


def test_paths_typed_in_a_subdirectory_are_relative_to_it_as_git_takes_them(
    daemon: Daemon,
    repo: Path,
    history: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`cd src && promoter trace HEAD b.py` is src/b.py, never an `untouched` b.py at the top."""
    git(repo, "commit", "-q", "-m", "the agents' work and mine")
    from_top = _cli(
        daemon, tmp_path, "trace", "HEAD", "src/b.py", "README.md", "--repo", "work", "--json"
    )
    monkeypatch.chdir(repo / "src")
    here = _cli(daemon, tmp_path, "trace", "HEAD", "b.py", "../README.md", "--json")
    assert here.exit_code == 0, (here.output, here.exception)
    paths = [(item["path"], item["verdict"]) for item in json.loads(here.output)["paths"]]
    assert paths == [("README.md", "untouched"), ("src/b.py", "promoted")]
    assert json.loads(here.output) == json.loads(from_top.output)
    named = _cli(daemon, tmp_path, "trace", "HEAD", "b.py", "--repo", "work", "--json")
    assert [item["path"] for item in json.loads(named.output)["paths"]] == ["src/b.py"]
    above = _cli(daemon, tmp_path, "trace", "HEAD", "../../x.py")
    assert above.exit_code == 2
    assert "../../x.py is outside the worktree of work" in above.output


def test_an_unknown_commit_is_refused_and_nothing_is_written(
    daemon: Daemon, repo: Path, history: dict[str, str], tmp_path: Path
) -> None:
    before = _repository_state(repo)
    unknown = "0123456789abcdef0123456789abcdef01234567"
    with daemon.orchestrator() as client:
        for commit in (unknown, "no-such-branch", "--output=/tmp/x", "HEAD:README.md"):
            answer = client.get("/v1/trace", params={"repository": "work", "commit": commit})
            assert answer.status_code == 404, answer.text
            assert answer.json()["code"] == "commit_unknown"
        both = client.get(
            "/v1/trace", params={"repository": "work", "commit": unknown, "staged": "true"}
        )
        assert both.status_code == 422 and both.json()["code"] == "validation_failed"
    result = _cli(daemon, tmp_path, "trace", unknown, "--repo", "work")
    assert result.exit_code != 0
    assert getattr(result.exception, "code", None) == "commit_unknown"
    assert _repository_state(repo) == before


def test_trace_reads_receipts_with_the_orchestrator_or_operator_role(
    daemon: Daemon, repo: Path, history: dict[str, str]
) -> None:
    params = {"repository": "work", "staged": "true"}
    with daemon.operator() as client:
        assert client.get("/v1/trace", params=params).status_code == 200
    with daemon.executor("run_first") as client:
        answer = client.get("/v1/trace", params=params)
    assert answer.status_code == 403 and answer.json()["code"] == "forbidden"


BACKSLASH = "src/back\\\\slash.txt"  # wire form of the bytes src/back\slash.txt
NOT_UTF8 = "src/caf\\xe9-\\xff.txt"  # wire form of src/caf<0xe9>-<0xff>.txt


def test_names_with_a_backslash_or_bytes_that_are_not_utf8_trace_to_their_receipt(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """Receipts name paths in wire form, git by their bytes: a trace matches them by bytes,
    so neither name is reported `not_promoted` nor confused with a look-alike spelling."""
    view = _promote(
        daemon,
        repo,
        [(BACKSLASH, None, b"backslash\n"), (NOT_UTF8, None, b"latin-1\n")],
        grant_id="grt_bytes",
        run_id="run_bytes",
    )
    assert (repo / "src" / "back\\slash.txt").read_bytes() == b"backslash\n"
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "odd names")
    commit = git(repo, "rev-parse", "HEAD")

    with daemon.orchestrator() as client:
        answer = client.get("/v1/trace", params={"repository": "work", "commit": commit})
        assert answer.status_code == 200, answer.text
        paths = {item["path"]: item for item in answer.json()["paths"]}
        assert sorted(paths) == sorted([BACKSLASH, NOT_UTF8])
        for path, data in ((BACKSLASH, b"backslash\n"), (NOT_UTF8, b"latin-1\n")):
            assert paths[path]["verdict"] == "promoted", paths[path]
            assert paths[path]["sha256"] == sha(data)
            assert [p["operation_id"] for p in paths[path]["promotions"]] == [view["operation_id"]]
        asked = client.get(
            "/v1/trace", params={"repository": "work", "commit": commit, "path": [NOT_UTF8]}
        )
        assert asked.status_code == 200, asked.text
        assert [(p["path"], p["verdict"]) for p in asked.json()["paths"]] == [
            (NOT_UTF8, "promoted")
        ]
        # a spelling that is not the canonical wire form names nothing: refused, not guessed
        wrong = client.get(
            "/v1/trace",
            params={"repository": "work", "commit": commit, "path": ["src/caf\\xc3\\xa9"]},
        )
        assert (wrong.status_code, wrong.json()["code"]) == (422, "path_invalid")

    # the command line takes the name as the file system spells it (argv bytes)
    result = _cli(
        daemon, tmp_path, "trace", "HEAD", "src/back\\slash.txt", "--repo", "work", "--json"
    )
    assert result.exit_code == 0, (result.output, result.exception)
    [item] = json.loads(result.output)["paths"]
    assert (item["path"], item["verdict"]) == (BACKSLASH, "promoted")
