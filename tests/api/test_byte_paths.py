"""Any filename git can hold goes from an executor's worktree to the person's
(protocol: documents#byte-paths).

A file whose name is not UTF-8, or holds a backslash, is built into the bundle under its
wire form (``caf\\xe9.txt``, ``back\\\\slash.txt``), uploaded, verified, promoted through
the real daemon and read back from disk under its exact bytes; the receipt names it by
the same wire form. A bundle spelling a path any other way is refused ``path_invalid``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from typer.testing import CliRunner

from promoter.client.sync import PromoterClient
from promoter.config import RepositoryConfig
from promoter.domain.models import GrantV1
from promoter.executor import build_bundle, upload_and_submit
from tests.api.test_executor_end_to_end import _cli_app
from tests.gitutil import commit_all
from tests.support.cli import cli
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import make_bundle, make_grant, seal_bundle, sha, upload
from tests.support.promotion import built_and_submitted, git_dir_digest, promote, set_lease, submit
from tests.support.repos import clone

LATIN1 = b"src/caf\xe9.txt"  # "café.txt" in Latin-1: \xe9 alone is not UTF-8
BACKSLASH = b"src/back\\slash.txt"
NOT_TEXT = b"src/\xff\xfe"
TRACKED = b"src/na\xefve-\xe0.md"  # in the base tree; the executor edits it
GONE = b"src/old-\xa9.txt"  # in the base tree; the executor deletes it
UTF8 = "src/caf\u00e9.txt".encode()  # the same name in UTF-8: a different file

WIRE = {
    LATIN1: "src/caf\\xe9.txt",
    BACKSLASH: "src/back\\\\slash.txt",
    NOT_TEXT: "src/\\xff\\xfe",
    TRACKED: "src/na\\xefve-\\xe0.md",
    GONE: "src/old-\\xa9.txt",
    UTF8: "src/caf\u00e9.txt",
}


def _write(root: Path, name: bytes, data: bytes) -> None:
    with open(os.path.join(os.fsencode(root), name), "wb") as out:
        out.write(data)


def _read(root: Path, name: bytes) -> bytes | None:
    try:
        with open(os.path.join(os.fsencode(root), name), "rb") as src:
            return src.read()
    except FileNotFoundError:
        return None


def _names(root: Path) -> set[bytes]:
    return set(os.listdir(os.path.join(os.fsencode(root), b"src")))


def _prepare(repo: Path, tmp_path: Path) -> Path:
    """Base: two tracked files with names that are not UTF-8. The executor's clone then
    creates three such files and a UTF-8 twin, edits one tracked name, deletes the other."""
    _write(repo, TRACKED, b"base\n")
    _write(repo, GONE, b"to be deleted\n")
    commit_all(repo, "names that are not UTF-8")
    executor = clone(repo, tmp_path / "executor")
    _write(executor, LATIN1, b"latin-1 name\n")
    _write(executor, BACKSLASH, b"backslash name\n")
    _write(executor, NOT_TEXT, bytes(range(256)))
    _write(executor, UTF8, b"utf-8 name\n")
    _write(executor, TRACKED, b"edited\n")
    os.unlink(os.path.join(os.fsencode(executor), GONE))
    return executor


def _assert_landed(repo: Path) -> None:
    assert _read(repo, LATIN1) == b"latin-1 name\n"
    assert _read(repo, BACKSLASH) == b"backslash name\n"
    assert _read(repo, NOT_TEXT) == bytes(range(256))
    assert _read(repo, UTF8) == b"utf-8 name\n"
    assert _read(repo, TRACKED) == b"edited\n"
    assert _read(repo, GONE) is None
    assert _names(repo) == {b"app.py", *(os.path.basename(n) for n in WIRE if n != GONE)}


def test_names_that_are_not_utf8_are_built_promoted_and_read_back_byte_exact(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    executor = _prepare(repo, tmp_path)
    grant = make_grant(repo, identity)
    orchestrator = PromoterClient(daemon.url, daemon.orchestrator_token)
    orchestrator.register_grant(grant)
    client = orchestrator.with_token(orchestrator.mint_executor_token("run_1")["token"])
    source_git = git_dir_digest(repo)

    with build_bundle(executor, GrantV1.model_validate(grant)) as built:
        changes = built.bundle["changes"]
        receipt = upload_and_submit(client, built)

    # sorted by the bytes the wire forms name, each under its canonical wire form
    assert [c["path"] for c in changes] == [WIRE[n] for n in sorted(WIRE)]
    assert {c["path"]: c["operation"] for c in changes}[WIRE[GONE]] == "delete"
    assert {c["path"]: c["operation"] for c in changes}[WIRE[TRACKED]] == "modify"
    assert receipt.status == "passed"
    set_lease(daemon, grant)
    with daemon.orchestrator() as orch:
        pre = orch.post(f"/v1/bundles/{built.bundle_id}/preflight", json={"fence": 7}).json()
    assert pre["status"] == "passed", pre
    assert {p["path"]: p["verdict"] for p in pre["paths"]} == {WIRE[n]: "old" for n in sorted(WIRE)}
    view = orchestrator.promote(built.bundle_id, receipt.receipt_sha256, 7, wait=True)

    assert view["status"] == "completed", view
    assert [s["path"] for s in view["steps"]] == [WIRE[n] for n in sorted(WIRE)]
    _assert_landed(repo)
    assert git_dir_digest(repo) == source_git
    stored = orchestrator.get_receipt(view["operation_id"])
    targets = json.loads(stored)["targets"]
    assert [t["path"] for t in targets] == [WIRE[n] for n in sorted(WIRE)]
    by_path = {t["path"]: t for t in targets}
    assert by_path[WIRE[NOT_TEXT]]["sha256"] == sha(bytes(range(256)))
    assert by_path[WIRE[GONE]]["exists"] is False
    (tmp_path / "receipt.json").write_bytes(stored)
    checked = cli(
        "receipt", "verify", "receipt.json", "--worktree", str(repo), "--json", cwd=tmp_path
    )
    report = json.loads(checked.stdout)  # no key given: the signature is not checked (3)
    assert (checked.returncode, report["hash_ok"]) == (3, True), checked.stdout
    statuses = {t["path"]: t["status"] for t in report["worktree"]}
    assert statuses == {wire: "match" for wire in WIRE.values()}
    # JSON text of the wire form: one escaped backslash, never the escape escaped again
    assert b'"src/caf\\\\xe9.txt"' in stored and b"\\\\\\\\xe9" not in stored


def test_rollback_restores_names_that_are_not_utf8_byte_exact(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    executor = _prepare(repo, tmp_path)
    orchestrator, built, receipt = built_and_submitted(daemon, repo, identity, executor)
    view = orchestrator.promote(built.bundle_id, receipt.receipt_sha256, 7, wait=True)
    assert view["status"] == "completed", view

    with daemon.operator() as operator:
        answer = operator.post(f"/v1/operations/{view['operation_id']}/rollback")
    assert answer.status_code == 200, answer.text
    rolled = answer.json()
    assert rolled["status"] == "rolled_back", rolled
    assert {t["path"]: t["result"] for t in rolled["targets"]} == {
        wire: "restored" for wire in WIRE.values()
    }
    assert _names(repo) == {b"app.py", os.path.basename(TRACKED), os.path.basename(GONE)}
    assert _read(repo, TRACKED) == b"base\n"
    assert _read(repo, GONE) == b"to be deleted\n"


def test_command_line_builds_and_promotes_names_that_are_not_utf8(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    executor = _prepare(repo, tmp_path)
    app, runner = _cli_app(), CliRunner()
    orch = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.orchestrator_token}
    grant_file, bundle_file = tmp_path / "grant.json", tmp_path / "bundle.json"
    minted = runner.invoke(app, ["token", "mint", "run_cli", "--ttl", "600"], env=orch)
    assert minted.exit_code == 0, minted.output
    created = runner.invoke(
        app,
        [
            *"grant create --repo work --grant-id grt_cli --run run_cli --workflow wf_cli"
            " --stage build --fence 3 --allow src/**:create,modify,delete".split(),
            *["--out", str(grant_file)],
        ],
        env=orch,
    )
    assert created.exit_code == 0, created.output
    executor_env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": minted.stdout.splitlines()[0]}
    built = runner.invoke(
        app,
        [
            *f"bundle build --worktree {executor} --grant {grant_file} --submit".split(),
            *["--out", str(bundle_file)],
        ],
        env=executor_env,
    )
    assert built.exit_code == 0, built.output
    assert "verification passed" in built.stdout
    bundle = json.loads(bundle_file.read_bytes())
    assert bundle_file.read_bytes() == rfc8785.dumps(bundle)
    assert [c["path"] for c in bundle["changes"]] == [WIRE[n] for n in sorted(WIRE)]

    leased = runner.invoke(
        app, ["lease", "set", "wf_cli", "build", "--run", "run_cli", "--fence", "3"], env=orch
    )
    assert leased.exit_code == 0, leased.output
    promoted = runner.invoke(app, ["promote", bundle["bundle_id"], "--wait"], env=orch)
    assert promoted.exit_code == 0, promoted.output
    assert "completed" in promoted.stdout
    _assert_landed(repo)


# --- spellings that are not the canonical wire form ------------------------------------


@pytest.fixture
def registered(daemon: Daemon, repo: Path, identity: str) -> dict[str, Any]:
    grant = make_grant(repo, identity)
    with daemon.orchestrator() as orch:
        assert orch.post("/v1/grants", json=grant).status_code == 201
    with daemon.executor("run_1") as ex:
        upload(ex, b"x\n", b"y\n")
    return grant


def _create(grant: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    return make_bundle(grant, [(p, None, b"x\n") for p in paths])


@pytest.mark.parametrize(
    "wire",
    [
        "src/caf\\xc3\\xa9.txt",  # escapes bytes that are valid UTF-8 ("é")
        "src/\\x41.txt",  # escapes an ASCII byte
        "src/\\X41.txt",  # upper-case X
        "src/\\xE9.txt",  # upper-case hex
        "src/\\xe.txt",  # one hex digit
        "src/\\q.txt",  # no such escape
        "src/a\\",  # trailing backslash
        "src/a\\x00b",  # an escaped NUL is still NUL
        "src/\\x2e\\x2e/x",  # an escaped ".." is still refused
    ],
)
def test_a_path_not_in_canonical_wire_form_is_refused_and_nothing_stored(
    wire: str, daemon: Daemon, registered: dict[str, Any], repo: Path
) -> None:
    audit = daemon.state_dir / "audit" / "bundles"
    before = sorted(audit.rglob("*")) if audit.exists() else []
    body = json.dumps(_create(registered, [wire]), ensure_ascii=True)
    with daemon.executor("run_1") as ex:
        answer = ex.post(
            "/v1/bundles", content=body.encode(), headers={"content-type": "application/json"}
        )
    assert (answer.status_code, answer.json()["code"]) == (422, "path_invalid"), answer.text
    assert (sorted(audit.rglob("*")) if audit.exists() else []) == before


def test_two_paths_equal_under_case_folding_of_their_bytes_are_refused(
    daemon: Daemon, registered: dict[str, Any]
) -> None:
    # "\xe9" is the same byte in both; "A"/"a" fold together: the decoded names collide
    bundle = _create(registered, ["src/A\\xe9", "src/a\\xe9"])
    with daemon.executor("run_1") as ex:
        answer = ex.post("/v1/bundles", json=bundle)
    assert (answer.status_code, answer.json()["code"]) == (422, "path_invalid"), answer.text


def test_changes_sorted_by_wire_text_instead_of_decoded_bytes_are_refused(
    daemon: Daemon, registered: dict[str, Any]
) -> None:
    # by text, "\\xff" (a backslash, 0x5c) sorts before "z"; by the bytes, 0xff is after
    by_bytes = make_bundle(registered, [("src/\\xff", None, b"x\n"), ("src/z", None, b"y\n")])
    assert [c["path"] for c in by_bytes["changes"]] == ["src/z", "src/\\xff"]
    by_text = seal_bundle({**by_bytes, "changes": by_bytes["changes"][::-1]})
    with daemon.executor("run_1") as ex:
        refused = ex.post("/v1/bundles", json=by_text)
        accepted = ex.post("/v1/bundles", json=by_bytes)
    assert (refused.status_code, refused.json()["code"]) == (422, "validation_failed")
    assert "not sorted" in refused.json()["detail"]
    assert accepted.status_code == 201, accepted.text
    checks = {c["name"]: c for c in accepted.json()["verification_receipt"]["checks"]}
    assert checks["manifest_integrity"]["status"] == "passed"
    assert checks["path_policy"]["status"] == "passed"


def test_the_longest_path_of_bytes_that_are_not_utf8_parses_and_passes(
    daemon: Daemon, registered: dict[str, Any]
) -> None:
    # 4095 bytes, each component 255 bytes of 0xff: 16,335 characters of wire form
    longest = "/".join(["\\xff" * 255] * 16)
    with daemon.executor("run_1") as ex:
        answer = ex.post("/v1/bundles", json=_create(registered, [longest]))
    assert answer.status_code == 201, answer.text
    assert answer.json()["verification_receipt"]["status"] == "passed"


def test_a_person_s_edit_of_a_byte_name_is_drift_named_by_its_wire_form(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    executor = _prepare(repo, tmp_path)
    orchestrator, built, receipt = built_and_submitted(daemon, repo, identity, executor)
    _write(repo, TRACKED, b"the person's own edit\n")
    before = {name: _read(repo, name) for name in WIRE}

    view = orchestrator.promote(built.bundle_id, receipt.receipt_sha256, 7, wait=True)

    assert (view["status"], view["code"]) == ("refused", "target_drift"), view
    assert {name: _read(repo, name) for name in WIRE} == before
    assert view["report"]["drift_report"]["drifted"] == [WIRE[TRACKED]]


def test_a_check_that_creates_byte_names_is_reported_by_their_wire_forms(
    tmp_path: Path, repo: Path
) -> None:
    check = ["sh", "-c", "printf x > \"$(printf 'caf\\351.log')\" && printf y > 'a\\b.log'"]
    config = RepositoryConfig(path=repo, check_command=check, check_timeout=60)
    with running_daemon(tmp_path / "state", {"work": config}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        changes = [("src/\\xff.txt", None, b"promoted\n")]
        _, bundle, receipt = submit(daemon, repo, identity, changes)
        answer = promote(daemon, bundle, receipt)
        with daemon.orchestrator() as orch:
            view = orch.get(f"/v1/operations/{answer.json()['operation_id']}").json()
    assert (view["status"], view["code"]) == ("needs_reconciliation", "check_changed_worktree")
    changed = view["report"]["check_changed"]
    assert changed["targets"] == []
    assert changed["other_paths"] == [
        {"path": "a\\\\b.log", "change": "created", "fields": []},
        {"path": "caf\\xe9.log", "change": "created", "fields": []},
    ]
    assert _read(repo, b"src/\xff.txt") == b"promoted\n"
