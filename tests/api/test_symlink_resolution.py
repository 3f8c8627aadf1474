"""Symlinks by resolution (protocol: bundles#symlinks-by-resolution, TESTS S4) through the real
daemon.

Under ``symlinks: inside`` each link of these bundles reads as inside on its own; together,
or with the worktree's links, they resolve outside it or into ``.git``. Each is refused
whole with ``symlink_policy``: at verification against the base tree's links, and at
preflight and apply against the disk when the person made the other link after
verification. Nothing is written: the worktree and ``.git`` stay byte-identical. Links
that do stay inside, through other links too, still promote.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from promoter.domain.canonical import canonical_bytes, sha256_hex
from tests.api.test_cli_surface import run_cli
from tests.support.daemon import Daemon
from tests.support.flows import git, make_bundle, make_grant, state, upload
from tests.support.promotion import git_dir_digest, promote, set_lease, tree_bytes


def link(path: str, target: bytes) -> dict[str, Any]:
    return {"path": path, "operation": "create", "old": state(None), "new": state(target, "120000")}


def file(path: str, data: bytes) -> dict[str, Any]:
    return {"path": path, "operation": "create", "old": state(None), "new": state(data)}


def submit(
    daemon: Daemon, repo: Path, identity: str, contents: dict[str, tuple[bytes, str]]
) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Grant (``symlinks: inside``), blobs and bundle of ``path -> (bytes, mode)`` creates."""
    grant = make_grant(repo, identity, grant_id="grt_resolve", symlinks="inside")
    with daemon.orchestrator() as orch:
        answer = orch.post("/v1/grants", json=grant)
        assert answer.status_code in (200, 201), answer.text
    changes = [
        link(path, data) if mode == "120000" else file(path, data)
        for path, (data, mode) in sorted(contents.items())
    ]
    bundle = make_bundle(grant, changes)
    with daemon.executor(grant["executor_run_id"]) as ex:
        upload(ex, *(data for data, _ in contents.values()))
        return grant, bundle, ex.post("/v1/bundles", json=bundle)


def links(**targets: str) -> dict[str, tuple[bytes, str]]:
    return {path.replace("__", "/"): (t.encode(), "120000") for path, t in targets.items()}


def commit_link(repo: Path, path: str, target: str) -> None:
    where = repo / path
    where.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, where)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"link {path}")


def refused_at_verification(answer: Any) -> dict[str, Any]:
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["code"] == "symlink_policy", problem
    checks = {c["name"]: c for c in problem["verification_receipt"]["checks"]}
    assert checks["path_policy"]["status"] == "failed"
    assert problem["failed_checks"] == ["path_policy"]
    return dict(checks["path_policy"])


ESCAPES = {
    # p/q -> .. is the root; p/r -> q/../.. is then one above it
    "two_links_together": (links(p__q="..", p__r="q/../.."), "p/r: resolves outside"),
    # p/o/secret.txt would read outside/secret.txt beside the worktree
    "a_link_through_a_link": (links(p__q="..", p__o="q/../outside"), "p/o: resolves outside"),
    # l2 leads (through l3) to the root, so l2/.. is above it
    "a_chain_of_links": (links(x__l1="l2/..", x__l2="l3", x__l3=".."), "x/l1: resolves outside"),
    "a_loop": (links(l1="l2", l2="l3", l3="l1"), "follows more than 40 links (a loop)"),
}


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_links_that_resolve_outside_together_are_refused_at_verification(
    daemon: Daemon, repo: Path, identity: str, case: str
) -> None:
    contents, reason = ESCAPES[case]
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    _, _, answer = submit(daemon, repo, identity, contents)
    check = refused_at_verification(answer)
    assert reason in check["detail"]
    assert "(symlinks: inside)" in check["detail"]
    assert tree_bytes(repo) == before
    assert git_dir_digest(repo) == git_before
    with daemon.orchestrator() as orch:  # a bundle that fails verification is not stored
        stored = orch.get(f"/v1/bundles/{answer.json()['verification_receipt']['bundle_id']}")
    assert (stored.status_code, stored.json()["code"]) == (404, "bundle_unknown")


