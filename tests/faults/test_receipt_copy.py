"""F3: the promotion receipt is part of the outcome's commit; its audit file is a copy.

protocol: storage#receipt-in-outcome-commit: the outcome event, the receipt, its signed envelope and
``completed`` are one durable commit; the file ``audit/receipts/promotion/<op>.json`` is written after it with
no flush, and rebuilt from the ledger's row when it is missing or damaged. Attacked here:

- a daemon killed before that commit (``before_receipt``): recovery completes the
  operation with exactly one receipt and one outcome event;
- a daemon killed after it, while the copy is written (``audit_promotion_after_create``,
  ``…_after_write``): the operation is ``completed``, its copy missing; the receipt is
  served from the row, the file written again byte-identical, and it verifies;
- a receipt file deleted, truncated, forged, replaced by a symlink or a directory after
  completion: never served; rebuilt byte-identical from the row (a damaged one kept
  aside, its bytes untouched), fetched through the CLI and ``GET …/receipt``, and it
  verifies with ``promoter receipt verify``.

Everything through the real server and the real CLI; run on PostgreSQL too with
``PROMOTER_TEST_DATABASE=postgresql``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import rfc8785

from promoter.store import journal
from tests.support.daemon import Daemon
from tests.support.flows import init_repo
from tests.support.process import (
    DaemonProcess,
    killed_promotion,
)
from tests.support.promotion import promote, submit

FILES = {"src/a.py": b"v1 a\n", "README.md": b"# project\n"}
CHANGES: list[tuple[str, bytes | None, bytes | None]] = [
    ("src/a.py", b"v1 a\n", b"v2 a\n"),
    ("src/new/c.py", None, b"new c\n"),
]

# the ``repo`` fixture's files (README.md, src/app.py)
IN_REPO: list[tuple[str, bytes | None, bytes | None]] = [
    ("src/app.py", b"print('v1')\n", b"print('v2')\n"),
    ("src/new/c.py", None, b"new c\n"),
]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env.update({"COLUMNS": "400", "NO_COLOR": "1"})
    return subprocess.run(
        [sys.executable, "-m", "promoter.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )


def _fetched_and_verified(url: str, token: str, op_id: str, tmp: Path) -> bytes:
    """The receipt and its envelope fetched through the CLI, both verified by it; the
    receipt's bytes."""
    (tmp / "orchestrator.token").write_text(token)
    common = ["--url", url, "--token-file", str(tmp / "orchestrator.token")]
    fetched = _cli("receipt", "fetch", op_id, "--out", "r.json", *common, cwd=tmp)
    assert fetched.returncode == 0, fetched.stderr
    signed = _cli("receipt", "fetch", op_id, "--dsse", "--out", "r.dsse", *common, cwd=tmp)
    assert signed.returncode == 0, signed.stderr
    done = _cli("receipt", "verify", "r.dsse", "--keys-from", url, "--json", cwd=tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert (summary["valid"], summary["signature"], summary["hash_ok"]) == (True, "verified", True)
    plain = _cli("receipt", "verify", "r.json", "--no-signature", "--json", cwd=tmp)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert json.loads(plain.stdout)["identity_sha256"] == summary["identity_sha256"]
    envelope = json.loads((tmp / "r.dsse").read_bytes())
    receipt = (tmp / "r.json").read_bytes()
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert rfc8785.dumps(statement["predicate"]) == receipt  # signed: exactly these bytes
    return receipt


def _row_bytes(daemon: Daemon, op_id: str) -> bytes:
    with daemon.services.db.session() as session:
        row = journal.require(session, op_id)
        assert row.receipt is not None and row.status == "completed"
        return bytes(rfc8785.dumps(row.receipt))


def _kept(folder: Path, op_id: str) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith(f".{op_id}.json.damaged-"))


