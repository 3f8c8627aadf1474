"""``RunQuota`` as two workers of one daemon hold it: two objects on one ``quota/`` folder,
each with its own uploads in flight (protocol: storage#storage-quota).

A charge is checked against the run's record on disk, not a total either object kept:
the second worker's charge that would pass the quota is refused and writes nothing, and
charges and refunds of both end in the record as their exact sum. The folder's lock is
never taken through a symlink planted at ``quota/``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from promoter.errors import QuotaExceeded, StorageError
from promoter.store.quota import RunQuota


def _record(folder: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_bytes()) for p in sorted(folder.iterdir())]


def test_a_charge_in_one_worker_sees_the_other_workers_charges(tmp_path: Path) -> None:
    folder = tmp_path / "quota"
    left, right = RunQuota(folder, 1000), RunQuota(folder, 1000)
    left.reserve("run", 600)
    right.reserve("run", 600)  # the other worker's upload in flight is not seen here
    right.settle("run", 600, 600)
    with pytest.raises(QuotaExceeded):
        left.settle("run", 600, 600)
    assert _record(folder) == [{"bytes": 600, "executor_run_id": "run"}]
    with pytest.raises(QuotaExceeded), left.charging("run", 0, 401):
        raise AssertionError("the block of a refused charge never runs")
    left.reserve("run", 400)  # the refused charges gave their reservations back
    with left.charging("run", 400, 400):
        pass
    right.refund("run", 100)
    left.settle("run", 0, 100)
    assert _record(folder) == [{"bytes": 1000, "executor_run_id": "run"}]
    assert (left.used("run"), right.used("run")) == (1000, 1000)
    assert os.listdir(folder) == [next(folder.iterdir()).name]  # the record alone


def test_the_lock_is_never_taken_through_a_symlink_at_the_folder(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "quota").symlink_to(elsewhere)
    quota = RunQuota(tmp_path / "quota", 1000)
    quota.reserve("run", 10)
    with pytest.raises(StorageError):
        quota.settle("run", 10, 10)
    assert os.listdir(elsewhere) == []
