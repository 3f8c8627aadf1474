"""The executor's bundle builder (protocol: bundles#bundle, snapshots#executor-side-shadow): exact
states, local refusals, no writes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from promoter.client.sync import PromoterClient
from promoter.domain.documents import grant_sha256, sealed_grant
from promoter.domain.models import GrantV1, PatchBundleV1
from promoter.errors import PathInvalid, PathUnsafe, PromoterError, VerificationFailed
from promoter.executor import build_bundle, upload_and_submit, upload_missing
from promoter.executor.handover import grant_from_file
from tests.gitutil import commit_all, git, tree_digest
from tests.support.daemon import Daemon
from tests.support.flows import jcs_sha, make_grant, sha, state

IDENTITY = "repo_" + "0" * 32
CRLF = b"first\r\nsecond\r\n"
BINARY = bytes(range(256)) * 4 + b"\x00\r\n\x00"

BASE_FILES: dict[str, tuple[bytes, int]] = {
    "README.md": (b"# project\n", 0o644),
    ".gitignore": (b"*.log\nbuild/\n", 0o644),
    "src/app.py": (b"print('v1')\n", 0o644),
    "src/gone.txt": (b"to be deleted\n", 0o644),
    "bin/tool": (b"#!/bin/sh\necho tool\n", 0o755),
    "scripts/run.sh": (b"#!/bin/sh\necho run\n", 0o644),
}


def _write(root: Path, files: dict[str, tuple[bytes, int]]) -> None:
    for rel, (data, mode) in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        os.chmod(target, mode)


def _source(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    _write(path, BASE_FILES)
    commit_all(path, "base")
    return path


def _clone(source: Path, dest: Path) -> Path:
    git(dest.parent, "clone", "-q", str(source), str(dest))
    return dest


def _grant(source: Path, **overrides: Any) -> GrantV1:
    return sealed_grant(GrantV1.model_validate(make_grant(source, IDENTITY, **overrides)))


def _git_dir_files(repo: Path) -> dict[str, str]:
    git_dir = repo / ".git"
    return {
        p.relative_to(git_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(git_dir.rglob("*"))
        if p.is_file()
    }


def _change(path: str, operation: str, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return {"path": path, "operation": operation, "old": old, "new": new}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return _source(tmp_path / "source")


@pytest.fixture
def executor(tmp_path: Path, source: Path) -> Path:
    return _clone(source, tmp_path / "executor")


def test_every_kind_of_change_is_sealed_with_exact_states(source: Path, executor: Path) -> None:
    (executor / "src/new/deep/er").mkdir(parents=True)
    (executor / "src/new/deep/er/mod.py").write_bytes(b"x = 1\n")
    (executor / "src/app.py").write_bytes(b"print('v2')\n")
    (executor / "src/gone.txt").unlink()
    os.chmod(executor / "scripts/run.sh", 0o755)
    (executor / "bin/tool").write_bytes(b"#!/bin/sh\necho tool v2\n")
    os.chmod(executor / "bin/tool", 0o644)  # exec bit cleared and content changed
    (executor / "data").mkdir()
    (executor / "data/blob.bin").write_bytes(BINARY)
    (executor / "data/crlf.txt").write_bytes(CRLF)
    (executor / "data/empty").write_bytes(b"")
    (executor / "notes.txt").write_bytes(b"untracked, not ignored\n")
    (executor / "debug.log").write_bytes(b"ignored by pattern\n")
    (executor / "build").mkdir()
    (executor / "build/out.o").write_bytes(b"ignored directory\n")
    grant = _grant(source)

    with build_bundle(executor, grant, created_at="2026-01-02T03:04:05Z") as built:
        bundle = built.bundle
        blobs = {digest: built.read_blob(digest) for digest in built.blobs}

    base = {rel: data for rel, (data, _) in BASE_FILES.items()}
    expected = [
        _change(
            "bin/tool",
            "modify",
            state(base["bin/tool"], "100755"),
            state(b"#!/bin/sh\necho tool v2\n"),
        ),
        _change("data/blob.bin", "create", state(None), state(BINARY)),
        _change("data/crlf.txt", "create", state(None), state(CRLF)),
        _change("data/empty", "create", state(None), state(b"")),
        _change("notes.txt", "create", state(None), state(b"untracked, not ignored\n")),
        _change(
            "scripts/run.sh",
            "modify",
            state(base["scripts/run.sh"]),
            state(base["scripts/run.sh"], "100755"),
        ),
        _change("src/app.py", "modify", state(base["src/app.py"]), state(b"print('v2')\n")),
        _change("src/gone.txt", "delete", state(base["src/gone.txt"]), state(None)),
        _change("src/new/deep/er/mod.py", "create", state(None), state(b"x = 1\n")),
    ]
    assert bundle["changes"] == expected
    assert bundle["change_count"] == 9
    assert bundle["total_bytes"] == sum(c["new"]["bytes"] for c in expected if c["new"]["exists"])
    assert bundle["grant_sha256"] == jcs_sha(
        {k: v for k, v in grant.wire().items() if k != "grant_sha256"}
    )
    digest = jcs_sha({k: v for k, v in bundle.items() if k not in ("bundle_id", "bundle_sha256")})
    assert (bundle["bundle_sha256"], bundle["bundle_id"]) == (digest, "bnd_" + digest[:32])
    assert bundle["created_at"] == "2026-01-02T03:04:05Z"
    PatchBundleV1.model_validate(bundle)
    referenced = {
        s[k]["sha256"]: s[k]["bytes"] for s in expected for k in ("old", "new") if s[k]["exists"]
    }
    assert {d: len(data) for d, data in blobs.items()} == referenced
    assert all(sha(data) == d for d, data in blobs.items())


def test_executor_git_dir_and_worktree_are_byte_identical_after_build(
    source: Path, executor: Path
) -> None:
    (executor / "src/app.py").write_bytes(b"changed\n")
    (executor / "new.txt").write_bytes(b"new\n")
    files_before = _git_dir_files(executor)
    digest_before = tree_digest(executor)

    with build_bundle(executor, _grant(source)) as built:
        assert [c["path"] for c in built.bundle["changes"]] == ["new.txt", "src/app.py"]

    assert _git_dir_files(executor) == files_before
    assert tree_digest(executor) == digest_before  # modes and mtimes too, .git included


def test_no_changes_make_an_empty_bundle(source: Path, executor: Path) -> None:
    (executor / "debug.log").write_bytes(b"ignored\n")
    with build_bundle(executor, _grant(source)) as built:
        assert (built.bundle["changes"], built.bundle["change_count"]) == ([], 0)
        assert built.blobs == {}


def test_changes_already_committed_in_the_clone_are_still_found(
    source: Path, executor: Path
) -> None:
    (executor / "src/app.py").write_bytes(b"committed by the executor\n")
    commit_all(executor, "executor's own commit")
    with build_bundle(executor, _grant(source)) as built:
        assert [c["path"] for c in built.bundle["changes"]] == ["src/app.py"]


def test_tampered_grant_sha256_is_refused(source: Path, executor: Path) -> None:
    grant = _grant(source).model_copy(update={"grant_sha256": "0" * 64})
    with pytest.raises(PromoterError) as caught:
        build_bundle(executor, grant)
    assert caught.value.code == "grant_invalid"


def test_base_tree_missing_from_the_clone_is_a_clear_error(source: Path, executor: Path) -> None:
    grant = _grant(source).model_copy(update={"base_tree": "1" * 40, "grant_sha256": None})
    with pytest.raises(PromoterError, match="does not hold the grant's base_tree") as caught:
        build_bundle(executor, grant)
    assert caught.value.code == "repository_invalid"


def test_a_name_that_is_not_utf8_is_built_under_its_wire_form(source: Path, executor: Path) -> None:
    (executor / os.fsdecode(b"src/bad\xff.txt")).write_bytes(b"x\n")
    (executor / os.fsdecode(b"src/back\\slash.txt")).write_bytes(b"y\n")
    with build_bundle(executor, _grant(source)) as built:
        paths = [c["path"] for c in built.bundle["changes"]]
    assert paths == ["src/back\\\\slash.txt", "src/bad\\xff.txt"]


def test_a_name_not_nfc_is_refused_with_a_printable_message_beside_a_byte_name(
    source: Path, executor: Path
) -> None:
    (executor / os.fsdecode(b"src/bad\xff.txt")).write_bytes(b"x\n")
    (executor / "src/caf\u0065\u0301.txt").write_bytes(b"not NFC\n")
    (executor / os.fsdecode(b"src/cafe\xcc\x81\xff.txt")).write_bytes(b"not UTF-8: no NFC\n")
    with pytest.raises(PathInvalid) as caught:
        build_bundle(executor, _grant(source))
    assert [item["path"] for item in caught.value.context["paths"]] == ["src/cafe\u0301.txt"]
    assert [item["reason"] for item in caught.value.context["paths"]] == [
        "path is not NFC-normalized",
    ]
    caught.value.detail.encode("utf-8")
    json.dumps(caught.value.to_problem(), ensure_ascii=False).encode("utf-8")


def test_grant_file_round_trips(tmp_path: Path, source: Path) -> None:
    grant = _grant(source)
    path = tmp_path / "grant.json"
    path.write_text(grant.model_dump_json(by_alias=True))
    read = grant_from_file(path)
    assert read.wire() == grant.wire()
    assert grant_sha256(read) == grant_sha256(grant) == grant.grant_sha256


# --- refusals before anything is uploaded, through a real daemon -------------------------


def _break_symlink(work: Path, executor: Path) -> None:
    os.symlink("app.py", executor / "src/link")


def _break_symlink_replacing_file(work: Path, executor: Path) -> None:
    (executor / "src/app.py").unlink()
    os.symlink("/etc/passwd", executor / "src/app.py")


def _break_gitlink(work: Path, executor: Path) -> None:
    (executor / "vendor/lib").rmdir()


def _break_file_under_gitlink(work: Path, executor: Path) -> None:
    (executor / "vendor/lib/x.txt").write_bytes(b"inside a submodule\n")


def _break_nested_repository(work: Path, executor: Path) -> None:
    nested = executor / "src/nested"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "file.txt").write_bytes(b"in a nested repository\n")


def _break_control_character(work: Path, executor: Path) -> None:
    # a backslash is a byte like any other (protocol: documents#byte-paths); a control character is
    # not
    (executor / "src/a\x1bb.txt").write_bytes(b"an escape character in the name\n")


def _break_case_collision(work: Path, executor: Path) -> None:
    (executor / "src/App.py").write_bytes(b"collides with src/app.py under case-folding\n")
    (executor / "src/app.py").write_bytes(b"and that one is modified\n")


def _break_allowlist(work: Path, executor: Path) -> None:
    (executor / "README.md").write_bytes(b"# outside the allowlist\n")
    (executor / "docs").mkdir()
    (executor / "docs/new.md").write_bytes(b"also outside\n")
    (executor / "src/app.py").write_bytes(b"inside the allowlist\n")


REFUSALS = [
    (_break_symlink, PathUnsafe, ["src/link"]),
    (_break_symlink_replacing_file, PathUnsafe, ["src/app.py"]),
    (_break_gitlink, PathUnsafe, ["vendor/lib"]),
    (_break_file_under_gitlink, PathUnsafe, ["vendor/lib"]),
    (_break_nested_repository, PathUnsafe, ["src/nested"]),
    (_break_control_character, PathInvalid, ["src/a\x1bb.txt"]),
    (_break_case_collision, PathInvalid, ["src/app.py"]),
    (_break_allowlist, VerificationFailed, ["README.md", "docs/new.md"]),
]


@pytest.mark.parametrize(
    ("breakage", "error", "paths"), REFUSALS, ids=[r[0].__name__[7:] for r in REFUSALS]
)
def test_unpromotable_change_is_refused_before_any_upload(
    tmp_path: Path,
    daemon: Daemon,
    repo: Path,
    identity: str,
    breakage: Any,
    error: type[PromoterError],
    paths: list[str],
) -> None:
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'a' * 40},vendor/lib")
    git(repo, "commit", "-q", "-m", "a submodule")
    executor = _clone(repo, tmp_path / "executor")
    breakage(repo, executor)
    grant = make_grant(
        repo, identity, allow=[{"pattern": "src/**", "operations": ["create", "modify"]}]
    )
    orchestrator = PromoterClient(daemon.url, daemon.orchestrator_token)
    orchestrator.register_grant(grant)
    token = orchestrator.mint_executor_token(grant["executor_run_id"])["token"]
    before = _git_dir_files(executor)

    client = orchestrator.with_token(token)
    with pytest.raises(error) as caught, build_bundle(executor, GrantV1.model_validate(grant)) as b:
        upload_and_submit(client, b)

    named = caught.value.context.get("paths") or caught.value.context.get("violations")
    assert sorted(item["path"] for item in named) == paths, caught.value.detail
    for path in paths:
        assert repr(path) in caught.value.detail or path in caught.value.detail
    assert [p for p in (daemon.state_dir / "audit").rglob("*") if p.is_file()] == [
        daemon.state_dir / "audit" / "grants" / "grt_test1.json"
    ]
    assert _git_dir_files(executor) == before


@pytest.mark.parametrize(
    ("overrides", "check"),
    [
        (
            {
                "preconditions": [
                    {
                        "path": "src/app.py",
                        "old": {"exists": True, "sha256": "0" * 64, "mode": "100644"},
                        "index": None,
                    }
                ]
            },
            "preconditions",
        ),
        ({"limits": {"max_changes": 1, "max_total_bytes": 1 << 20}}, "limits"),
        ({"limits": {"max_changes": 10, "max_total_bytes": 5}}, "limits"),
    ],
    ids=["explicit_precondition", "max_changes", "max_total_bytes"],
)
def test_grant_terms_are_checked_locally(
    source: Path, executor: Path, overrides: dict[str, Any], check: str
) -> None:
    (executor / "src/app.py").write_bytes(b"print('v2')\n")
    (executor / "src/more.py").write_bytes(b"more\n")
    with pytest.raises(VerificationFailed) as caught:
        build_bundle(executor, _grant(source, **overrides))
    assert [v["check"] for v in caught.value.context["violations"]] == [check]


def test_explicit_precondition_equal_to_the_base_is_honoured(source: Path, executor: Path) -> None:
    (executor / "src/app.py").write_bytes(b"print('v2')\n")
    spec = {"exists": True, "sha256": sha(BASE_FILES["src/app.py"][0]), "mode": "100644"}
    grant = _grant(source, preconditions=[{"path": "src/app.py", "old": spec, "index": None}])
    with build_bundle(executor, grant) as built:
        assert built.bundle["changes"][0]["old"]["sha256"] == spec["sha256"]


def test_only_missing_blobs_are_uploaded_and_the_receipt_passes(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    executor = _clone(repo, tmp_path / "executor")
    (executor / "src/app.py").write_bytes(b"print('v2')\n")
    (executor / "src/big.bin").write_bytes(os.urandom(3 << 20))
    grant = make_grant(repo, identity)
    orchestrator = PromoterClient(daemon.url, daemon.orchestrator_token)
    orchestrator.register_grant(grant)
    client = orchestrator.with_token(orchestrator.mint_executor_token("run_1")["token"])
    seen: list[tuple[int, int]] = []

    with build_bundle(executor, GrantV1.model_validate(grant)) as built:
        receipt = upload_and_submit(client, built, lambda done, total: seen.append((done, total)))
        again = upload_missing(client, built)
        stored = {d: client.with_token(daemon.operator_token).get_blob(d) for d in built.blobs}
        assert stored == {d: built.read_blob(d) for d in built.blobs}

    assert receipt.status == "passed"
    assert [c.status for c in receipt.checks] == ["passed"] * 7
    assert receipt.bundle_id == built.bundle_id
    assert again == []
    total = (3 << 20) + len(b"print('v2')\n") + len(b"print('v1')\n")
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert client.get_verification(built.bundle_id) == receipt


def test_links_the_grant_allows_are_sealed_with_their_target_text(
    source: Path, executor: Path
) -> None:
    (executor / "src" / "link").symlink_to("app.py")
    grant = _grant(source, symlinks="inside")
    with build_bundle(executor, grant) as built:
        changes = {c["path"]: c for c in built.bundle["changes"]}
        new = changes["src/link"]["new"]
        assert (new["mode"], new["bytes"]) == ("120000", len(b"app.py"))
        assert built.read_blob(new["sha256"]) == b"app.py"


@pytest.mark.parametrize("target", ["/etc/passwd", "../../outside", "../.git/config"])
def test_links_the_grant_refuses_are_named_with_their_target_before_any_upload(
    source: Path, executor: Path, target: str
) -> None:
    (executor / "src" / "link").symlink_to(target)
    with pytest.raises(VerificationFailed) as refused:
        build_bundle(executor, _grant(source, symlinks="inside"))
    assert refused.value.context["paths"][0]["path"] == "src/link"
    assert refused.value.context["paths"][0]["target"] == target
