"""Merging a drifted file away from the worktree (protocol: runs#merges-are-new-bundles) through the
API and the CLI.

A bundle changes a file the person then edits: the promotion is refused (``target_drift``,
zero writes). ``POST /v1/operations/{id}/merge`` (``promoter merge OP``) makes the
three-way merge in promoter's state directory: clean, a new bundle bound to the original
and the three input hashes, held for approval, whose promotion writes the merged bytes
with the person's edit kept; conflicted, the markers are shown and nothing is written;
binary files and symlinks are shown side by side, never merged. Every test hashes the
worktree before and after and asserts exact bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from promoter import faults
from promoter.cli import merge_cmd, review_cmd
from promoter.client.aio import AsyncPromoterClient
from promoter.client.sync import PromoterClient
from promoter.domain.documents import seal_bundle
from promoter.engine.intake.bundles import submit_bundle
from promoter.engine.operation.merge import MAX_MERGE_BYTES
from promoter.errors import MergeConflict, MergeUnsupported, VerificationFailed
from tests.gitutil import git
from tests.support.daemon import Daemon
from tests.support.flows import make_bundle, sha, state, upload
from tests.support.pause import Pause
from tests.support.promotion import git_dir_digest, promote, submit, tree_bytes

BASE = b"".join(b"line %d\n" % n for n in range(1, 13))
AGENT = BASE.replace(b"line 2\n", b"line 2 by the agent\n")
PERSON = BASE.replace(b"line 11\n", b"line 11 by the person\n")
MERGED = BASE.replace(b"line 2\n", b"line 2 by the agent\n").replace(
    b"line 11\n", b"line 11 by the person\n"
)
CLASH = BASE.replace(b"line 2\n", b"line 2 by the person\n")
EXTRA = b"a new file of the agent\n"
CHANGES: list[Any] = [("src/app.py", BASE, AGENT), ("src/extra.py", None, EXTRA)]


pytestmark = pytest.mark.repo(files={"README.md": b"# project\n", "src/app.py": BASE})


def _identity(daemon: Daemon) -> str:
    return daemon.services.registry.by_name("work").identity


def _drifted(daemon: Daemon, repo: Path, person: bytes, changes: list[Any] = CHANGES) -> str:
    """Submit the bundle, let the person write ``person`` over src/app.py, promote: refused."""
    _, bundle, receipt = submit(daemon, repo, _identity(daemon), changes)
    (repo / "src" / "app.py").write_bytes(person)
    answer = promote(daemon, bundle, receipt)
    view = answer.json()
    assert (view["status"], view["code"]) == ("refused", "target_drift"), answer.text
    return str(view["operation_id"])


def _merge(daemon: Daemon, operation_id: str, token: str | None = None) -> Any:
    with daemon.client(token or daemon.operator_token) as client:
        return client.post(f"/v1/operations/{operation_id}/merge")


def _worktree(repo: Path) -> tuple[Any, Any]:
    return tree_bytes(repo), git_dir_digest(repo)


def _cli(daemon: Daemon, tmp_path: Path, module: Any, *args: str) -> Any:
    app = typer.Typer()
    app.command("_")(lambda: None)
    module.register(app)
    token = tmp_path / "operator.token"
    token.write_text(daemon.operator_token)
    return CliRunner().invoke(app, [*args, "--url", daemon.url, "--token-file", str(token)])


def test_clean_merge_of_a_drifted_file_promotes_the_merged_bytes_keeping_the_persons_edit(
    daemon: Daemon, repo: Path
) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    before = _worktree(repo)
    answer = _merge(daemon, operation_id)
    assert answer.status_code == 201, answer.text
    result = answer.json()
    assert _worktree(repo) == before  # the merge wrote nothing into the worktree
    [path] = result["paths"]
    assert (path["path"], path["result"]) == ("src/app.py", "clean")
    assert (path["old"]["sha256"], path["current"]["sha256"], path["new"]["sha256"]) == (
        sha(BASE),
        sha(PERSON),
        sha(AGENT),
    )
    held = result["promotion"]
    assert held["status"] == "awaiting_approval"  # never promoted without a person
    with daemon.orchestrator() as orch:
        bundle = orch.get(f"/v1/bundles/{result['bundle_id']}").json()
    assert bundle["merge"] == {
        "bundle_id": result["merged_from"],
        "bundle_sha256": bundle["merge"]["bundle_sha256"],
        "paths": [
            {
                "path": "src/app.py",
                "old_sha256": sha(BASE),
                "current_sha256": sha(PERSON),
                "new_sha256": sha(AGENT),
            }
        ],
    }
    changes = {c["path"]: c for c in bundle["changes"]}
    assert (changes["src/app.py"]["old"]["sha256"], changes["src/app.py"]["new"]["sha256"]) == (
        sha(PERSON),
        sha(MERGED),
    )
    assert changes["src/extra.py"]["new"]["sha256"] == sha(EXTRA)  # carried over as it was
    # the same merge again makes the same bundle and the same held operation
    again = _merge(daemon, operation_id)
    assert again.status_code == 201, again.text
    assert again.json()["bundle_id"] == result["bundle_id"]
    assert again.json()["promotion"]["operation_id"] == held["operation_id"]
    with daemon.operator() as op:
        approved = op.post(f"/v1/operations/{held['operation_id']}/approve", json={"wait": True})
    assert approved.json()["status"] == "completed", approved.text
    assert (repo / "src" / "app.py").read_bytes() == MERGED
    assert (repo / "src" / "extra.py").read_bytes() == EXTRA
    with daemon.orchestrator() as orch:
        receipt = orch.get(f"/v1/operations/{held['operation_id']}/receipt").json()
    assert receipt["bundle_id"] == result["bundle_id"]
    assert {t["path"]: t["sha256"] for t in receipt["targets"]} == {
        "src/app.py": sha(MERGED),
        "src/extra.py": sha(EXTRA),
    }


def _async_merge(daemon: Daemon, operation_id: str) -> dict[str, Any]:
    async def merge() -> dict[str, Any]:
        async with AsyncPromoterClient(daemon.url, daemon.operator_token) as op:
            merged = await op.merge(operation_id)  # the answer's members, as they came
            return merged.model_dump(mode="json", exclude_unset=True)

    return asyncio.run(merge())


def test_async_client_merge_answers_as_the_sync_client(daemon: Daemon, repo: Path) -> None:
    clean = _drifted(daemon, repo, PERSON)
    result = _async_merge(daemon, clean)
    with PromoterClient(daemon.url, daemon.operator_token) as op:
        assert op.merge(clean) == result  # the same inputs make the same bundle and hold
    assert result["promotion"]["status"] == "awaiting_approval"
    assert [(p["path"], p["result"]) for p in result["paths"]] == [("src/app.py", "clean")]


def test_async_client_merge_raises_the_conflict_with_its_paths(daemon: Daemon, repo: Path) -> None:
    clashing = _drifted(daemon, repo, CLASH)
    before = _worktree(repo)
    with pytest.raises(MergeConflict) as raised:
        _async_merge(daemon, clashing)
    [path] = raised.value.context["paths"]
    assert (path["path"], path["result"], path["conflicts"]) == ("src/app.py", "conflict", 1)
    assert _worktree(repo) == before


def test_ops_show_of_a_drifted_promotion_names_the_merge_made_of_it(
    daemon: Daemon, repo: Path
) -> None:
    from promoter.cli.main import app

    operation_id = _drifted(daemon, repo, PERSON)
    result = _merge(daemon, operation_id).json()
    assert _merge(daemon, operation_id).json() == result  # made again: the same, named once
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token, "COLUMNS": "200"}
    shown = CliRunner().invoke(app, ["ops", "show", operation_id], env=env)
    assert shown.exit_code == 0, shown.output
    assert (
        f"  merged by operator (operator) into bundle {result['bundle_id']}\n"
        "    merged paths: src/app.py\n"
    ) in shown.stdout
    held = result["promotion"]["operation_id"]
    assert shown.stdout.endswith(
        f"next: merged: operation {held} (awaiting_approval): `promoter ops show {held}`\n"
    )
    assert "promoter merge" not in shown.stdout
    with daemon.operator() as op:
        approved = op.post(f"/v1/operations/{held}/approve", json={"wait": True})
    assert approved.json()["status"] == "completed", approved.text
    shown = CliRunner().invoke(app, ["ops", "show", operation_id, "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    view = json.loads(shown.stdout)
    assert view["merged_into"] == [
        {
            "operation_id": held,
            "bundle_id": result["bundle_id"],
            "status": "completed",
            "code": None,
        }
    ]
    shown = CliRunner().invoke(app, ["ops", "show", operation_id], env=env)
    assert shown.stdout.endswith(
        f"next: merged: operation {held} (completed): `promoter ops show {held}`\n"
    )
    # the merged operation's own view lists nothing merged from it
    with daemon.operator() as op:
        assert op.get(f"/v1/operations/{held}").json()["merged_into"] == []


def test_conflicted_merge_writes_nothing_and_shows_the_conflict(daemon: Daemon, repo: Path) -> None:
    operation_id = _drifted(daemon, repo, CLASH)
    before = _worktree(repo)
    answer = _merge(daemon, operation_id)
    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert problem["code"] == "merge_conflict"
    [path] = problem["paths"]
    assert (path["path"], path["result"], path["conflicts"]) == ("src/app.py", "conflict", 1)
    assert path["merged_text"] == (
        "line 1\n<<<<<<< yours\nline 2 by the person\n=======\nline 2 by the agent\n"
        ">>>>>>> agent\n" + "".join(f"line {n}\n" for n in range(3, 13))
    )
    assert _worktree(repo) == before
    with daemon.operator() as op:
        held = op.get("/v1/operations", params={"status": "awaiting_approval"}).json()
    assert held["operations"] == []  # no bundle, nothing held


def test_a_file_that_moves_again_after_the_merge_is_refused(daemon: Daemon, repo: Path) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    result = _merge(daemon, operation_id).json()
    later = PERSON + b"one more line by the person\n"
    (repo / "src" / "app.py").write_bytes(later)
    before = _worktree(repo)
    with daemon.operator() as op:
        held = result["promotion"]["operation_id"]
        answer = op.post(f"/v1/operations/{held}/approve", json={"wait": True})
    view = answer.json()
    assert (view["status"], view["code"]) == ("refused", "target_drift"), answer.text
    assert view["steps"] == []
    assert _worktree(repo) == before
    assert (repo / "src" / "app.py").read_bytes() == later
    # merged afresh from the original: the newest edit is kept too
    again = _merge(daemon, held)
    assert again.status_code == 201, again.text
    assert again.json()["merged_from"] == result["merged_from"]
    assert again.json()["paths"][0]["current"]["sha256"] == sha(later)


def test_binary_file_is_not_merged_but_shown_side_by_side(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    old, new, mine = b"\x00\x01bin\n", b"\x00\x02bin\n", b"\x00\x03bin\n"
    (repo / "src" / "app.py").write_bytes(old)
    work_commit(repo)
    operation_id = _drifted(daemon, repo, mine, [("src/app.py", old, new)])
    before = _worktree(repo)
    answer = _merge(daemon, operation_id)
    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert problem["code"] == "merge_unsupported"
    [path] = problem["paths"]
    assert path["reason"] == "binary: a side holds a NUL byte"
    assert path["old"] == {"sha256": sha(old), "mode": "100644", "bytes": len(old)}
    assert path["current"] == {"kind": "file", "sha256": sha(mine), "mode": "100644", "bytes": 6}
    assert path["new"] == {"sha256": sha(new), "mode": "100644", "bytes": len(new)}
    assert "merged_text" not in path
    assert _worktree(repo) == before
    shown = _cli(daemon, tmp_path, merge_cmd, "merge", operation_id)
    assert isinstance(shown.exception, MergeUnsupported), shown.output
    assert shown.exception.exit_code == 75
    assert "merge_unsupported" in shown.output
    assert f"current={sha(mine)[:12]} 100644 6 bytes" in shown.output


def work_commit(repo: Path) -> None:
    git(repo, "commit", "-q", "-am", "binary")


def test_symlink_planted_at_the_drifted_path_is_never_followed(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(PERSON)  # text a merge would take, were the link followed
    _, bundle, receipt = submit(daemon, repo, _identity(daemon), CHANGES)
    (repo / "src" / "app.py").unlink()
    (repo / "src" / "app.py").symlink_to(outside)
    operation_id = promote(daemon, bundle, receipt).json()["operation_id"]
    before = _worktree(repo)
    answer = _merge(daemon, operation_id)
    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert problem["code"] == "merge_unsupported"
    [path] = problem["paths"]
    assert path["current"]["kind"] == "symlink"
    assert path["current"]["sha256"] == sha(str(outside).encode())  # the link's text, unread
    assert path["reason"] == "the worktree holds a symlink at this path, not a file"
    assert outside.read_bytes() == PERSON
    assert _worktree(repo) == before


def test_huge_current_file_is_refused_without_being_read_into_memory(
    daemon: Daemon, repo: Path
) -> None:
    huge = b"x" * 1023 + b"\n"
    size = (MAX_MERGE_BYTES // len(huge) + 1) * len(huge)
    _, bundle, receipt = submit(daemon, repo, _identity(daemon), CHANGES)
    with (repo / "src" / "app.py").open("wb") as handle:
        for _ in range(size // len(huge)):
            handle.write(huge)
    operation_id = promote(daemon, bundle, receipt).json()["operation_id"]
    digest = hashlib.sha256((repo / "src" / "app.py").read_bytes()).hexdigest()
    before = _worktree(repo)
    answer = _merge(daemon, operation_id)
    assert answer.status_code == 409, answer.text
    [path] = answer.json()["paths"]
    assert answer.json()["code"] == "merge_unsupported"
    assert path["reason"] == f"a side is larger than the merge limit of {MAX_MERGE_BYTES} bytes"
    assert (path["current"]["bytes"], path["current"]["sha256"]) == (size, digest)
    assert _worktree(repo) == before


def test_hostile_filename_is_merged_as_data_never_as_an_argument(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    name = "src/-p --diff3 $(touch pwned) ;.py"
    (repo / name).write_bytes(BASE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "hostile name")
    operation_id = _drifted_at(daemon, repo, name)
    answer = _merge(daemon, operation_id)
    assert answer.status_code == 201, answer.text
    assert [p["path"] for p in answer.json()["paths"]] == [name]
    assert not (repo / "pwned").exists() and not (tmp_path / "pwned").exists()
    assert not any(p.name == "pwned" for p in daemon.state_dir.rglob("*"))
    held = answer.json()["promotion"]["operation_id"]
    with daemon.operator() as op:
        done = op.post(f"/v1/operations/{held}/approve", json={"wait": True})
    assert done.json()["status"] == "completed", done.text
    assert (repo / name).read_bytes() == MERGED


def _drifted_at(daemon: Daemon, repo: Path, name: str) -> str:
    _, bundle, receipt = submit(daemon, repo, _identity(daemon), [(name, BASE, AGENT)])
    (repo / name).write_bytes(PERSON)
    view = promote(daemon, bundle, receipt).json()
    assert view["code"] == "target_drift"
    return str(view["operation_id"])


@pytest.mark.parametrize("role", ["executor", "orchestrator"])
def test_only_the_operator_may_merge(daemon: Daemon, repo: Path, role: str) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    before = _worktree(repo)
    if role == "executor":
        with daemon.executor("run_1") as ex:
            answer = ex.post(f"/v1/operations/{operation_id}/merge")
    else:
        answer = _merge(daemon, operation_id, daemon.orchestrator_token)
    assert answer.status_code == 403, answer.text
    assert answer.json()["code"] == "forbidden"
    assert _worktree(repo) == before
    with daemon.operator() as op:
        held = op.get("/v1/operations", params={"status": "awaiting_approval"}).json()
    assert held["operations"] == []


def test_executor_cannot_submit_a_bundle_claiming_to_be_a_merge(daemon: Daemon, repo: Path) -> None:
    grant, bundle, _ = submit(daemon, repo, _identity(daemon), CHANGES)
    claimed: list[tuple[str, bytes | None, bytes | None]] = [("src/app.py", PERSON, AGENT)]
    forged = make_bundle(
        grant,
        claimed,
        merge={
            "bundle_id": bundle["bundle_id"],
            "bundle_sha256": bundle["bundle_sha256"],
            "paths": [
                {
                    "path": "src/app.py",
                    "old_sha256": sha(BASE),
                    "current_sha256": sha(PERSON),
                    "new_sha256": sha(AGENT),
                }
            ],
        },
    )
    with daemon.executor("run_1") as ex:
        upload(ex, PERSON)
        answer = ex.post("/v1/bundles", json=forged)
    assert answer.status_code == 403, answer.text
    assert answer.json()["code"] == "forbidden"


def test_merge_of_an_operation_that_did_not_drift_is_refused(daemon: Daemon, repo: Path) -> None:
    _, bundle, receipt = submit(daemon, repo, _identity(daemon), CHANGES)
    view = promote(daemon, bundle, receipt).json()
    assert view["status"] == "completed"
    answer = _merge(daemon, view["operation_id"])
    assert answer.status_code == 409, answer.text
    assert answer.json()["code"] == "operation_conflict"


def test_cli_merge_then_approve_promotes_the_merged_bytes(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    merged = _cli(daemon, tmp_path, merge_cmd, "merge", operation_id, "--json")
    assert merged.exit_code == 0, merged.output
    held = json.loads(merged.output)["promotion"]["operation_id"]
    approved = _cli(daemon, tmp_path, review_cmd, "approve", held)
    assert approved.exit_code == 0, approved.output
    assert (repo / "src" / "app.py").read_bytes() == MERGED


def test_cli_merge_shows_the_conflict_and_writes_nothing(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    operation_id = _drifted(daemon, repo, CLASH)
    before = _worktree(repo)
    shown = _cli(daemon, tmp_path, merge_cmd, "merge", operation_id)
    assert isinstance(shown.exception, MergeConflict), shown.output
    assert "merge_conflict" in shown.output
    assert "<<<<<<< yours\nline 2 by the person\n=======\nline 2 by the agent\n>>>>>>> agent\n" in (
        shown.output
    )
    assert _worktree(repo) == before


def _forged(document: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The merged bundle ``document`` with fields replaced, sealed again."""
    forged = {k: v for k, v in document.items() if k not in ("bundle_id", "bundle_sha256")}
    forged.update(changes)
    forged["change_count"] = len(forged["changes"])
    forged["total_bytes"] = sum(c["new"]["bytes"] or 0 for c in forged["changes"])
    return seal_bundle(forged)


