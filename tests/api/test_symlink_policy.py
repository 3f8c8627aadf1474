"""The grant's symlink policy through the real daemon: verification, promotion, rollback.

``symlinks: none`` (the default) refuses every link; ``inside`` refuses targets that are
absolute, leave the worktree lexically from the link's directory, pass through ``.git``
or are too long, and reports each with its target text; ``any`` allows what it says.
A promoted link is in the receipt with mode 120000 and is rolled back by the same CAS.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from promoter import faults
from tests.support.daemon import Daemon
from tests.support.flows import git, make_bundle, make_grant, sha, state, upload
from tests.support.promotion import promote, register_grant, set_lease, tree_bytes


def link_change(path: str, target: bytes, old: dict[str, Any] | None = None) -> dict[str, Any]:
    before = old or state(None)
    return {
        "path": path,
        "operation": "modify" if before["exists"] else "create",
        "old": before,
        "new": state(target, "120000"),
    }


def submit_links(
    daemon: Daemon,
    repo: Path,
    identity: str,
    changes: list[dict[str, Any]],
    blobs: list[bytes],
    policy: str | None,
    grant_id: str = "grt_links",
) -> tuple[dict[str, Any], Any]:
    extra = {} if policy is None else {"symlinks": policy}
    grant = register_grant(daemon, repo, identity, grant_id=grant_id, **extra)
    bundle = make_bundle(grant, changes)
    with daemon.executor(grant["executor_run_id"]) as ex:
        upload(ex, *blobs)
        return bundle, ex.post("/v1/bundles", json=bundle)


def path_policy(answer: Any) -> dict[str, Any]:
    receipt = answer.json()["verification_receipt"]
    return next(c for c in receipt["checks"] if c["name"] == "path_policy")


HOSTILE = {
    "dotdot_from_the_top": ("up", b"..", "leaves the worktree"),
    "dotdot_past_the_top": ("src/up", b"../../outside", "leaves the worktree"),
    "etc": ("src/etc", b"/etc", "absolute"),
    "proc_self_root": ("src/root", b"/proc/self/root", "absolute"),
    "absolute": ("src/abs", b"/home/user/.ssh/id_ed25519", "absolute"),
    "through_dot_git": ("src/hooks", b"../.git/hooks", "passes through .git"),
    "through_dot_git_casefolded": ("src/cfg", b"x/../../.GIT/config", "passes through .git"),
    "very_long": ("src/long", b"a/" * 2100, "more than 4095"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_link_targets_fail_path_policy_with_the_target_text(
    daemon: Daemon, repo: Path, identity: str, case: str
) -> None:
    path, target, reason = HOSTILE[case]
    before = tree_bytes(repo)
    _, answer = submit_links(
        daemon, repo, identity, [link_change(path, target)], [target], "inside"
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "path_invalid"
    check = path_policy(answer)
    assert check["status"] == "failed"
    assert f"{path} -> '{target.decode()[:40]}" in check["detail"]
    assert reason in check["detail"]
    assert tree_bytes(repo) == before


def test_the_default_policy_refuses_every_link_even_inside(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    _, answer = submit_links(
        daemon, repo, identity, [link_change("src/l", b"app.py")], [b"app.py"], None
    )
    assert answer.status_code == 422
    assert "symlinks: none" in path_policy(answer)["detail"]


def test_an_explicit_any_policy_allows_an_absolute_target_which_is_never_followed(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"outside\n")
    target = os.fsencode(outside)
    bundle, answer = submit_links(
        daemon, repo, identity, [link_change("src/out", target)], [target], "any"
    )
    assert answer.status_code == 201, answer.text
    grant_fence = 7
    set_lease(daemon, make_grant(repo, identity, grant_id="grt_links", symlinks="any"))
    view = promote(daemon, bundle, answer.json()["verification_receipt"], grant_fence).json()
    assert view["status"] == "completed", view
    assert os.readlink(repo / "src" / "out") == str(outside)
    assert outside.read_bytes() == b"outside\n"


def test_a_promoted_link_is_in_the_receipt_and_rolled_back_by_the_same_cas(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    before = tree_bytes(repo)
    app = (repo / "src" / "app.py").read_bytes()
    changes = [
        link_change("docs/app", b"../src/app.py"),
        {
            "path": "src/app.py",
            "operation": "modify",
            "old": state(app),
            "new": state(b"../README.md", "120000"),
        },
    ]
    bundle, answer = submit_links(
        daemon, repo, identity, changes, [b"../src/app.py", b"../README.md", app], "inside"
    )
    assert answer.status_code == 201, answer.text
    set_lease(daemon, make_grant(repo, identity, grant_id="grt_links", symlinks="inside"))
    view = promote(daemon, bundle, answer.json()["verification_receipt"]).json()
    assert view["status"] == "completed", view
    assert os.readlink(repo / "docs" / "app") == "../src/app.py"
    assert os.readlink(repo / "src" / "app.py") == "../README.md"
    with daemon.orchestrator() as orch:
        receipt = json.loads(orch.get(f"/v1/operations/{view['operation_id']}/receipt").content)
    assert {t["path"]: (t["mode"], t["sha256"]) for t in receipt["targets"]} == {
        "docs/app": ("120000", sha(b"../src/app.py")),
        "src/app.py": ("120000", sha(b"../README.md")),
    }
    with daemon.operator() as op:
        rolled = op.post(f"/v1/operations/{view['operation_id']}/rollback")
    assert rolled.status_code == 200, rolled.text
    assert json.loads(rolled.content)["status"] == "rolled_back"
    assert tree_bytes(repo) == before
    assert not (repo / "src" / "app.py").is_symlink()


def test_a_link_retargeted_by_the_user_before_the_rollback_is_kept(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    bundle, answer = submit_links(
        daemon, repo, identity, [link_change("src/l", b"app.py")], [b"app.py"], "inside"
    )
    set_lease(daemon, make_grant(repo, identity, grant_id="grt_links", symlinks="inside"))
    view = promote(daemon, bundle, answer.json()["verification_receipt"]).json()
    assert view["status"] == "completed", view
    os.unlink(repo / "src" / "l")
    os.symlink("../README.md", repo / "src" / "l")
    with daemon.operator() as op:
        rolled = op.post(f"/v1/operations/{view['operation_id']}/rollback")
    doc = json.loads(rolled.content)
    assert doc["status"] != "rolled_back"
    assert os.readlink(repo / "src" / "l") == "../README.md"


def test_a_link_replaced_by_a_directory_mid_batch_keeps_the_directory(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.symlink("app.py", repo / "src" / "l")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a link")
    changes = [link_change("src/l", b"../README.md", old=state(b"app.py", "120000"))]
    changes.append(link_change("src/m", b"app.py"))
    bundle, answer = submit_links(
        daemon, repo, identity, changes, [b"../README.md", b"app.py"], "inside"
    )
    assert answer.status_code == 201, answer.text
    set_lease(daemon, make_grant(repo, identity, grant_id="grt_links", symlinks="inside"))
    real, swapped = faults.point, []

    def swap(point: str) -> None:
        if point == "before_replace" and not swapped:
            swapped.append(point)
            os.unlink(repo / "src" / "l")
            (repo / "src" / "l").mkdir()
            (repo / "src" / "l" / "user.txt").write_bytes(b"the user's\n")
        real(point)

    monkeypatch.setattr(faults, "point", swap)
    view = promote(daemon, bundle, answer.json()["verification_receipt"]).json()
    assert swapped and (view["status"], view["code"]) == ("needs_reconciliation", "path_unsafe")
    assert (repo / "src" / "l" / "user.txt").read_bytes() == b"the user's\n"
    assert not [p for p in os.listdir(repo / "src") if p.startswith(".promoter-")]
