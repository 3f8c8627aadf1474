"""Signed receipts through the real server, verified offline by the CLI
(protocol: bundles#signed-receipts).

The CLI runs in a subprocess with no server address and no state directory: it gets
only the saved ``GET /v1/keys`` answer (or a PEM) and the saved envelope. Expected
Statements, PAE bytes and JWK members are rebuilt here by hand, not with promoter's
helpers.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from promoter.cli.trusted_keys import load_public_key, load_public_keys
from promoter.engine.receipts.signing import verify_document
from promoter.errors import ConfigError
from tests.support.cli import cli
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import sha
from tests.support.promotion import promote, submit

V1 = b"print('v1')\n"
V2 = b"print('v2')\n"
NEW = b"VALUE = 1\n"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"


def receipt_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli("receipt", *args, cwd=cwd)


CHANGES = [
    ("src/app.py", V1, V2),
    ("src/util/consts.py", None, NEW),
    ("README.md", b"# project\n", None),
]


def promoted(daemon: Daemon, repo: Path, identity: str) -> tuple[str, dict[str, Any]]:
    _, bundle, receipt = submit(daemon, repo, identity, list(CHANGES))
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
    return str(answer.json()["operation_id"]), bundle


def served_keys(daemon: Daemon) -> tuple[bytes, list[dict[str, Any]]]:
    with daemon.client() as anonymous:
        answer = anonymous.get("/v1/keys")
    assert answer.status_code == 200, answer.text
    return answer.content, answer.json()["keys"]


def envelope_of(daemon: Daemon, path: str) -> bytes:
    with daemon.orchestrator() as orch:
        answer = orch.get(path)
    assert answer.status_code == 200, answer.text
    return answer.content


def dsse_pae(kind: str, body: bytes) -> bytes:
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind.encode(), len(body), body)


def test_promotion_envelope_is_an_in_toto_statement_over_the_stored_receipt(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, bundle = promoted(daemon, repo, identity)
    keys_json, [entry] = served_keys(daemon)
    raw = base64.b64decode(entry["public_key_raw_b64"])
    assert entry["algorithm"] == "ed25519" and entry["keyid"] == sha(raw)
    key_file = daemon.state_dir / "credentials" / "host-signing.key"
    assert key_file.lstat().st_mode & 0o777 == 0o600

    with daemon.orchestrator() as orch:
        signed = orch.get(f"/v1/operations/{operation_id}/receipt.dsse")
        again = orch.get(f"/v1/operations/{operation_id}/receipt.dsse")
        plain = orch.get(f"/v1/operations/{operation_id}/receipt")
    assert signed.status_code == 200, signed.text
    assert again.content == signed.content  # Ed25519 is deterministic: one envelope
    envelope = signed.json()
    assert envelope["payloadType"] == PAYLOAD_TYPE
    body = base64.b64decode(envelope["payload"])
    receipt = json.loads(plain.content)
    expected = {
        "_type": STATEMENT_TYPE,
        "subject": [  # the targets with content, in receipt order; README.md was deleted
            {"name": "src/app.py", "digest": {"sha256": sha(V2)}},
            {"name": "src/util/consts.py", "digest": {"sha256": sha(NEW)}},
        ],
        "predicateType": "urn:promoter:receipt:promotion:v1",
        "predicate": receipt,
    }
    assert body == bytes(rfc8785.dumps(expected))
    assert b'"predicate":' + plain.content + b',"predicateType":' in body  # byte-identical
    assert [t["path"] for t in receipt["targets"] if not t["exists"]] == ["README.md"]
    assert receipt["bundle_id"] == bundle["bundle_id"]
    [signature] = envelope["signatures"]
    assert signature["keyid"] == entry["keyid"]
    Ed25519PublicKey.from_public_bytes(raw).verify(
        base64.b64decode(signature["sig"]), dsse_pae(PAYLOAD_TYPE, body)
    )

    (tmp_path / "keys.json").write_bytes(keys_json)
    (tmp_path / "host.pem").write_text(entry["public_key_pem"])
    (tmp_path / "receipt.dsse").write_bytes(signed.content)
    for flag, key in (
        ("--public-key", "keys.json"),
        ("--public-key", "host.pem"),
        ("--keys", "keys.json"),
    ):
        done = receipt_cli("verify", "receipt.dsse", flag, key, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"signature: verified with key {entry['keyid']}" in done.stdout
        assert "statement: in-toto Statement v1" in done.stdout
        assert f"valid PatchPromotionReceiptV1 {receipt['receipt_sha256']}" in done.stdout


def test_tampered_payload_fails_offline(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    keys_json, _ = served_keys(daemon)
    envelope = json.loads(envelope_of(daemon, f"/v1/operations/{operation_id}/receipt.dsse"))
    body = base64.b64decode(envelope["payload"])
    tampered = body.replace(b'"exists":false', b'"exists":true')
    assert tampered != body
    (tmp_path / "keys.json").write_bytes(keys_json)
    (tmp_path / "tampered.dsse").write_text(
        json.dumps({**envelope, "payload": base64.b64encode(tampered).decode()})
    )
    done = receipt_cli("verify", "tampered.dsse", "--public-key", "keys.json", cwd=tmp_path)
    assert done.returncode == 65, done.stdout + done.stderr
    assert "signature does not verify" in done.stderr
    assert "valid" not in done.stdout


def test_envelope_without_a_key_is_not_valid_and_exits_3_unless_no_signature(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    (tmp_path / "r.dsse").write_bytes(
        envelope_of(daemon, f"/v1/operations/{operation_id}/receipt.dsse")
    )
    human = receipt_cli("verify", "r.dsse", cwd=tmp_path)
    assert human.returncode == 3, human.stdout + human.stderr
    assert "signature: NOT CHECKED" in human.stdout
    assert "hash ok, signature not checked" in human.stdout
    assert "NOT valid without a key" in human.stdout
    as_json = receipt_cli("verify", "r.dsse", "--json", cwd=tmp_path)
    assert as_json.returncode == 3, as_json.stderr
    summary = json.loads(as_json.stdout)
    assert (summary["valid"], summary["hash_ok"], summary["signature"]) == (
        False,
        True,
        "not_checked",
    )
    accepted = receipt_cli("verify", "r.dsse", "--no-signature", "--json", cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["valid"] is False  # accepted, still not "valid"


def test_envelope_from_this_host_fails_against_another_hosts_key(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    (tmp_path / "receipt.dsse").write_bytes(
        envelope_of(daemon, f"/v1/operations/{operation_id}/receipt.dsse")
    )
    other = Ed25519PrivateKey.generate().public_key()
    (tmp_path / "other.pem").write_bytes(
        other.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    done = receipt_cli("verify", "receipt.dsse", "--public-key", "other.pem", cwd=tmp_path)
    assert done.returncode == 65, done.stdout + done.stderr
    assert "wrong key" in done.stderr


def test_envelope_with_a_wrong_payload_type_fails(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    keys_json, _ = served_keys(daemon)
    envelope = json.loads(envelope_of(daemon, f"/v1/operations/{operation_id}/receipt.dsse"))
    (tmp_path / "keys.json").write_bytes(keys_json)
    legacy = "application/vnd.promoter.PatchPromotionReceiptV1+json"
    (tmp_path / "relabelled.dsse").write_text(json.dumps({**envelope, "payloadType": legacy}))
    done = receipt_cli("verify", "relabelled.dsse", "--keys", "keys.json", cwd=tmp_path)
    assert done.returncode == 65, done.stdout + done.stderr
    assert "wrong payload type" in done.stderr


def test_keys_are_served_as_a_jwks_and_as_pem(daemon: Daemon, tmp_path: Path) -> None:
    _, [entry] = served_keys(daemon)
    raw = base64.b64decode(entry["public_key_raw_b64"])
    assert {k: entry[k] for k in ("kty", "crv", "alg", "use", "kid", "status")} == {
        "kty": "OKP",
        "crv": "Ed25519",
        "alg": "EdDSA",
        "use": "sig",
        "kid": entry["keyid"],
        "status": "active",
    }
    assert base64.urlsafe_b64decode(entry["x"] + "=") == raw and "=" not in entry["x"]
    assert entry["not_after"] is None
    with daemon.client() as anonymous:
        pem = anonymous.get("/v1/keys.pem")
    header = "".join(
        f"{field}: {entry[field]}\n"
        for field in ("keyid", "host_id", "status", "not_before", "not_after")
        if entry[field] is not None
    )
    assert pem.status_code == 200 and pem.text == header + entry["public_key_pem"]
    assert header.startswith(f"keyid: {entry['keyid']}\nhost_id: {entry['host_id']}\n")
    jwk_only = {k: entry[k] for k in ("kty", "crv", "x", "kid")}  # a JWKS from elsewhere
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk_only]}))
    [loaded] = load_public_keys(tmp_path / "jwks.json")
    assert loaded.public_bytes(Encoding.Raw, PublicFormat.Raw) == raw


def test_receipt_envelopes_need_the_orchestrator_and_keys_need_nothing(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    path = f"/v1/operations/{operation_id}/receipt.dsse"
    with daemon.client() as anonymous:
        assert anonymous.get("/v1/keys").status_code == 200
        assert anonymous.get(path).json()["code"] == "unauthenticated"
    with daemon.executor("run_1") as ex:
        assert ex.get(path).json()["code"] == "forbidden"
    with daemon.orchestrator() as orch:
        unknown = orch.get("/v1/operations/op_" + "0" * 32 + "/receipt.dsse")
        assert unknown.status_code == 404, unknown.text
        assert unknown.json()["code"] == "operation_unknown"


def test_verification_envelope_is_served_to_the_executor_of_its_own_run_only(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, b"v2\n")])
    _, [entry] = served_keys(daemon)
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(entry["public_key_raw_b64"]))
    path = f"/v1/bundles/{bundle['bundle_id']}/verification.dsse"
    with daemon.executor("run_1") as own, daemon.executor("run_2") as other:
        answer = own.get(path)
        assert other.get(path).json()["code"] == "forbidden"
    assert answer.status_code == 200, answer.text
    result = verify_document(answer.content, [key])
    assert (result.kind, result.keyid) == ("verification_receipt", entry["keyid"])
    assert result.identity_sha256 == receipt["receipt_sha256"]
    assert result.predicate_type == "urn:promoter:receipt:verification:v1"
    assert result.subjects == (bundle["bundle_id"],)
    statement = json.loads(base64.b64decode(answer.json()["payload"]))
    assert statement["subject"] == [
        {"name": bundle["bundle_id"], "digest": {"sha256": bundle["bundle_sha256"]}}
    ]
    with daemon.orchestrator() as orch:
        assert orch.get(path).content == answer.content
        missing = orch.get("/v1/bundles/bnd_" + "0" * 32 + "/verification.dsse")
        assert missing.status_code == 404, missing.text


def test_rollback_envelope_is_unavailable_until_a_rollback_then_verifies(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    path = f"/v1/operations/{operation_id}/rollback-receipt.dsse"
    with daemon.orchestrator() as orch:
        before = orch.get(path)
        assert before.status_code == 404, before.text
        assert before.json()["code"] == "receipt_unavailable"
    with daemon.operator() as op:
        rolled = op.post(f"/v1/operations/{operation_id}/rollback", json={"note": "test"})
        assert rolled.status_code == 200, rolled.text
    after = envelope_of(daemon, path)
    _, [entry] = served_keys(daemon)
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(entry["public_key_raw_b64"]))
    result = verify_document(after, [key])
    assert result.kind == "rollback_receipt"
    assert result.body == rolled.content
    statement = json.loads(base64.b64decode(json.loads(after)["payload"]))
    assert statement["predicateType"] == "urn:promoter:receipt:rollback:v1"
    # after the rollback src/app.py and README.md hold their old content again
    by_name = {s["name"]: s["digest"] for s in statement["subject"]}
    assert by_name == {
        "README.md": {"sha256": sha(b"# project\n")},
        "src/app.py": {"sha256": sha(V1)},
    }
    assert [s["name"] for s in statement["subject"]] == [
        t["path"] for t in json.loads(rolled.content)["targets"] if t["path"] in by_name
    ]


def test_host_key_survives_a_restart(tmp_path: Path, repo: Path) -> None:
    keyids = []
    for _ in range(2):
        with running_daemon(tmp_path / "state", {"work": repo}) as running:
            keyids.append(served_keys(running)[1][0]["keyid"])
    assert keyids[0] == keyids[1]


def test_public_key_files_load_from_pem_and_from_saved_keys(daemon: Daemon, tmp_path: Path) -> None:
    keys_json, [entry] = served_keys(daemon)
    (tmp_path / "keys.json").write_bytes(keys_json)
    (tmp_path / "host.pem").write_text(entry["public_key_pem"])
    raw = base64.b64decode(entry["public_key_raw_b64"])
    for name in ("keys.json", "host.pem"):
        loaded = load_public_key(tmp_path / name)
        assert loaded.public_bytes(Encoding.Raw, PublicFormat.Raw) == raw
    (tmp_path / "forged.json").write_text(json.dumps({"keys": [{**entry, "keyid": "0" * 64}]}))
    with pytest.raises(ConfigError, match="keyid does not match"):
        load_public_keys(tmp_path / "forged.json")
    other = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    mixed = {**entry, "x": base64.urlsafe_b64encode(other).rstrip(b"=").decode()}
    (tmp_path / "mixed.json").write_text(json.dumps({"keys": [mixed]}))
    with pytest.raises(ConfigError, match="x does not match its PEM"):
        load_public_keys(tmp_path / "mixed.json")


# --- rotation ---------------------------------------------------------------------------------


def _rolled_back(daemon: Daemon, operation_id: str) -> bytes:
    """Roll the promotion back now; the envelope of its rollback receipt, made now."""
    with daemon.operator() as op:
        rolled = op.post(f"/v1/operations/{operation_id}/rollback", json={"note": "test"})
    assert rolled.status_code == 200, rolled.text
    return envelope_of(daemon, f"/v1/operations/{operation_id}/rollback-receipt.dsse")


@pytest.mark.slow
def test_rotation_signs_new_envelopes_with_the_new_key_and_old_ones_still_verify(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    """An envelope is made once, when its receipt is: a rotation re-signs nothing."""
    operation_id, _ = promoted(daemon, repo, identity)
    path = f"/v1/operations/{operation_id}/receipt.dsse"
    old_keys, [old] = served_keys(daemon)
    (tmp_path / "old-keys.json").write_bytes(old_keys)
    (tmp_path / "before.dsse").write_bytes(envelope_of(daemon, path))

    rotated = cli("keys", "rotate", "--state-dir", str(daemon.state_dir), "--json", cwd=tmp_path)
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    new_keys, [new, retired] = served_keys(daemon)  # the running daemon sees the rotation
    assert json.loads(rotated.stdout)["active_keyid"] == new["keyid"] != old["keyid"]
    assert (new["status"], retired["status"], retired["keyid"]) == (
        "active",
        "retired",
        old["keyid"],
    )
    assert retired["not_after"] == new["not_before"] is not None
    assert retired["public_key_pem"] == old["public_key_pem"]
    (tmp_path / "new-keys.json").write_bytes(new_keys)
    assert envelope_of(daemon, path) == (tmp_path / "before.dsse").read_bytes()  # as stored
    (tmp_path / "after.dsse").write_bytes(_rolled_back(daemon, operation_id))
    assert (
        json.loads((tmp_path / "after.dsse").read_bytes())["signatures"][0]["keyid"] == new["keyid"]
    )

    for envelope, keyid in (("before.dsse", old["keyid"]), ("after.dsse", new["keyid"])):
        done = receipt_cli("verify", envelope, "--keys", "new-keys.json", cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"signature: verified with key {keyid}" in done.stdout
    stale = receipt_cli("verify", "after.dsse", "--keys", "old-keys.json", cwd=tmp_path)
    assert stale.returncode == 65, stale.stdout + stale.stderr
    assert "wrong key" in stale.stderr
    listed = cli("keys", "list", "--state-dir", str(daemon.state_dir), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].startswith(f"active   {new['keyid']} from ")
    assert listed.stdout.splitlines()[1].startswith(f"retired  {old['keyid']} from ")


def test_rotation_survives_a_restart_and_keeps_the_retired_key_listed(
    tmp_path: Path, repo: Path
) -> None:
    state = tmp_path / "state"
    with running_daemon(state, {"work": repo}) as running:
        first = served_keys(running)[1]
    done = cli("keys", "rotate", "--state-dir", str(state), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    with running_daemon(state, {"work": repo}) as running:
        second = served_keys(running)[1]
    assert [k["keyid"] for k in second][1:] == [first[0]["keyid"]]
    assert second[0]["status"] == "active" and second[1]["status"] == "retired"


def test_stolen_retired_key_cannot_pass_as_the_host_after_rotation(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    """The retired private key is gone from the host; a copy taken before no longer matters."""
    credentials = daemon.state_dir / "credentials"
    operation_id, _ = promoted(daemon, repo, identity)
    stolen = tmp_path / "stolen.key"
    shutil.copyfile(credentials / "host-signing.key", stolen)
    done = cli("keys", "rotate", "--state-dir", str(daemon.state_dir), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (credentials / "host-signing.key").read_bytes() != stolen.read_bytes()
    assert not (credentials / "host-signing.key.next").exists()
    new_keys, [new, _] = served_keys(daemon)
    after = json.loads(_rolled_back(daemon, operation_id))  # a receipt made after rotation
    assert after["signatures"][0]["keyid"] == new["keyid"]
    kept = b"".join(p.read_bytes() for p in credentials.iterdir() if p.is_file())
    assert stolen.read_bytes() not in kept


# --- --worktree and --chain ---------------------------------------------------------------------


def test_worktree_reports_match_changed_and_missing_per_target(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    keys_json, _ = served_keys(daemon)
    (tmp_path / "keys.json").write_bytes(keys_json)
    (tmp_path / "r.dsse").write_bytes(
        envelope_of(daemon, f"/v1/operations/{operation_id}/receipt.dsse")
    )
    args = ("verify", "r.dsse", "--keys", "keys.json", "--worktree", str(repo))
    clean = receipt_cli(*args, "--json", cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    statuses = {t["path"]: t["status"] for t in json.loads(clean.stdout)["worktree"]}
    assert statuses == {"src/app.py": "match", "src/util/consts.py": "match", "README.md": "match"}

    (repo / "src/app.py").write_bytes(b"print('edited by hand')\n")
    (repo / "src/util/consts.py").unlink()
    (repo / "README.md").write_bytes(b"back again\n")
    drifted = receipt_cli(*args, cwd=tmp_path)
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    lines = drifted.stdout.splitlines()
    edited, back = sha(b"print('edited by hand')\n"), sha(b"back again\n")
    assert f"changed  src/app.py (receipt 100644 {sha(V2)}, now 100644 {edited})" in lines
    assert f"missing  src/util/consts.py (receipt 100644 {sha(NEW)}, now absent)" in lines
    assert f"changed  README.md (receipt absent, now 100644 {back})" in lines
    assert "worktree: 0 match, 2 changed, 1 missing" in lines

    unsigned = receipt_cli("verify", "r.dsse", "--worktree", str(repo), cwd=tmp_path)
    assert unsigned.returncode == 3, unsigned.stdout  # an unchecked signature comes first


def test_worktree_does_not_follow_a_symlinked_parent(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    keys_json, _ = served_keys(daemon)
    (tmp_path / "keys.json").write_bytes(keys_json)
    (tmp_path / "r.dsse").write_bytes(
        envelope_of(daemon, f"/v1/operations/{operation_id}/receipt.dsse")
    )
    elsewhere = tmp_path / "elsewhere" / "util"
    elsewhere.mkdir(parents=True)
    (elsewhere / "consts.py").write_bytes(NEW)  # the right bytes, in the wrong place
    shutil.rmtree(repo / "src/util")
    (repo / "src/util").symlink_to(elsewhere)
    done = receipt_cli(
        "verify", "r.dsse", "--keys", "keys.json", "--worktree", str(repo), "--json", cwd=tmp_path
    )
    assert done.returncode == 1, done.stdout + done.stderr
    [consts] = [t for t in json.loads(done.stdout)["worktree"] if t["path"] == "src/util/consts.py"]
    assert (consts["status"], consts["found"]) == ("changed", "parent is not a directory")


def test_chain_links_the_promotion_to_its_verification_from_files_and_from_the_server(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, bundle = promoted(daemon, repo, identity)
    keys_json, _ = served_keys(daemon)
    (tmp_path / "keys.json").write_bytes(keys_json)
    (tmp_path / "p.dsse").write_bytes(
        envelope_of(daemon, f"/v1/operations/{operation_id}/receipt.dsse")
    )
    (tmp_path / "v.dsse").write_bytes(
        envelope_of(daemon, f"/v1/bundles/{bundle['bundle_id']}/verification.dsse")
    )
    files = receipt_cli(
        "verify", "--chain", "v.dsse", "p.dsse", "--keys", "keys.json", cwd=tmp_path
    )
    assert files.returncode == 0, files.stdout + files.stderr
    assert f"bundle_id: {bundle['bundle_id']} in both" in files.stdout
    assert "valid chain" in files.stdout
    (tmp_path / "token").write_text(daemon.orchestrator_token)
    served = receipt_cli(
        "verify", "--chain", "--operation", operation_id, "--url", daemon.url,
        "--token-file", "token", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert served.returncode == 0, served.stdout + served.stderr
    summary = json.loads(served.stdout)
    assert summary["valid"] is True
    assert [d["kind"] for d in summary["documents"]] == [
        "verification_receipt",
        "promotion_receipt",
    ]
    unsigned = receipt_cli("verify", "--chain", "v.dsse", "p.dsse", cwd=tmp_path)
    assert unsigned.returncode == 78, unsigned.stdout + unsigned.stderr
    assert "--chain checks signatures" in unsigned.stderr


def test_chain_with_another_bundles_verification_is_broken(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    _, other, _ = submit(  # verified, never promoted: no lease needed
        daemon, repo, identity, [("src/app.py", V1, b"v3\n")], grant_id="grt_test2", lease=False
    )
    keys_json, _ = served_keys(daemon)
    (tmp_path / "keys.json").write_bytes(keys_json)
    (tmp_path / "p.dsse").write_bytes(
        envelope_of(daemon, f"/v1/operations/{operation_id}/receipt.dsse")
    )
    (tmp_path / "v.dsse").write_bytes(
        envelope_of(daemon, f"/v1/bundles/{other['bundle_id']}/verification.dsse")
    )
    done = receipt_cli("verify", "--chain", "p.dsse", "v.dsse", "--keys", "keys.json", cwd=tmp_path)
    assert done.returncode == 65, done.stdout + done.stderr
    assert "broken chain: the promotion names verification receipt" in done.stderr


def test_verify_help_documents_every_exit_code(tmp_path: Path) -> None:
    done = receipt_cli("verify", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for code in (
        "0 valid",
        "1 valid, but a --worktree target",
        "3 hash ok",
        "65 receipt_invalid",
        "78 config_error",
    ):
        assert code in text, code