@pytest.mark.parametrize("attack", ["smuggled_path", "carried_change_altered", "old_not_bound"])
def test_merged_bundle_that_breaks_its_binding_is_refused_even_from_the_host(
    daemon: Daemon, repo: Path, attack: str
) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    result = _merge(daemon, operation_id).json()
    with daemon.orchestrator() as orch:
        document = orch.get(f"/v1/bundles/{result['bundle_id']}").json()
    changes = {c["path"]: c for c in document["changes"]}
    other = b"not the person's bytes\n"
    daemon.services.blobs.put(sha(other), other)
    if attack == "smuggled_path":
        extra = {
            "path": "src/zz.py",
            "operation": "create",
            "old": state(None),
            "new": state(other),
        }
        forged = _forged(document, changes=[*document["changes"], extra])
    elif attack == "carried_change_altered":
        changes["src/extra.py"] = {**changes["src/extra.py"], "new": state(other)}
        forged = _forged(document, changes=[changes["src/app.py"], changes["src/extra.py"]])
    else:
        changes["src/app.py"] = {**changes["src/app.py"], "old": state(other)}
        forged = _forged(document, changes=[changes["src/app.py"], changes["src/extra.py"]])
    before = _worktree(repo)
    with pytest.raises(VerificationFailed, match="the merge binding does not hold"):
        submit_bundle(daemon.services, forged, run_id=None, host_made=True)
    assert daemon.services.audit.get("bundle", forged["bundle_id"]) is None
    assert _worktree(repo) == before


