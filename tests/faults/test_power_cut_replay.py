"""Power cuts, replayed: every flush-bounded prefix of a promotion's disk writes, recovered.

The person's worktree and the daemon's state directory (its SQLite ledger included) live on
an ext4 file system whose block device records every write and every cache flush in order
(``tests/support/blocklog.py``). An eight-change promotion (modify, create files and links
in new directories, delete) runs once on it. Then, for every point where the device had just flushed, the disk
is rebuilt as a power cut there leaves it — the writes that reached the device, nothing
that did not — mounted (ext4 replays its journal), and a fresh daemon starts on it:

- the operation is in the ledger whenever the daemon had passed ``after_journal`` (its
  plan's commit had returned from its flush) before the cut;
- with no operation, the worktree is byte for byte what it was, and the promotion, asked
  again, completes;
- with one, recovery completes it: every target new, exactly;
- either way, at the end nothing of promoter's is left in the worktree (no temp, no
  directory the new state does not have), the person's own files are untouched, ``.git``
  is untouched, and the receipt is served from the ledger, its file (a copy written
  without a flush) written again from the row when the cut lost it.
"""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support import blocklog
from tests.support.flows import init_repo, make_bundle, make_grant, sha, state, ts
from tests.support.process import DaemonProcess
from tests.support.promotion import git_dir_digest, tree_bytes

FILES = {f"src/m{i}.py": f"v1 {i}\n".encode() for i in range(3)}
FILES["README.md"] = b"# project\n"
FILES["gone.txt"] = b"to delete\n"
NEW = {f"src/m{i}.py": f"v2 {i}\n".encode() for i in range(3)}
CREATED = {"src/new/deep/a.bin": b"\x00\x01\x02", "src/new/b.txt": b""}
LINKS = {"src/new/link": b"b.txt", "src/linked/to": b"../m0.py"}  # created as links (120000)
PERSON = {"notes.txt": b"the person's own, never committed\n"}

# the ledger on the recorded disk is SQLite's file; ``PROMOTER_REQUIRE_POWERCUT`` (CI sets
# it) turns the skip where a recorded disk cannot be made (no root, FUSE or loop) into a failure
pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]
WHY_NOT = blocklog.available()
if WHY_NOT and os.environ.get("PROMOTER_REQUIRE_POWERCUT"):
    raise RuntimeError(f"PROMOTER_REQUIRE_POWERCUT is set, but {WHY_NOT}")
pytestmark.append(pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or ""))


def _changes() -> list[tuple[str, bytes | None, bytes | None]]:
    changes: list[tuple[str, bytes | None, bytes | None]] = [
        (p, FILES[p], d) for p, d in NEW.items()
    ]
    changes += [(p, None, d) for p, d in CREATED.items()]
    changes.append(("gone.txt", FILES["gone.txt"], None))
    return changes


def _prepare(daemon: DaemonProcess, repo: Path) -> dict[str, object]:
    """Grant (links inside the worktree allowed), lease, blobs one ``PUT`` each, bundle."""
    with daemon.client() as orch:
        identity = orch.get("/v1/repositories").json()["repositories"][0]["repository_identity"]
        grant = make_grant(repo, identity, symlinks="inside")
        assert orch.post("/v1/grants", json=grant).status_code == 201
        lease = {"run_id": "run_1", "attempt": 1, "generation": 1, "resume_epoch": 0,
                 "fence": 7, "expires_at": ts(timedelta(hours=1))}  # fmt: skip
        assert orch.put("/v1/leases/wf_1/implement", json=lease).status_code == 200
    links = [
        {"path": p, "operation": "create", "old": state(None), "new": state(t, "120000")}
        for p, t in LINKS.items()
    ]
    plain = [
        {"path": p, "operation": "create" if old is None else "delete" if new is None
         else "modify", "old": state(old), "new": state(new)}
        for p, old, new in _changes()
    ]  # fmt: skip
    bundle = make_bundle(grant, plain + links)
    blobs = {d for _, old, new in _changes() for d in (old, new) if d is not None}
    with daemon.executor("run_1") as ex:
        for data in sorted(blobs | set(LINKS.values())):
            answer = ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data)
            assert answer.status_code in (200, 201), answer.text
        answer = ex.post("/v1/bundles", json=bundle)
        assert answer.status_code == 201, answer.text
    receipt = answer.json()["verification_receipt"]
    return {"bundle_id": bundle["bundle_id"], "fence": 7, "wait": True,
            "verification_receipt_sha256": receipt["receipt_sha256"]}  # fmt: skip


def _dirs(files: dict[str, bytes]) -> set[str]:
    out = {""}
    for path in files:
        parts = path.split("/")[:-1]
        out |= {"/".join(parts[: i + 1]) for i in range(len(parts))}
    return out


