"""Snapshot endpoints through a real server (protocol: api#routes-and-roles, snapshots#restore) and
the CLI.

The server is the real application on a free loopback port; requests go through httpx
over TCP. The CLI group is driven against the same server.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from promoter.cli import snapshot_cmd
from promoter.fs import flush
from promoter.fs.group_sync import GroupSync
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo
from tests.support.promotion import git_dir_digest, promote, submit, tree_bytes

BASE = "/v1/repositories/work/snapshots"
UNKNOWN = "0123456789abcdef0123456789abcdef01234567"


def _capture(client: httpx.Client, label: str = "") -> str:
    answer = client.post(BASE, json={"label": label})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["tree"])


def test_capture_list_diff_restore_round_trip(daemon: Daemon, repo: Path) -> None:
    git_before = git_dir_digest(repo)
    with daemon.operator() as op:
        assert op.get(BASE).json() == {"snapshots": []}
        first = op.post(BASE, json={"label": "before the agent"})
        assert first.status_code == 201
        assert set(first.json()) == {"tree", "label", "captured_at"}
        base = first.json()["tree"]
        files = tree_bytes(repo)
        (repo / "src" / "app.py").write_bytes(b"print('broken')\n")
        (repo / "README.md").unlink()
        (repo / "junk.txt").write_bytes(b"junk\n")
        broken = _capture(op, "after the agent")
        listed = op.get(BASE).json()["snapshots"]
        assert [(s["tree"], s["label"]) for s in listed] == [
            (base, "before the agent"),
            (broken, "after the agent"),
        ]
        diff = op.get(f"{BASE}/diff", params={"from": base, "to": broken}).json()
        assert (diff["added"], diff["modified"], diff["deleted"]) == (
            ["junk.txt"],
            ["src/app.py"],
            ["README.md"],
        )
        assert "+print('broken')" in diff["unified_diff"]
        assert diff["truncated"] is False

        answer = op.post(f"{BASE}/{base}/restore", json={"expected_current_tree": broken})
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "completed"
        operation = op.get(f"/v1/operations/{answer.json()['operation_id']}").json()
        assert (operation["kind"], operation["status"]) == ("restore", "completed")
    assert tree_bytes(repo) == files
    assert git_dir_digest(repo) == git_before


def test_a_stale_expected_tree_is_409_snapshot_stale_and_writes_nothing(
    daemon: Daemon, repo: Path
) -> None:
    with daemon.operator() as op:
        base = _capture(op)
        (repo / "src" / "app.py").write_bytes(b"print('v2')\n")
        reviewed = _capture(op)
        (repo / "src" / "app.py").write_bytes(b"print('v3, after the review')\n")
        files = tree_bytes(repo)
        answer = op.post(f"{BASE}/{base}/restore", json={"expected_current_tree": reviewed})
    assert answer.status_code == 409
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["code"] == "snapshot_stale"
    assert answer.json()["current_tree"] != reviewed
    assert tree_bytes(repo) == files


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("post", f"{BASE}/not-a-tree/restore", {"expected_current_tree": UNKNOWN}, 422,
         "validation_failed"),
        ("post", f"{BASE}/{UNKNOWN.upper()}/restore", {"expected_current_tree": UNKNOWN}, 422,
         "validation_failed"),
        ("post", f"{BASE}/{UNKNOWN}/restore", {"expected_current_tree": UNKNOWN}, 404, "not_found"),
        ("post", f"{BASE}/{UNKNOWN}/restore", {"expected_current_tree": "HEAD"}, 422,
         "validation_failed"),
        ("post", f"{BASE}/{UNKNOWN}/restore", {}, 422, "validation_failed"),
        ("post", f"{BASE}/{UNKNOWN}/restore", [UNKNOWN], 422, "validation_failed"),
        ("post", f"{BASE}/{UNKNOWN}/restore", {"expected_current_tree": UNKNOWN, "x": 1}, 422,
         "validation_failed"),
        ("post", BASE, {"label": 7}, 422, "validation_failed"),
        ("post", BASE, {"label": "x" * 201}, 422, "validation_failed"),
        ("post", BASE, {"label": "new\nline"}, 422, "validation_failed"),
        ("get", f"{BASE}/diff?from={UNKNOWN}", None, 422, "validation_failed"),
        ("get", f"{BASE}/diff?from=HEAD&to={UNKNOWN}", None, 422, "validation_failed"),
        ("get", f"{BASE}/diff?from={UNKNOWN}&to={UNKNOWN}", None, 404, "not_found"),
        ("get", "/v1/repositories/elsewhere/snapshots", None, 404, "repository_unknown"),
        ("get", "/v1/repositories/bad%20name/snapshots", None, 422, "validation_failed"),
    ],
)  # fmt: skip
def test_bad_input_gets_its_code_never_a_500(
    daemon: Daemon, method: str, path: str, body: object, status: int, code: str
) -> None:
    with daemon.operator() as op:
        answer = op.request(method, path, json=body)
    assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text


def test_a_body_that_is_not_json_is_refused(daemon: Daemon) -> None:
    with daemon.operator() as op:
        answer = op.post(BASE, content=b"{not json", headers={"content-type": "application/json"})
    assert (answer.status_code, answer.json()["code"]) == (400, "bad_request")


def test_only_the_operator_may_use_snapshots(daemon: Daemon) -> None:
    with daemon.orchestrator() as orch:
        assert orch.get(BASE).json()["code"] == "forbidden"
        assert orch.post(BASE, json={}).status_code == 403
    with daemon.client() as anonymous:
        assert anonymous.get(BASE).status_code == 401


def test_an_operator_undoes_a_promotion_with_the_snapshot_taken_before_it(
    daemon: Daemon, repo: Path
) -> None:
    identity = daemon.services.registry.by_name("work").identity
    with daemon.operator() as op:
        before = _capture(op, "before promotion")
        files = tree_bytes(repo)
        grant, bundle, receipt = submit(
            daemon, repo, identity, [("src/app.py", b"print('v1')\n", b"print('v2')\n")]
        )
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        after = _capture(op, "after promotion")
        assert after != before
        answer = op.post(f"{BASE}/{before}/restore", json={"expected_current_tree": after})
        assert answer.json()["status"] == "completed"
    assert tree_bytes(repo) == files


def test_the_cli_lists_captures_diffs_and_restores(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    app = typer.Typer()
    snapshot_cmd.register(app)
    token = tmp_path / "operator.token"
    token.write_text(daemon.operator_token)
    common = ["--url", daemon.url, "--token-file", str(token)]
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(app, ["snapshot", *args, *common])
        assert result.exit_code == 0, (result.output, result.exception)
        return result.output

    base = json.loads(run("capture", "work", "--label", "cli", "--json"))["tree"]
    (repo / "README.md").write_bytes(b"# changed\n")
    changed = json.loads(run("capture", "work", "--json"))["tree"]
    listed = json.loads(run("list", "work", "--json"))["snapshots"]
    assert [s["tree"] for s in listed] == [base, changed]
    assert "cli" in run("list", "work")
    assert json.loads(run("diff", "work", base, changed, "--json"))["modified"] == ["README.md"]
    assert "+# changed" in run("diff", "work", base, changed)
    restored = run("restore", "work", base, "--expected-current-tree", changed, "--json")
    assert json.loads(restored)["status"] == "completed"
    assert (repo / "README.md").read_bytes() == b"# project\n"
    stale = runner.invoke(
        app, ["snapshot", "restore", "work", changed, "--expected-current-tree", changed, *common]
    )
    assert stale.exit_code != 0
    assert getattr(stale.exception, "code", None) == "snapshot_stale"


def test_promotion_records_pre_and_post_snapshots_when_enabled(tmp_path: Path) -> None:
    from promoter.config import RepositoryConfig

    repo = init_repo(tmp_path / "snap", {"a.txt": b"1\n"})
    config = RepositoryConfig(path=repo, snapshots=True)
    with running_daemon(tmp_path / "state", {"snap": config}) as daemon:
        identity = daemon.services.registry.by_name("snap").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("a.txt", b"1\n", b"2\n")])
        view = promote(daemon, bundle, receipt).json()
        assert view["status"] == "completed"
        pre, post = view["pre_snapshot"], view["post_snapshot"]
        assert pre and post and pre != post
        with daemon.operator() as op:
            diff = op.get("/v1/repositories/snap/snapshots/diff", params={"from": pre, "to": post})
        assert diff.status_code == 200, diff.text
        assert diff.json()["modified"] == ["a.txt"]
        assert diff.json()["added"] == diff.json()["deleted"] == []


def test_a_restore_whose_write_failed_after_its_rename_is_not_called_refused(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from promoter import faults

    with daemon.operator() as op:
        base = _capture(op, "base")
        (repo / "src" / "app.py").write_bytes(b"print('changed')\n")
        changed = _capture(op, "changed")
        monkeypatch.setenv(faults.ENV, "after_replace=EIO")
        faults.reset()
        answer = op.post(f"{BASE}/{base}/restore", json={"expected_current_tree": changed})
        monkeypatch.delenv(faults.ENV)
        faults.reset()
    assert answer.status_code == 200, answer.text
    # the file was replaced before the error: something was written, so it is not "refused"
    assert answer.json()["status"] == "needs_reconciliation"
    assert (repo / "src" / "app.py").read_bytes() == b"print('v1')\n"


@pytest.mark.parametrize("watched", [True, False], ids=["watched", "full"])
def test_promotion_snapshots_hold_the_users_edits_between_promotions(
    tmp_path: Path, watched: bool
) -> None:
    """Each pre and post snapshot is the tree a full capture gives at that moment.

    The operator's capture is always a full one; nothing changes between it and the
    promotion, so the promotion's pre snapshot must be that same tree, and the capture
    right after the promotion its post snapshot. Between promotions the user edits,
    creates and deletes files that no bundle names.
    """
    from promoter.config import RepositoryConfig

    repo = init_repo(tmp_path / "snap", {"a.txt": b"1\n", "notes/user.txt": b"mine\n"})
    config = RepositoryConfig(path=repo, snapshots=True, snapshot_watch=watched)
    edits = [
        lambda: (repo / "notes" / "user.txt").write_bytes(b"mine, edited\n"),
        lambda: (repo / "notes" / "new" / "draft.txt").parent.mkdir(parents=True),
        lambda: (repo / "notes" / "new" / "draft.txt").write_bytes(b"draft\n"),
        lambda: (repo / "notes" / "user.txt").unlink(),
    ]
    with running_daemon(tmp_path / "state", {"snap": config}) as daemon:
        identity = daemon.services.registry.by_name("snap").identity
        with daemon.operator() as op:
            for round_no, edit in enumerate(edits):
                edit()
                before = op.post("/v1/repositories/snap/snapshots", json={}).json()["tree"]
                target = f"gen/round{round_no}.txt"
                change = [(target, None, b"round %d\n" % round_no)]
                grant_id = f"grt_round{round_no}"
                _, bundle, receipt = submit(
                    daemon, repo, identity, change, grant_id=grant_id, workflow_id=f"wf_{round_no}"
                )
                view = promote(daemon, bundle, receipt).json()
                assert view["status"] == "completed"
                after = op.post("/v1/repositories/snap/snapshots", json={}).json()["tree"]
                assert (view["pre_snapshot"], view["post_snapshot"]) == (before, after)
                diff = op.get(
                    "/v1/repositories/snap/snapshots/diff", params={"from": before, "to": after}
                ).json()
                assert (diff["modified"], diff["added"], diff["deleted"]) == ([], [target], [])
        watches = daemon.services.snapshot_watches
        assert bool(watches) is watched
        assert all(watch.watch.valid for watch in watches.values())


@pytest.mark.parametrize("group_sync", [True, False], ids=["group-sync", "fsync-each"])
def test_a_restore_makes_its_temps_durable_together_whatever_their_number(
    tmp_path: Path, group_sync: bool
) -> None:
    """Two restores of one folder, of 2 and of 8 edited files: where a group sync is
    offered their temps share one ``syncfs`` (the same flushes for both); where it is not,
    each temp is fsynced (6 more, at once), and the folder once either way."""
    counted: list[Counter[str]] = []
    for size in (2, 8):
        files = {f"src/f{i}.txt": b"base %d\n" % i for i in range(size)}
        repo = init_repo(tmp_path / f"work{size}", files)
        # out of reach: a busy machine's dirty pages cannot turn the group path into fsyncs
        settings = {"group_sync": group_sync, "group_sync_max_pending_bytes": 1 << 62}
        with running_daemon(tmp_path / f"state{size}", {"work": repo}, **settings) as daemon:
            with daemon.operator() as op:
                base = _capture(op, "base")
                before_restore = tree_bytes(repo)
                for path in files:
                    (repo / path).write_bytes(b"edited\n")
                edited = _capture(op, "edited")
                before = flush.flushes()
                answer = op.post(f"{BASE}/{base}/restore", json={"expected_current_tree": edited})
                counted.append(flush.flushes() - before)
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "completed"
            assert tree_bytes(repo) == before_restore
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        grouped = group_sync and GroupSync.unsupported(fd) is None
    finally:
        os.close(fd)
    small, large = counted
    assert large - small == (Counter() if grouped else Counter(fsync=6)), (small, large)
    assert small - large == Counter(), (small, large)