# --- a crash at the outcome's commit, and after it ------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    ["before_receipt", "audit_promotion_after_create", "audit_promotion_after_write"],
)
def test_a_kill_at_the_outcome_commit_or_its_copy_recovers_to_one_receipt_rebuilt_verifying(
    point: str, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    state = tmp_path / "state"
    request = killed_promotion(state, repo, CHANGES, f"{point}=kill")
    folder = state / "audit" / "receipts" / "promotion"
    assert not folder.is_dir() or os.listdir(folder) == []  # no copy before the kill

    second = DaemonProcess(state, {"work": repo})
    try:
        with second.client() as orch:
            operator = {"Authorization": f"Bearer {second.token('operator')}"}
            [op] = orch.get("/v1/operations", headers=operator).json()["operations"]
            op_id = op["operation_id"]
            view = orch.get(f"/v1/operations/{op_id}").json()
            if point == "before_receipt":  # nothing of the commit: recovery makes it
                assert (view["status"], view.get("receipt_sha256")) == ("needs_recovery", None)
                recovered = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
                assert recovered.status_code == 200, recovered.text
                view = recovered.json()
            else:  # the commit made: completed, its copy missing until it is read
                assert not (folder / f"{op_id}.json").exists()
            assert view["status"] == "completed", view
            assert [e["kind"] for e in view["events"]].count("outcome") == 1
            again = orch.post("/v1/promotions", json=request).json()
            assert (again["operation_id"], again["status"]) == (op_id, "completed")
        served = _fetched_and_verified(second.url, second.token("orchestrator"), op_id, tmp_path)
    finally:
        second.stop()
    assert os.listdir(folder) == [f"{op_id}.json"]
    assert (folder / f"{op_id}.json").read_bytes() == served
    receipt = json.loads(served)
    assert receipt["receipt_sha256"] == view["receipt_sha256"]
    assert receipt["events"]["outcome"] == next(
        e["event_id"] for e in view["events"] if e["kind"] == "outcome"
    )
    assert [t["path"] for t in receipt["targets"]] == ["src/a.py", "src/new/c.py"]
    assert (repo / "src/a.py").read_bytes() == b"v2 a\n"


# --- a receipt file deleted or damaged after completion ------------------------------------


def _damage(path: Path, how: str, tmp: Path) -> bytes | None:
    """Damage the copy at ``path``; the bytes now at its name (None: no file there)."""
    recorded = path.read_bytes()
    path.chmod(0o644)
    if how == "deleted":
        path.unlink()
        return None
    if how == "truncated":
        path.write_bytes(recorded[: len(recorded) // 2])
    elif how == "forged":  # valid JSON, a receipt hash of its own: still not the row's
        path.write_bytes(recorded.replace(b"src/new/c.py", b"src/new/d.py"))
    elif how == "emptied":
        path.write_bytes(b"")
    elif how == "symlinked":  # a symlink to the right bytes elsewhere is not the copy
        (tmp / "elsewhere.json").write_bytes(recorded)
        path.unlink()
        path.symlink_to(tmp / "elsewhere.json")
        return None
    elif how == "directory":
        path.unlink()
        path.mkdir()
        return None
    return path.read_bytes()


HOW = ["deleted", "truncated", "forged", "emptied", "symlinked", "directory"]


@pytest.mark.parametrize("how", HOW)
def test_a_receipt_file_damaged_after_completion_is_rebuilt_from_the_row_and_verifies(
    how: str, daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, IN_REPO)
    answer = promote(daemon, bundle, receipt)
    assert answer.json()["status"] == "completed", answer.text
    op_id = answer.json()["operation_id"]
    folder = daemon.state_dir / "audit" / "receipts" / "promotion"
    path = folder / f"{op_id}.json"
    recorded = _row_bytes(daemon, op_id)
    assert path.read_bytes() == recorded  # the copy, as written after the commit

    damaged = _damage(path, how, tmp_path)
    with daemon.orchestrator() as orch:
        served = orch.get(f"/v1/operations/{op_id}/receipt")
    assert served.status_code == 200, served.text
    assert served.content == recorded  # the row's bytes, never the file's
    assert path.is_file() and not path.is_symlink()
    assert path.read_bytes() == recorded  # rebuilt, byte-identical
    assert path.stat().st_mode & 0o777 == 0o444
    kept = _kept(folder, op_id)
    if how == "deleted":
        assert kept == []
    elif how == "directory":
        assert [p.is_dir() for p in kept] == [True]
    elif how == "symlinked":
        assert [os.readlink(p) for p in kept] == [str(tmp_path / "elsewhere.json")]
    else:
        assert [p.read_bytes() for p in kept] == [damaged]  # kept aside, untouched

    cli_dir = tmp_path / "cli"
    cli_dir.mkdir()
    fetched = _fetched_and_verified(daemon.url, daemon.orchestrator_token, op_id, cli_dir)
    assert fetched == recorded
    checked = _cli("receipt", "verify", str(path), "--no-signature", "--json", cwd=cli_dir)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert _kept(folder, op_id) == kept  # a good copy is left as it is
    assert _row_bytes(daemon, op_id) == recorded