def test_save_landing_while_the_merge_runs_is_never_overwritten(
    daemon: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    pause = Pause(tmp_path, "merge_inputs_read")
    monkeypatch.setenv(faults.ENV, pause.spec)
    faults.reset()  # hit counts are per process: an earlier test's hit is not this one's
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(_merge(daemon, operation_id)))
    thread.start()
    pause.reached()  # the merge read the person's bytes and has not merged yet
    newest = PERSON + b"saved while the merge ran\n"
    (repo / "src" / "app.py").write_bytes(newest)
    pause.release()
    thread.join(120)
    monkeypatch.delenv(faults.ENV)
    [answer] = answers
    assert answer.status_code == 201, answer.text
    assert answer.json()["paths"][0]["current"]["sha256"] == sha(PERSON)  # what it read
    held = answer.json()["promotion"]["operation_id"]
    with daemon.operator() as op:
        view = op.post(f"/v1/operations/{held}/approve", json={"wait": True}).json()
    assert (view["status"], view["code"], view["steps"]) == ("refused", "target_drift", [])
    assert (repo / "src" / "app.py").read_bytes() == newest
    assert not (repo / "src" / "extra.py").exists()


def test_persons_execute_bit_is_kept_through_the_merge(daemon: Daemon, repo: Path) -> None:
    _, bundle, receipt = submit(daemon, repo, _identity(daemon), CHANGES)
    (repo / "src" / "app.py").chmod(0o755)  # the person's only change: the mode
    view = promote(daemon, bundle, receipt).json()
    assert view["code"] == "target_drift"
    answer = _merge(daemon, view["operation_id"])
    assert answer.status_code == 201, answer.text
    held = answer.json()["promotion"]["operation_id"]
    with daemon.operator() as op:
        done = op.post(f"/v1/operations/{held}/approve", json={"wait": True}).json()
    assert done["status"] == "completed"
    assert (repo / "src" / "app.py").read_bytes() == AGENT
    assert (repo / "src" / "app.py").stat().st_mode & 0o777 == 0o755