def test_a_link_into_dot_git_through_a_committed_link_is_refused(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    commit_link(repo, "hooks", ".git/hooks")  # the person's own link, never checked
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    _, _, answer = submit(daemon, repo, identity, links(src__x="../hooks/pre-commit"))
    check = refused_at_verification(answer)
    assert "src/x: resolves into .git through hooks" in check["detail"]
    assert (tree_bytes(repo), git_dir_digest(repo)) == (before, git_before)


def test_a_link_naming_dot_git_through_a_dot_link_is_refused_by_its_text(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    """``a -> .`` and ``b -> a/.git``: the text itself names .git (the lexical rule)."""
    _, _, answer = submit(daemon, repo, identity, links(a=".", b="a/.git"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "path_invalid"
    assert "b -> 'a/.git': the link target passes through .git" in answer.text


def test_a_committed_link_made_to_escape_by_a_new_link_is_refused(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    commit_link(repo, "d/e", "../p/..")  # the root's parent once p is the root
    before = tree_bytes(repo)
    _, _, answer = submit(daemon, repo, identity, links(p="."))
    check = refused_at_verification(answer)
    assert "d/e: already in the worktree, through p, resolves outside" in check["detail"]
    assert tree_bytes(repo) == before


def test_a_committed_link_and_a_new_link_that_escape_together_are_refused(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    commit_link(repo, "p/q", "..")
    _, _, answer = submit(daemon, repo, identity, links(p__r="q/../.."))
    assert (
        "p/r: resolves outside the worktree through p/q"
        in refused_at_verification(answer)["detail"]
    )


def preflight(daemon: Daemon, bundle: dict[str, Any]) -> dict[str, Any]:
    with daemon.orchestrator() as orch:
        answer = orch.post(f"/v1/bundles/{bundle['bundle_id']}/preflight", json={"fence": 7})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest.mark.parametrize(
    ("made", "contents", "reason"),
    [
        (("p/q", ".."), links(p__r="q/../.."), "p/r: resolves outside the worktree through p/q"),
        (("g", ".git"), links(src__x="../g/config"), "src/x: resolves into .git through g"),
    ],
)
def test_a_link_the_person_made_after_verification_is_seen_at_preflight_and_apply(
    daemon: Daemon,
    repo: Path,
    identity: str,
    made: tuple[str, str],
    contents: dict[str, tuple[bytes, str]],
    reason: str,
) -> None:
    grant, bundle, answer = submit(daemon, repo, identity, contents)
    assert answer.status_code == 201, answer.text  # the base tree has no such link
    receipt = answer.json()["verification_receipt"]
    set_lease(daemon, grant)
    assert preflight(daemon, bundle)["status"] == "passed"
    path, target = made
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, repo / path)  # the person, after verification and preflight
    before, git_before = tree_bytes(repo), git_dir_digest(repo)

    found = preflight(daemon, bundle)
    assert (found["status"], found["code"]) == ("refused", "symlink_policy"), found
    assert reason in found["detail"]

    view = promote(daemon, bundle, receipt).json()
    assert (view["status"], view["code"]) == ("refused", "symlink_policy"), view
    assert reason in view["detail"]
    assert tree_bytes(repo) == before
    assert git_dir_digest(repo) == git_before


LEGIT = {
    "to_a_new_file": {**links(a="b/c"), "b/c": (b"c\n", "100644")},
    "up_and_back_in": {**links(x__y="../src/app.py")},
    "links_to_links": links(l1="l2", l2="src/app.py", src__up=".."),
    "through_a_link_and_up": links(d__l="../e/l2/..", e__l2="../src"),
}


@pytest.mark.parametrize("case", sorted(LEGIT))
def test_links_that_resolve_inside_still_promote(
    daemon: Daemon, repo: Path, identity: str, case: str
) -> None:
    contents = LEGIT[case]
    grant, bundle, answer = submit(daemon, repo, identity, contents)
    assert answer.status_code == 201, answer.text
    receipt = answer.json()["verification_receipt"]
    evidence = {  # what a passed path_policy hashed before resolution existed: unchanged
        "paths": sorted(contents),
        "links": [
            {"path": path, "target": data.decode(), "policy": "inside"}
            for path, (data, mode) in sorted(contents.items())
            if mode == "120000"
        ],
    }
    checks = {c["name"]: c for c in receipt["checks"]}
    assert checks["path_policy"]["evidence_sha256"] == sha256_hex(canonical_bytes(evidence))
    set_lease(daemon, grant)
    assert preflight(daemon, bundle)["status"] == "passed"
    view = promote(daemon, bundle, receipt).json()
    assert view["status"] == "completed", view
    for path, (data, mode) in contents.items():
        if mode == "120000":
            assert os.readlink(repo / path) == data.decode()
        else:
            assert (repo / path).read_bytes() == data


def test_the_cli_preflight_names_the_escape_and_exits_with_its_code(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant, bundle, answer = submit(daemon, repo, identity, links(p__r="q/../.."))
    assert answer.status_code == 201, answer.text
    set_lease(daemon, grant)
    (repo / "p").mkdir()
    os.symlink("..", repo / "p" / "q")  # the person's link, made after verification
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.orchestrator_token}
    refused = run_cli("preflight", bundle["bundle_id"], "--fence", "7", env=env)
    assert refused.returncode == 65, refused.stdout + refused.stderr
    assert "[symlink_policy]" in refused.stderr
    assert "p/r: resolves outside the worktree through p/q" in refused.stderr
    as_json = json.loads(run_cli("preflight", bundle["bundle_id"], "--json", env=env).stdout)
    assert (as_json["status"], as_json["code"]) == ("refused", "symlink_policy")


def test_a_committed_link_retargeted_through_the_new_link_is_seen_at_preflight_and_apply(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    commit_link(repo, "d/e", "../src")
    grant, bundle, answer = submit(daemon, repo, identity, links(p="."))
    assert answer.status_code == 201, answer.text  # d/e reaches no new link in the base tree
    set_lease(daemon, grant)
    os.unlink(repo / "d" / "e")
    os.symlink("../p/..", repo / "d" / "e")  # the person's edit: through p once it exists
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    reason = "d/e: already in the worktree, through p, resolves outside the worktree"
    found = preflight(daemon, bundle)
    assert (found["status"], found["code"]) == ("refused", "symlink_policy"), found
    assert reason in found["detail"]
    view = promote(daemon, bundle, answer.json()["verification_receipt"]).json()
    assert (view["status"], view["code"]) == ("refused", "symlink_policy"), view
    assert (tree_bytes(repo), git_dir_digest(repo)) == (before, git_before)
