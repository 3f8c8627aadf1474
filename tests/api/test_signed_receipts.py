"""Signed receipts through the real server, verified offline by the CLI (SPEC §3.9, §7).

The CLI runs in a subprocess with no server address and no state directory: it gets
only the saved ``GET /v1/keys`` answer (or a PEM) and the saved envelope.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from promoter.cli.receipt_cmd import load_public_key, load_public_keys
from promoter.engine.signing import verify_document
from promoter.errors import ConfigError
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import sha
from tests.support.promotion import promote, submit

V1 = b"print('v1')\n"
PROMOTION_TYPE = "application/vnd.promoter.PatchPromotionReceiptV1+json"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
    env.pop("PROMOTER_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "promoter.cli.main", "receipt", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def promoted(daemon: Daemon, repo: Path, identity: str) -> tuple[str, dict[str, Any]]:
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, b"print('v2')\n")])
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
    return str(answer.json()["operation_id"]), bundle


def served_keys(daemon: Daemon) -> tuple[bytes, dict[str, str]]:
    with daemon.client() as anonymous:
        answer = anonymous.get("/v1/keys")
    assert answer.status_code == 200, answer.text
    [entry] = answer.json()["keys"]
    return answer.content, entry


def test_promotion_envelope_verifies_offline_with_the_saved_keys(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    keys_json, entry = served_keys(daemon)
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
    body = base64.b64decode(envelope["payload"])
    assert body == plain.content
    assert envelope["payloadType"] == PROMOTION_TYPE
    [signature] = envelope["signatures"]
    assert signature["keyid"] == entry["keyid"]
    Ed25519PublicKey.from_public_bytes(raw).verify(
        base64.b64decode(signature["sig"]),
        b"DSSEv1 %d %s %d %s" % (len(PROMOTION_TYPE), PROMOTION_TYPE.encode(), len(body), body),
    )

    (tmp_path / "keys.json").write_bytes(keys_json)
    (tmp_path / "host.pem").write_text(entry["public_key_pem"])
    (tmp_path / "receipt.dsse").write_bytes(signed.content)
    for key in ("keys.json", "host.pem"):
        done = cli("verify", "receipt.dsse", "--public-key", key, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"signature: verified with key {entry['keyid']}" in done.stdout
        assert json.loads(plain.content)["receipt_sha256"] in done.stdout

    tampered = body.replace(b'"exists":true', b'"exists":false')
    assert tampered != body
    (tmp_path / "tampered.dsse").write_text(
        json.dumps({**envelope, "payload": base64.b64encode(tampered).decode()})
    )
    done = cli("verify", "tampered.dsse", "--public-key", "keys.json", cwd=tmp_path)
    assert done.returncode == 65, done.stdout + done.stderr
    assert "signature does not verify" in done.stderr
    assert "valid" not in done.stdout


def test_envelope_from_this_host_fails_against_another_hosts_key(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    operation_id, _ = promoted(daemon, repo, identity)
    with daemon.orchestrator() as orch:
        (tmp_path / "receipt.dsse").write_bytes(
            orch.get(f"/v1/operations/{operation_id}/receipt.dsse").content
        )
    other = Ed25519PrivateKey.generate().public_key()
    (tmp_path / "other.pem").write_bytes(
        other.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    done = cli("verify", "receipt.dsse", "--public-key", "other.pem", cwd=tmp_path)
    assert done.returncode == 65, done.stdout + done.stderr
    assert "wrong key" in done.stderr
    unchecked = cli("verify", "receipt.dsse", cwd=tmp_path)
    assert unchecked.returncode == 0, unchecked.stderr
    assert "signature: NOT CHECKED" in unchecked.stdout


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
    _, entry = served_keys(daemon)
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(entry["public_key_raw_b64"]))
    path = f"/v1/bundles/{bundle['bundle_id']}/verification.dsse"
    with daemon.executor("run_1") as own, daemon.executor("run_2") as other:
        answer = own.get(path)
        assert other.get(path).json()["code"] == "forbidden"
    assert answer.status_code == 200, answer.text
    result = verify_document(answer.content, [key])
    assert (result.kind, result.keyid) == ("verification_receipt", entry["keyid"])
    assert result.identity_sha256 == receipt["receipt_sha256"]
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
    with daemon.orchestrator() as orch:
        after = orch.get(path)
    assert after.status_code == 200, after.text
    _, entry = served_keys(daemon)
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(entry["public_key_raw_b64"]))
    result = verify_document(after.content, [key])
    assert result.kind == "rollback_receipt"
    assert base64.b64decode(after.json()["payload"]) == rolled.content


def test_host_key_survives_a_restart(tmp_path: Path, repo: Path) -> None:
    keyids = []
    for _ in range(2):
        with running_daemon(tmp_path / "state", {"work": repo}) as running:
            keyids.append(served_keys(running)[1]["keyid"])
    assert keyids[0] == keyids[1]


def test_public_key_files_load_from_pem_and_from_saved_keys(daemon: Daemon, tmp_path: Path) -> None:
    keys_json, entry = served_keys(daemon)
    (tmp_path / "keys.json").write_bytes(keys_json)
    (tmp_path / "host.pem").write_text(entry["public_key_pem"])
    raw = base64.b64decode(entry["public_key_raw_b64"])
    for name in ("keys.json", "host.pem"):
        loaded = load_public_key(tmp_path / name)
        assert loaded.public_bytes(Encoding.Raw, PublicFormat.Raw) == raw
    (tmp_path / "forged.json").write_text(json.dumps({"keys": [{**entry, "keyid": "0" * 64}]}))
    with pytest.raises(ConfigError, match="keyid does not match"):
        load_public_keys(tmp_path / "forged.json")
