"""A healthy host reads its epoch once a group of a promotion, a rollback or a restore,
never once a file (protocol: promotion#fence-stops-every-write).

Through the real server, its host lease renewed at start: while that lease surely runs no
fence can land, so the check before every further temp, name and step of a group
(``fencing.check_unless_leased``) asks the ledger nothing; only the check before each
group after the first (``Driver``'s ``between_groups``) reads the epoch. The reads are
counted at ``fencing.check``, the one function that reads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from promoter.engine import fencing
from promoter.store.db import Database
from tests.support.daemon import Daemon
from tests.support.promotion import completed, tree_bytes

COUNT = 130  # three groups of TEMPS_TOGETHER = 64
FILES = {f"src/f{i:03d}.txt": b"old %d\n" % i for i in range(COUNT)}

pytestmark = pytest.mark.repo("lab", FILES)


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every epoch read from now on (one item each)."""
    reads: list[int] = []
    real = fencing.check

    def check(db: Database) -> None:
        reads.append(1)
        real(db)

    monkeypatch.setattr(fencing, "check", check)
    return reads


def test_a_healthy_hosts_rollback_of_130_files_reads_its_epoch_once_a_group(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = tree_bytes(repo)
    changes = [(p, old, old.replace(b"old", b"new")) for p, old in FILES.items()]
    operation_id = completed(daemon, repo, changes, name="lab")
    reads = _reads(monkeypatch)
    with daemon.operator() as op:
        rolled = op.post(f"/v1/operations/{operation_id}/rollback")
    assert rolled.json()["status"] == "rolled_back", rolled.text
    assert tree_bytes(repo) == original
    assert len(reads) == 2  # before the second and the third group: none a file


def test_a_healthy_hosts_restore_of_134_changes_reads_its_epoch_once_a_group(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshots = "/v1/repositories/lab/snapshots"
    with daemon.operator() as op:
        base = op.post(snapshots, json={"label": "base"}).json()["tree"]
    original = tree_bytes(repo)
    (repo / "gen").mkdir()
    for i in range(64):
        (repo / f"gen/new{i:03d}.txt").write_bytes(b"new %d\n" % i)
    for i in range(70):
        (repo / f"src/f{i:03d}.txt").write_bytes(b"grown %d\n" % i)
    with daemon.operator() as op:
        grown = op.post(snapshots, json={"label": "grown"}).json()["tree"]
        reads = _reads(monkeypatch)
        restored = op.post(f"{snapshots}/{base}/restore", json={"expected_current_tree": grown})
    assert restored.json()["status"] == "completed", restored.text
    assert tree_bytes(repo) == original
    # one group of 64 deletes, then two groups of writes: before each group after the first
    assert len(reads) == 2


def test_a_healthy_hosts_promotion_of_130_files_reads_its_epoch_once_a_group(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _reads(monkeypatch)
    changes = [(p, old, old.replace(b"old", b"new")) for p, old in FILES.items()]
    completed(daemon, repo, changes, name="lab")
    assert {p: b for p, (b, _) in tree_bytes(repo).items()} == {p: n for p, _, n in changes}
    # before the first temp and the first replace, and before the second and the third
    # group of temps and of replaces: none a file
    assert len(reads) == 6