def _daemon(state: Path, repo: Path, trace: Path | None = None) -> DaemonProcess:
    env = {"PROMOTER_DATABASE_URL": f"sqlite:///{state / 'promoter.db'}"}
    if trace is not None:
        env["PROMOTER_FAULTS_TRACE"] = str(trace)
    return DaemonProcess(state, {"work": repo}, extra_env=env)


def _leftovers(repo: Path, expected: dict[str, bytes]) -> list[str]:
    """What is in the worktree beyond ``expected``'s files and directories (``.git`` aside)."""
    dirs = _dirs(expected)
    extra = []
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo).as_posix()
        if rel == ".git" or rel.startswith(".git/"):
            continue
        if path.is_dir() and not path.is_symlink():
            if rel not in dirs:
                extra.append(rel + "/")
        elif rel not in expected:
            extra.append(rel)
    return extra


def test_every_flush_bounded_prefix_of_a_promotion_recovers_exactly(tmp_path: Path) -> None:
    base = tmp_path / "base.img"
    blocklog.make_image(base)
    image = tmp_path / "disk.img"
    shutil.copyfile(base, image)
    mnt = tmp_path / "mnt"
    repo, state = mnt / "work", mnt / "state"

    with blocklog.RecordedDisk(image, mnt, tmp_path) as disk:
        init_repo(repo, FILES)
        for rel, data in PERSON.items():
            (repo / rel).write_bytes(data)
        daemon = _daemon(state, repo, disk.trace)
        try:
            request = _prepare(daemon, repo)
            before, git_before = tree_bytes(repo), git_dir_digest(repo)
            os.sync()
            start = len(disk.records())
            with daemon.client() as orch:
                answer = orch.post("/v1/promotions", json=request)
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "completed"
        finally:
            daemon.stop()
        records = disk.records()

    old = {k: v[0] for k, v in before.items()}
    expected = {**old, **NEW, **CREATED, **LINKS}  # a link's bytes: its target text
    del expected["gone.txt"]
    points = list(blocklog.flush_points(records, start))
    assert len(points) >= 10, points  # the promotion's own flushes, at the least
    outcomes: dict[str, int] = {}
    for upto in points:
        crash = tmp_path / f"cut-{upto}.img"  # a new file each time: no page of the last one
        journaled = b"after_journal\n" in b"".join(
            r.data for r in records[:upto] if r.kind == blocklog.TRACE_RECORD
        )
        blocklog.replay(base, records, upto, crash)
        with blocklog.Mounted(crash, mnt):
            try:
                outcome = _recover_and_check(state, repo, request, old, expected, journaled)
            except AssertionError as failed:
                raise AssertionError(f"power cut at record {upto} of {len(records)}") from failed
            assert git_dir_digest(repo) == git_before, upto
        crash.unlink()
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    # both kinds of cut happened: before the plan's commit and after it
    assert outcomes.get("asked again", 0) and outcomes.get("recovered", 0) + outcomes.get(
        "already completed", 0
    ), outcomes


def _recover_and_check(
    state: Path,
    repo: Path,
    request: dict[str, object],
    old: dict[str, bytes],
    expected: dict[str, bytes],
    journaled: bool,
) -> str:
    daemon = _daemon(state, repo)
    try:
        with daemon.client() as orch:
            listed = orch.get(
                "/v1/operations", headers={"Authorization": f"Bearer {daemon.token('operator')}"}
            ).json()["operations"]
            if not listed:
                assert not journaled, "the plan's commit had returned, its row is gone"
                now = {k: v[0] for k, v in tree_bytes(repo).items()}
                assert now == old
                assert _leftovers(repo, old) == []
                again = orch.post("/v1/promotions", json=request)
                assert again.json()["status"] == "completed", again.text
                outcome = "asked again"
            else:
                (view,) = listed
                op_id, status = view["operation_id"], view["status"]
                if status == "completed":
                    outcome = "already completed"
                else:
                    assert status == "needs_recovery", view
                    recovered = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
                    assert recovered.status_code == 200, recovered.text
                    assert recovered.json()["status"] == "completed", recovered.text
                    outcome = "recovered"
                again = orch.post("/v1/promotions", json=request).json()
                assert (again["operation_id"], again["status"]) == (op_id, "completed")
            (view,) = orch.get(
                "/v1/operations", headers={"Authorization": f"Bearer {daemon.token('operator')}"}
            ).json()["operations"]
            receipt = orch.get(f"/v1/operations/{view['operation_id']}/receipt")
            assert receipt.status_code == 200, receipt.text
    finally:
        daemon.stop()
    now = {k: v[0] for k, v in tree_bytes(repo).items()}
    assert now == expected
    assert _leftovers(repo, expected) == []
    # the receipt's file is a copy of the ledger's row, written again when it is read and
    # was missing after the cut: one file, the row's bytes
    kept = sorted((state / "audit" / "receipts" / "promotion").glob("*.json"))
    assert [(p.name, p.read_bytes()) for p in kept] == [
        (f"{view['operation_id']}.json", receipt.content)
    ]
    return outcome
