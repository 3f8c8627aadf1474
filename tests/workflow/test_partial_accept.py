"""Accepting part of a bundle at review (protocol: runs#partial-accept): paths, then hunks.

Every test drives the real daemon over HTTP (or the CLI over it) against a real
repository under the approval gate. The attacks: a selection naming a path outside the
bundle, an empty selection, a selection splitting a rename, a person's edit after review
(the derived bundle is refused with zero writes), an executor submitting a bundle that
claims to be derived (to ride on a review it never had), and asking again for the parent.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from typer.testing import CliRunner

from promoter.cli import review_cmd
from promoter.domain.documents import seal_bundle
from promoter.domain.hunks import compose
from promoter.engine.receipts.signing import verify_document
from promoter.store.credentials import add_operator
from tests.gitutil import git
from tests.support.daemon import Daemon
from tests.support.fixtures import Gated
from tests.support.promotion import operation_receipt, promote, submit, tree_bytes

FILES = {f"src/m{i}.py": f"print('m{i} v1')\n".encode() for i in range(1, 6)}
NEW = {path: data.replace(b"v1", b"v2") for path, data in FILES.items()}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


pytestmark = pytest.mark.gated(
    {"README.md": b"# project\n", **FILES, "docs/old.md": b"moved text\n"}
)


def _held(daemon: Daemon, repo: Path, identity: str, changes: list[Any]) -> tuple[str, Any]:
    _, bundle, receipt = submit(daemon, repo, identity, changes)
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 202, answer.text
    assert answer.json()["status"] == "awaiting_approval"
    return str(answer.json()["operation_id"]), bundle


def _five(daemon: Daemon, repo: Path, identity: str) -> tuple[str, Any]:
    return _held(daemon, repo, identity, [(p, FILES[p], NEW[p]) for p in sorted(FILES)])


def _view(daemon: Daemon, operation_id: str) -> dict[str, Any]:
    with daemon.operator() as operator:
        view: dict[str, Any] = operator.get(f"/v1/operations/{operation_id}").json()
    assert view["events_verified"] is True
    return view


def _receipt(daemon: Daemon, operation_id: str) -> dict[str, Any]:
    return operation_receipt(daemon, operation_id, "operator")


def _approve(daemon: Daemon, operation_id: str, **body: Any) -> Any:
    with daemon.operator() as operator:
        return operator.post(f"/v1/operations/{operation_id}/approve", json={"wait": True, **body})


def test_accepting_two_of_five_files_promotes_exactly_those(gated: Gated) -> None:
    daemon, repo, identity = gated
    parent_id, bundle = _five(daemon, repo, identity)
    before = tree_bytes(repo)
    answer = _approve(daemon, parent_id, only=["src/m2.py", "src/m4.py"], note="two of five")
    assert answer.status_code == 200, answer.text
    derived = answer.json()
    assert derived["status"] == "completed"
    assert derived["operation_id"] != parent_id
    after = tree_bytes(repo)
    changed = {p for p in after if after[p] != before.get(p)}
    assert changed == {"src/m2.py", "src/m4.py"}
    assert (repo / "src/m2.py").read_bytes() == NEW["src/m2.py"]
    assert (repo / "src/m1.py").read_bytes() == FILES["src/m1.py"]

    declined = ["src/m1.py", "src/m3.py", "src/m5.py"]
    receipt = _receipt(daemon, derived["operation_id"])
    assert receipt["parent_bundle_id"] == bundle["bundle_id"]
    assert receipt["declined_paths"] == declined
    assert receipt["composed"] == []
    assert [t["path"] for t in receipt["targets"]] == ["src/m2.py", "src/m4.py"]
    assert receipt["bundle_id"] != bundle["bundle_id"]

    parent = _view(daemon, parent_id)
    assert parent["status"] == "refused"
    assert parent["code"] == "approved_in_part"
    assert derived["operation_id"] in parent["detail"]
    (decision,) = [e["payload"] for e in parent["events"] if e["kind"] == "decision"]
    assert decision["approval"] == "approved_in_part"
    assert decision["by"] == {"role": "operator", "name": "operator"}
    assert decision["accepted_paths"] == ["src/m2.py", "src/m4.py"]
    assert decision["declined_paths"] == declined
    assert decision["derived_operation_id"] == derived["operation_id"]
    assert decision["derived_bundle_id"] == receipt["bundle_id"]

    first = next(e for e in derived["events"] if e["kind"] == "decision")["payload"]
    assert first["approval"] == "approved"
    assert first["parent_operation_id"] == parent_id
    assert first["by"] == {"role": "operator", "name": "operator"}

    # the derived bundle is stored, verified against the same grant, and names its parent
    with daemon.operator() as operator:
        stored = operator.get(f"/v1/bundles/{receipt['bundle_id']}").json()
        verification = operator.get(f"/v1/bundles/{receipt['bundle_id']}/verification").json()
    assert stored["grant_sha256"] == bundle["grant_sha256"]
    assert stored["derived_from"] == {
        "parent_bundle_id": bundle["bundle_id"],
        "parent_bundle_sha256": bundle["bundle_sha256"],
        "declined_paths": declined,
        "composed": [],
    }
    assert verification["status"] == "passed"
    assert verification["receipt_sha256"] == receipt["verification_receipt_sha256"]

    # the parent is final: asking to promote it again changes nothing
    again = promote(daemon, bundle, {"receipt_sha256": parent["verification_receipt_sha256"]})
    assert again.status_code == 409, again.text
    assert again.json()["code"] == "approved_in_part"
    assert tree_bytes(repo) == after


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"only": ["src/m1.py", "src/nope.py"]}, "selection_invalid"),
        ({"except": ["../etc/passwd"]}, "selection_invalid"),
        ({"only": []}, "selection_invalid"),
        ({"except": sorted(FILES)}, "selection_invalid"),
        ({"only": ["src/m1.py"], "except": ["src/m2.py"]}, "selection_invalid"),
        ({"only": ["src/m1.py"], "hunks": {"src/m2.py": [1]}}, "selection_invalid"),
        ({"hunks": {"src/m1.py": [2]}}, "selection_invalid"),
        ({"only": "src/m1.py"}, "validation_failed"),
    ],
)
def test_a_selection_outside_the_bundle_is_refused_and_nothing_changes(
    gated: Gated, body: dict[str, Any], code: str
) -> None:
    daemon, repo, identity = gated
    parent_id, _ = _five(daemon, repo, identity)
    before = tree_bytes(repo)
    events = _view(daemon, parent_id)["events"]
    answer = _approve(daemon, parent_id, **body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == code
    assert tree_bytes(repo) == before
    view = _view(daemon, parent_id)
    assert view["status"] == "awaiting_approval"
    assert view["events"] == events
    with daemon.operator() as operator:
        listed = operator.get("/v1/operations").json()
    assert [op["operation_id"] for op in listed["operations"]] == [parent_id]


def test_a_path_not_in_the_bundle_is_named_as_typed_never_as_a_list_repr(
    gated: Gated,
) -> None:
    """The detail names the path in its wire form, once: a repr would double a backslash
    and the person would copy the wrong name."""
    daemon, repo, identity = gated
    parent_id, _ = _five(daemon, repo, identity)
    answer = _approve(daemon, parent_id, only=["src/m1.py", "src/a\\\\b.py", "src/z\u202e.py"])
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"] == (
        "only names paths that are not in the bundle: src/a\\\\b.py, src/z<U+202E>.py"
    )


def test_a_selection_splitting_a_rename_is_refused(gated: Gated) -> None:
    daemon, repo, identity = gated
    moved = b"moved text\n"
    changes = [
        ("docs/old.md", moved, None),
        ("docs/new.md", None, moved),
        ("src/m1.py", FILES["src/m1.py"], NEW["src/m1.py"]),
    ]
    parent_id, _ = _held(daemon, repo, identity, changes)
    before = tree_bytes(repo)
    answer = _approve(daemon, parent_id, only=["docs/new.md", "src/m1.py"])
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "selection_splits_pair"
    assert answer.json()["paths"] == ["docs/new.md", "docs/old.md"]
    assert answer.json()["detail"] == (
        "docs/new.md, docs/old.md are a rename (a delete and a create of the same bytes): "
        "accept or decline them together"
    )
    assert tree_bytes(repo) == before
    assert _view(daemon, parent_id)["status"] == "awaiting_approval"
    # kept together, the pair is accepted
    answer = _approve(daemon, parent_id, **{"except": ["src/m1.py"]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "completed"
    assert (repo / "docs/new.md").read_bytes() == moved
    assert not (repo / "docs/old.md").exists()
    assert (repo / "src/m1.py").read_bytes() == FILES["src/m1.py"]


def test_a_persons_edit_after_review_refuses_the_part_with_zero_writes(gated: Gated) -> None:
    daemon, repo, identity = gated
    parent_id, _ = _five(daemon, repo, identity)
    edited = b"print('the person')\n"
    (repo / "src/m2.py").write_bytes(edited)
    before = tree_bytes(repo)
    answer = _approve(daemon, parent_id, only=["src/m2.py", "src/m4.py"])
    assert answer.status_code == 200, answer.text
    derived = answer.json()
    assert derived["status"] == "refused"
    assert derived["code"] == "target_drift"
    assert tree_bytes(repo) == before
    assert (repo / "src/m2.py").read_bytes() == edited
    assert (repo / "src/m4.py").read_bytes() == FILES["src/m4.py"]


def test_an_executor_cannot_submit_a_bundle_claiming_to_be_derived(gated: Gated) -> None:
    daemon, repo, identity = gated
    parent_id, bundle = _five(daemon, repo, identity)
    # a copy of the parent narrowed to one path, claiming a review that declined the rest
    forged = {k: v for k, v in bundle.items() if k not in ("bundle_id", "bundle_sha256")}
    forged["changes"] = [c for c in bundle["changes"] if c["path"] == "src/m1.py"]
    forged["change_count"] = 1
    forged["total_bytes"] = forged["changes"][0]["new"]["bytes"]
    forged["derived_from"] = {
        "parent_bundle_id": bundle["bundle_id"],
        "parent_bundle_sha256": bundle["bundle_sha256"],
        "declined_paths": [p for p in sorted(FILES) if p != "src/m1.py"],
        "composed": [],
    }
    forged = seal_bundle({**forged, "bundle_id": "", "bundle_sha256": ""})
    before = tree_bytes(repo)
    with daemon.executor(bundle["executor_run_id"]) as ex, daemon.orchestrator() as orch:
        answer = ex.post("/v1/bundles", json=forged)
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "derived_bundle_refused"
        answer = ex.post("/v1/bundles", json={**bundle, "derived_from": None})
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "derived_bundle_refused"
        looked = orch.get(f"/v1/bundles/{forged['bundle_id']}")
        assert looked.status_code == 404
        asked = orch.post(
            "/v1/promotions",
            json={
                "bundle_id": forged["bundle_id"],
                "verification_receipt_sha256": "0" * 64,
                "fence": 7,
            },
        )
        assert asked.status_code == 404, asked.text
    assert tree_bytes(repo) == before
    assert _view(daemon, parent_id)["status"] == "awaiting_approval"


def _cli() -> typer.Typer:
    app = typer.Typer()
    review_cmd.register(app)
    return app


def test_cli_approve_except_declines_paths_and_prints_them(gated: Gated) -> None:
    daemon, repo, identity = gated
    parent_id, bundle = _five(daemon, repo, identity)
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    result = CliRunner().invoke(
        _cli(),
        ["approve", parent_id, "--except", "src/m1.py", "src/m3.py", "src/m5.py", "--note", "x"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert f"the accepted part of {parent_id}" in result.stdout
    assert "declined   src/m3.py" in result.stdout
    assert (repo / "src/m2.py").read_bytes() == NEW["src/m2.py"]
    assert (repo / "src/m3.py").read_bytes() == FILES["src/m3.py"]
    refused = CliRunner().invoke(_cli(), ["approve", parent_id, "--only", "x.py"], env=env)
    assert refused.exit_code != 0
    both = CliRunner().invoke(_cli(), ["approve", parent_id, "--only", "--except", "a"], env=env)
    assert both.exit_code == 2


OLD_TEXT = b"".join(f"line {i}\n".encode() for i in range(1, 31))


def _three_hunks(data: bytes) -> bytes:
    return (
        data.replace(b"line 2\n", b"line two\n")
        .replace(b"line 15\n", b"line fifteen\n")
        .replace(b"line 28\n", b"line 28\nline 28.5\n")
    )


def test_accepting_one_of_three_hunks_yields_exact_bytes(gated: Gated) -> None:
    daemon, repo, identity = gated
    (repo / "src/text.txt").write_bytes(OLD_TEXT)
    _git_commit(repo)
    new = _three_hunks(OLD_TEXT)
    parent_id, bundle = _held(
        daemon,
        repo,
        identity,
        [("src/text.txt", OLD_TEXT, new), ("src/m1.py", FILES["src/m1.py"], NEW["src/m1.py"])],
    )
    with daemon.operator() as operator:
        diff = operator.get(f"/v1/bundles/{bundle['bundle_id']}/diff").json()
    section = diff["unified_diff"].split("diff --git a/src/text.txt")[1]
    assert section.count("\n@@ ") == 3
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    result = CliRunner().invoke(
        _cli(), ["approve", parent_id, "--hunks", "src/text.txt=2", "--json"], env=env
    )
    assert result.exit_code == 0, result.output
    derived = json.loads(result.stdout)
    expected = OLD_TEXT.replace(b"line 15\n", b"line fifteen\n")
    assert (repo / "src/text.txt").read_bytes() == expected
    assert (repo / "src/m1.py").read_bytes() == NEW["src/m1.py"]
    receipt = _receipt(daemon, derived["operation_id"])
    assert receipt["declined_paths"] == []
    assert receipt["composed"] == [{"path": "src/text.txt", "hunks": [2], "by": "operator"}]
    target = next(t for t in receipt["targets"] if t["path"] == "src/text.txt")
    assert target["sha256"] == _sha(expected)
    assert compose(OLD_TEXT, new, {2}) == expected


def _git_commit(repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "text")


def test_hunks_in_a_binary_file_are_refused_and_all_hunks_are_the_agents_bytes(
    gated: Gated,
) -> None:
    daemon, repo, identity = gated
    binary_old, binary_new = b"\0bin\n" + OLD_TEXT, b"\0bin\n" + _three_hunks(OLD_TEXT)
    (repo / "src/blob.bin").write_bytes(binary_old)
    (repo / "src/text.txt").write_bytes(OLD_TEXT)
    _git_commit(repo)
    new = _three_hunks(OLD_TEXT)
    changes = [("src/blob.bin", binary_old, binary_new), ("src/text.txt", OLD_TEXT, new)]
    parent_id, _ = _held(daemon, repo, identity, changes)
    before = tree_bytes(repo)
    answer = _approve(daemon, parent_id, hunks={"src/blob.bin": [1]})
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "selection_invalid"
    assert "binary" in answer.json()["detail"]
    assert tree_bytes(repo) == before
    answer = _approve(daemon, parent_id, only=["src/text.txt"], hunks={"src/text.txt": [3, 1, 2]})
    assert answer.status_code == 200, answer.text
    derived = answer.json()
    assert derived["status"] == "completed"
    assert (repo / "src/text.txt").read_bytes() == new
    assert (repo / "src/blob.bin").read_bytes() == binary_old
    receipt = _receipt(daemon, derived["operation_id"])
    assert receipt["composed"] == []  # every hunk chosen: the agent's own bytes
    assert receipt["declined_paths"] == ["src/blob.bin"]
    again = _approve(daemon, parent_id, only=["src/text.txt"])
    assert again.status_code == 409, again.text
    assert again.json()["code"] == "operation_conflict"


def test_the_parts_signed_receipt_verifies_offline_and_names_the_declined(gated: Gated) -> None:
    daemon, repo, identity = gated
    parent_id, bundle = _five(daemon, repo, identity)
    answer = _approve(daemon, parent_id, **{"except": ["src/m5.py"]})
    assert answer.status_code == 200, answer.text
    derived_id = answer.json()["operation_id"]
    with daemon.client() as anonymous:
        (entry,) = anonymous.get("/v1/keys").json()["keys"]
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(entry["public_key_raw_b64"]))
    with daemon.orchestrator() as orch:
        envelope = orch.get(f"/v1/operations/{derived_id}/receipt.dsse")
    assert envelope.status_code == 200, envelope.text
    result = verify_document(envelope.content, [key])
    assert result.kind == "promotion_receipt"
    assert result.keyid == entry["keyid"]
    signed = json.loads(result.body)
    assert signed["parent_bundle_id"] == bundle["bundle_id"]
    assert signed["declined_paths"] == ["src/m5.py"]
    assert result.identity_sha256 == _receipt(daemon, derived_id)["receipt_sha256"]


def test_selecting_every_path_and_hunk_is_an_ordinary_approval(gated: Gated) -> None:
    daemon, repo, identity = gated
    parent_id, _ = _five(daemon, repo, identity)
    answer = _approve(daemon, parent_id, only=sorted(FILES), hunks={"src/m1.py": [1]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["operation_id"] == parent_id
    assert answer.json()["status"] == "completed"
    receipt = _receipt(daemon, parent_id)
    assert "parent_bundle_id" not in receipt and "declined_paths" not in receipt
    assert all((repo / p).read_bytes() == NEW[p] for p in FILES)


def test_a_named_credential_is_the_author_of_composed_bytes_not_a_claimed_name(
    gated: Gated,
) -> None:
    daemon, repo, identity = gated
    (repo / "src/text.txt").write_bytes(OLD_TEXT)
    _git_commit(repo)
    new = _three_hunks(OLD_TEXT)
    parent_id, _ = _held(daemon, repo, identity, [("src/text.txt", OLD_TEXT, new)])
    ana = add_operator(daemon.state_dir / "credentials", "ana")
    with daemon.client(ana) as client:
        answer = client.post(
            f"/v1/operations/{parent_id}/approve",
            json={"hunks": {"src/text.txt": [1]}, "by": "the agent", "wait": True},
        )
    assert answer.status_code == 200, answer.text
    derived = answer.json()
    receipt = _receipt(daemon, derived["operation_id"])
    assert receipt["composed"] == [{"path": "src/text.txt", "hunks": [1], "by": "ana"}]
    first = next(e for e in derived["events"] if e["kind"] == "decision")["payload"]
    assert first["by"] == {"role": "operator", "name": "ana"}
    assert first["claimed_by"] == "the agent"
    assert (repo / "src/text.txt").read_bytes() == OLD_TEXT.replace(b"line 2\n", b"line two\n")


def test_review_labels_each_hunk_with_the_number_approve_takes(gated: Gated) -> None:
    """The operator picks a hunk by the label review prints, never by counting ``@@``."""
    daemon, repo, identity = gated
    (repo / "src/text.txt").write_bytes(OLD_TEXT)
    _git_commit(repo)
    new = _three_hunks(OLD_TEXT)
    parent_id, _ = _held(
        daemon,
        repo,
        identity,
        [
            ("src/m1.py", FILES["src/m1.py"], NEW["src/m1.py"]),
            ("src/new.txt", None, b"fresh\n"),
            ("src/text.txt", OLD_TEXT, new),
        ],
    )
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    shown = CliRunner().invoke(_cli(), ["review"], env=env)
    assert shown.exit_code == 0, shown.output
    sections = {part.split(" ", 1)[0][2:]: part for part in shown.stdout.split("diff --git ")[1:]}
    assert set(sections) == {"src/m1.py", "src/new.txt", "src/text.txt"}
    lines = sections["src/text.txt"].splitlines()
    labels = [(line, lines[i + 1]) for i, line in enumerate(lines) if line.startswith("hunk ")]
    assert [label for label, _ in labels] == ["hunk 1", "hunk 2", "hunk 3"]
    assert all(head.startswith("@@ ") for _, head in labels)  # each label right before its @@
    assert sections["src/m1.py"].splitlines()[3:5] == ["hunk 1", "@@ -1 +1 @@"]
    assert "hunk " not in sections["src/new.txt"]  # a created file is taken whole
    # the label above the hunk that holds "line fifteen" is the number to approve
    start = sections["src/text.txt"].index("+line fifteen")
    chosen = sections["src/text.txt"][:start].rsplit("hunk ", 1)[1].split("\n", 1)[0]
    assert chosen == "2"
    result = CliRunner().invoke(
        _cli(),
        ["approve", parent_id, "--only", "src/text.txt", "--hunks", f"src/text.txt={chosen}"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert (repo / "src/text.txt").read_bytes() == OLD_TEXT.replace(b"line 15\n", b"line fifteen\n")
    assert (repo / "src/m1.py").read_bytes() == FILES["src/m1.py"]
    assert not (repo / "src/new.txt").exists()


def test_ops_show_names_what_a_partial_approval_accepted_declined_and_derived(
    gated: Gated,
) -> None:
    """Whoever reads a refused operation later sees it was approved in part, not lost."""
    from promoter.cli.main import app

    daemon, repo, identity = gated
    (repo / "src/text.txt").write_bytes(OLD_TEXT)
    _git_commit(repo)
    parent_id, bundle = _held(
        daemon,
        repo,
        identity,
        [
            ("src/m1.py", FILES["src/m1.py"], NEW["src/m1.py"]),
            ("src/m2.py", FILES["src/m2.py"], NEW["src/m2.py"]),
            ("src/text.txt", OLD_TEXT, _three_hunks(OLD_TEXT)),
        ],
    )
    selection = {"except": ["src/m2.py"], "hunks": {"src/text.txt": [1, 3]}}
    answer = _approve(daemon, parent_id, **selection, note="most")
    assert answer.status_code == 200, answer.text
    derived = answer.json()
    derived_id = derived["operation_id"]
    derived_bundle = _receipt(daemon, derived_id)["bundle_id"]
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token, "COLUMNS": "200"}

    shown = CliRunner().invoke(app, ["ops", "show", parent_id], env=env)
    assert shown.exit_code == 0, shown.output
    assert (
        "  approved_in_part by operator (operator): most\n"
        "    accepted: src/m1.py, src/text.txt\n"
        "    declined: src/m2.py\n"
        f"    the accepted part is operation {derived_id} (bundle {derived_bundle})\n"
        "    composed: src/text.txt (hunks 1,3)\n"
    ) in shown.stdout
    assert "expected old" not in shown.stdout  # no empty table of the steps it never took
    assert shown.stdout.endswith(
        "next: Nothing of this operation was written as such; the accepted part is "
        f"operation {derived_id}: `promoter ops show {derived_id}`.\n"
    )

    shown = CliRunner().invoke(app, ["ops", "show", derived_id], env=env)
    assert shown.exit_code == 0, shown.output
    assert (
        "  approved by operator (operator): most\n"
        f"    the accepted part of operation {parent_id} (bundle {bundle['bundle_id']})\n"
        "    declined: src/m2.py\n"
        "    composed: src/text.txt (hunks 1,3)\n"
    ) in shown.stdout