def test_a_name_that_is_not_utf8_is_read_and_written_under_its_exact_bytes(
    daemon: Daemon, repo: Path
) -> None:
    disk, wire = b"src/caf\xe9.py", "src/caf\\xe9.py"  # Latin-1 on disk, wire form in JSON
    at = os.path.join(os.fsencode(repo), disk)
    with open(at, "wb") as out:
        out.write(BASE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a Latin-1 name")
    _, bundle, receipt = submit(daemon, repo, _identity(daemon), [(wire, BASE, AGENT)])
    with open(at, "wb") as out:
        out.write(PERSON)
    view = promote(daemon, bundle, receipt).json()
    assert view["code"] == "target_drift"
    answer = _merge(daemon, view["operation_id"])
    assert answer.status_code == 201, answer.text
    assert [p["path"] for p in answer.json()["paths"]] == [wire]
    held = answer.json()["promotion"]["operation_id"]
    with daemon.operator() as op:
        done = op.post(f"/v1/operations/{held}/approve", json={"wait": True}).json()
    assert done["status"] == "completed", done
    with open(at, "rb") as src:
        assert src.read() == MERGED


def test_a_staged_edit_is_refused_with_how_to_unstage_it(daemon: Daemon, repo: Path) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    git(repo, "add", "src/app.py")
    before = _worktree(repo)
    answer = _merge(daemon, operation_id)
    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert (problem["code"], problem["staged"], problem["paths"]) == (
        "merge_unsupported",
        ["src/app.py"],
        [],
    )
    assert "git restore --staged" in problem["detail"]
    assert _worktree(repo) == before
    git(repo, "restore", "--staged", "src/app.py")
    assert _merge(daemon, operation_id).status_code == 201


def test_head_moved_is_refused_since_the_grant_cannot_hold(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    git(repo, "commit", "-q", "-am", "the person commits their edit")
    answer = _merge(daemon, operation_id)
    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert problem["code"] == "merge_unsupported"
    head = problem["repository"]["head"]
    assert head["ok"] is False
    shown = _cli(daemon, tmp_path, merge_cmd, "merge", operation_id)
    assert isinstance(shown.exception, MergeUnsupported), shown.output
    assert f"  head: expected {head['expected']}, now {head['actual']}\n" in shown.stdout
    assert (repo / "src" / "app.py").read_bytes() == PERSON


def test_ops_show_of_a_drifted_promotion_names_the_merge_as_the_next_step(
    daemon: Daemon, repo: Path
) -> None:
    from promoter.cli.main import app

    operation_id = _drifted(daemon, repo, PERSON)
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token, "COLUMNS": "400"}
    shown = CliRunner().invoke(app, ["ops", "show", operation_id], env=env)
    assert shown.exit_code == 0, shown.output
    assert (
        f"  drift src/app.py: expected {sha(BASE)[:12]} 100644, found {sha(PERSON)[:12]} 100644"
    ) in shown.stdout
    assert f"`promoter merge {operation_id}`" in shown.stdout
    assert "request the promotion again" not in shown.stdout
