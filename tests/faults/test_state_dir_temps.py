"""S8: a kill between each syscall of a receipt's write leaves no stray file in the state dir.

A real daemon promotes a bundle with ``PROMOTER_FAULTS`` set to kill it (``os._exit``,
as SIGKILL: no cleanup) right after one syscall of the promotion receipt's write into
the audit store, a copy written after the outcome's commit
(protocol: storage#receipt-in-outcome-commit): the kind directory's creation, the temp's creation
and write, its link into place, a named temp's unlink (the copy is never flushed). Each runs twice: with anonymous temps
(``O_TMPFILE``), and as on a filesystem without them (``state_tmpfile=EOPNOTSUPP``:
named temps, which the next start sweeps). A fresh daemon on the same state directory
must find the operation ``completed`` (its commit came first) and serve its receipt from
the row, writing the copy again where it is missing: exactly one receipt file,
byte-identical to the one served, and the whole state directory must hold exactly the
expected names: no temp anywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import httpx
import pytest

from promoter.store.state_temps import PREFIX
from tests.support.flows import init_repo, make_bundle, make_grant, sha
from tests.support.process import (
    DaemonProcess,
    killed_promotion,
)

FILES = {"src/a.py": b"v1 a\n", "src/b.py": b"v1 b\n"}
NEW = {"src/a.py": b"v2 a\n", "src/c.py": b"new c\n"}
CHANGES: list[tuple[str, bytes | None, bytes | None]] = [
    ("src/a.py", FILES["src/a.py"], NEW["src/a.py"]),
    ("src/c.py", None, NEW["src/c.py"]),
]
NAMED = "state_tmpfile=EOPNOTSUPP@1+"

# (point, whether a named temp is left in the receipt directory by that kill); the
# receipt's file is a copy written after the outcome's commit, with no flush
# (protocol: storage#receipt-in-outcome-commit): no fsync of its temp, of its folder or of a folder
# made for it
POINTS = [
    ("audit_promotion_after_mkdir", False),
    ("audit_promotion_after_create", True),
    ("audit_promotion_after_write", True),
    ("audit_promotion_after_link", True),
    ("audit_promotion_after_unlink_temp", False),  # named temps only
]


def _listing(state: Path) -> set[str]:
    """Every name under ``state``, relative, directories with a trailing ``/``."""
    found: set[str] = set()
    for root, dirs, files in os.walk(state):
        rel = Path(root).relative_to(state)
        found |= {f"{(rel / d).as_posix()}/" for d in dirs}
        found |= {(rel / f).as_posix() for f in files}
    return found


def _expected(state: Path, request: dict[str, object], op_id: str) -> set[str]:
    blobs = {sha(d) for _, old, new in CHANGES for d in (old, new) if d is not None}
    names = {
        "audit/",
        "audit/tmp/",
        "audit/blobs/",
        "audit/blobs/sha256/",
        "audit/grants/",
        "audit/grants/grt_test1.json",
        "audit/bundles/",
        f"audit/bundles/{request['bundle_id']}.json",
        "audit/receipts/",
        "audit/receipts/verification/",
        f"audit/receipts/verification/{request['bundle_id']}.json",
        "audit/receipts/promotion/",
        f"audit/receipts/promotion/{op_id}.json",
        "credentials/",
        "credentials/orchestrator.token",
        "credentials/operator.token",
        "credentials/host-signing.key",
        "credentials/host-keys.json",
        "snapshots/",
        "quota/",
        "host-id",  # the host the directory belongs to, recorded at the first start
    }
    names |= {f"audit/blobs/sha256/{h[:2]}/" for h in blobs}
    names |= {f"audit/blobs/sha256/{h[:2]}/{h}" for h in blobs}
    names |= {f"quota/{n}" for n in os.listdir(state / "quota")}  # one record per run
    assert len(os.listdir(state / "quota")) == 1
    # the database (SQLite unless the suite runs on another URL), as the daemon left it
    names |= {n for n in os.listdir(state) if n.startswith("promoter.db")}
    return names


@pytest.mark.slow
@pytest.mark.parametrize("named", [False, True], ids=["anonymous", "named"])
@pytest.mark.parametrize(("point", "leaves_named_temp"), POINTS, ids=[p for p, _ in POINTS])
def test_kill_between_receipt_write_syscalls_leaves_no_stray_file_in_state_dir(
    point: str, leaves_named_temp: bool, named: bool, tmp_path: Path
) -> None:
    if point.endswith("_unlink_temp") and not named:
        pytest.skip("an anonymous temp has no name to unlink")
    repo = init_repo(tmp_path / "work", FILES)
    state = tmp_path / "state"
    faults = f"{point}=kill" + (f",{NAMED}" if named else "")
    request = killed_promotion(state, repo, CHANGES, faults)

    receipts = state / "audit" / "receipts" / "promotion"
    left = sorted(p.name for p in receipts.iterdir()) if receipts.is_dir() else []
    temps = [n for n in left if n.startswith(PREFIX)]
    assert len(temps) == (1 if named and leaves_named_temp else 0), left

    second = DaemonProcess(state, {"work": repo})
    try:
        assert not any(n.startswith(PREFIX) for n in os.listdir(receipts))  # swept on start
        if temps:
            assert any(
                f"removed leftover temp {receipts / temps[0]}" in line for line in second.log
            )
        with second.client() as orch:
            operator = {"Authorization": f"Bearer {second.token('operator')}"}
            ops = orch.get("/v1/operations", headers=operator).json()["operations"]
            assert len(ops) == 1
            op_id = ops[0]["operation_id"]
            assert orch.get(f"/v1/operations/{op_id}").json()["status"] == "completed"
            served = orch.get(f"/v1/operations/{op_id}/receipt")
            assert served.status_code == 200
    finally:
        second.stop()

    stored = (receipts / f"{op_id}.json").read_bytes()
    assert stored == served.content
    receipt = json.loads(stored)
    assert (receipt["operation_id"], receipt["bundle_id"]) == (op_id, request["bundle_id"])
    assert [t["path"] for t in receipt["targets"]] == ["src/a.py", "src/c.py"]
    assert (repo / "src/a.py").read_bytes() == NEW["src/a.py"]
    assert (repo / "src/c.py").read_bytes() == NEW["src/c.py"]
    assert _listing(state) == _expected(state, request, op_id)


@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    [
        "audit_verification_after_mkdir",
        "audit_verification_after_create",
        "audit_verification_after_fsync",
        "audit_verification_after_link",
    ],
)
def test_kill_while_a_verification_receipt_is_written_leaves_no_stray_file(
    point: str, tmp_path: Path
) -> None:
    """The same for the verification receipt (named temps): the executor submits the bundle
    again after the restart and gets the receipt; nothing else is left."""
    repo = init_repo(tmp_path / "work", FILES)
    state = tmp_path / "state"
    first = DaemonProcess(state, {"work": repo}, faults=f"{point}=kill,{NAMED}")
    try:
        with first.client() as orch:
            identity = orch.get("/v1/repositories").json()["repositories"][0]["repository_identity"]
            grant = make_grant(repo, identity)
            assert orch.post("/v1/grants", json=grant).status_code == 201
        bundle = make_bundle(grant, CHANGES)
        with first.executor("run_1") as ex:
            for _, old, new in CHANGES:
                for data in (d for d in (old, new) if d is not None):
                    ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data)
            with contextlib.suppress(httpx.HTTPError):
                ex.post("/v1/bundles", json=bundle)  # the daemon dies mid-request
        assert first.wait_exit() == 137
    finally:
        first.kill()

    second = DaemonProcess(state, {"work": repo})
    try:
        with second.executor("run_1") as ex:
            again = ex.post("/v1/bundles", json=bundle)
            # 201 while no receipt was in place; once linked, it is the stored one: 200
            linked = point == "audit_verification_after_link"
            assert again.status_code == (200 if linked else 201), again.text
            receipt = again.json()["verification_receipt"]
            served = ex.get(f"/v1/bundles/{bundle['bundle_id']}/verification")
            assert served.status_code == 200
    finally:
        second.stop()
    kind = state / "audit" / "receipts" / "verification"
    assert os.listdir(kind) == [f"{bundle['bundle_id']}.json"]
    stored = (kind / f"{bundle['bundle_id']}.json").read_bytes()
    assert stored == served.content
    assert json.loads(stored)["receipt_sha256"] == receipt["receipt_sha256"]
    assert json.loads(stored)["status"] == "passed"
    expected = _expected(state, {"bundle_id": bundle["bundle_id"]}, "")
    expected -= {"audit/receipts/promotion/", "audit/receipts/promotion/.json"}
    assert _listing(state) == expected
