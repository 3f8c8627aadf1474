"""A daemon killed mid-merge leaves its scratch directory; the next start sweeps only that.

A real daemon merges a drifted promotion (protocol: runs#merges-are-new-bundles) with
``PROMOTER_FAULTS`` set to kill it (``os._exit``, as SIGKILL: no cleanup) once the three inputs are written to its
scratch directory in ``<state>/merge``. Before the restart look-alikes are planted beside
the leftover: a symlink named ``merge-x``, a symlink and a planted file under a scratch
name whose writer is gone, a directory under such a name holding a file the merge never
writes, a directory named as the merge code once named them (no writer in the name) and
a scratch directory whose writer is alive (this test's own process). The fresh daemon
must remove the leftover and keep every look-alike and everything they point at, with
every other name and byte in the state directory as it was; the merge then runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import httpx
import pytest

from promoter.git.merge_file import LABELS
from promoter.store.state_temps import MERGE_INPUTS, MERGE_PREFIX, scratch_name
from tests.support.flows import init_repo
from tests.support.process import DaemonProcess, prepare_promotion

BASE = b"".join(b"line %d\n" % n for n in range(1, 13))
AGENT = BASE.replace(b"line 2\n", b"line 2 by the agent\n")
PERSON = BASE.replace(b"line 11\n", b"line 11 by the person\n")


def _contents(state: Path) -> dict[str, str]:
    """Every name under ``state`` (the database aside) with its bytes' hash or link target."""
    found: dict[str, str] = {}
    for root, dirs, files in os.walk(state):
        rel = Path(root).relative_to(state)
        for name in dirs:
            path = Path(root) / name
            found[f"{(rel / name).as_posix()}/"] = (
                f"-> {os.readlink(path)}" if path.is_symlink() else "dir"
            )
        for name in files:
            if rel == Path(".") and name.startswith("promoter.db"):
                continue  # the database, which a start may checkpoint
            path = Path(root) / name
            found[(rel / name).as_posix()] = (
                f"-> {os.readlink(path)}"
                if path.is_symlink()
                else hashlib.sha256(path.read_bytes()).hexdigest()
            )
    return found


def _plant_look_alikes(merge: Path, leftover: str, outside: Path) -> list[str]:
    """Entries the merge did not make, next to its leftover; their names."""
    dead = leftover[:-16] + "0" * 16  # the killed daemon's name: its writer is gone
    outside.mkdir()
    (outside / "yours").write_bytes(b"not promoter's\n")
    (merge / "merge-x").symlink_to(outside)
    (merge / dead).symlink_to(outside)
    planted_file = dead[:-1] + "1"
    (merge / planted_file).write_bytes(b"planted by someone\n")
    mixed = dead[:-1] + "2"
    (merge / mixed).mkdir()
    (merge / mixed / "yours").write_bytes(b"mine\n")
    (merge / mixed / "notes.txt").write_bytes(b"someone's notes\n")
    old_style = "merge-abcd1234"  # as mkdtemp named them: no writer to prove gone
    (merge / old_style).mkdir()
    (merge / old_style / "base").write_bytes(b"whose?\n")
    alive = scratch_name()  # names this very test process, which is alive
    (merge / alive).mkdir()
    for name in MERGE_INPUTS:
        (merge / alive / name).write_bytes(b"in use\n")
    return ["merge-x", dead, planted_file, mixed, old_style, alive]


@pytest.mark.slow
def test_kill_mid_merge_leaves_scratch_that_restart_sweeps_keeping_look_alikes(
    tmp_path: Path,
) -> None:
    assert set(LABELS) == MERGE_INPUTS  # the sweep's proof names exactly what the merge writes
    repo = init_repo(tmp_path / "work", {"README.md": b"# project\n", "src/app.py": BASE})
    state = tmp_path / "state"
    first = DaemonProcess(state, {"work": repo}, faults="merge_scratch_written=kill")
    try:
        request = prepare_promotion(first, repo, [("src/app.py", BASE, AGENT)])
        (repo / "src" / "app.py").write_bytes(PERSON)
        with first.client() as orch:
            refused = orch.post("/v1/promotions", json=request).json()
        assert (refused["status"], refused["code"]) == ("refused", "target_drift")
        operation_id = refused["operation_id"]
        with first.client("operator") as op, contextlib.suppress(httpx.HTTPError):
            op.post(f"/v1/operations/{operation_id}/merge")  # the daemon dies mid-merge
        assert first.wait_exit() == 137
    finally:
        first.kill()

    merge = state / "merge"
    [leftover] = os.listdir(merge)
    assert leftover.startswith(MERGE_PREFIX)
    assert {n: (merge / leftover / n).read_bytes() for n in os.listdir(merge / leftover)} == {
        "yours": PERSON,
        "base": BASE,
        "agent": AGENT,
    }
    kept = _plant_look_alikes(merge, leftover, tmp_path / "outside")
    before = _contents(state)

    second = DaemonProcess(state, {"work": repo})
    try:
        after = _contents(state)
        assert sorted(os.listdir(merge)) == sorted(kept)
        assert f"removed leftover merge scratch {merge / leftover}" in "\n".join(second.log)
        gone = {k for k in before if k.startswith(f"merge/{leftover}/")} | {f"merge/{leftover}/"}
        assert len(gone) == 4
        assert after == {k: v for k, v in before.items() if k not in gone}
        assert (tmp_path / "outside" / "yours").read_bytes() == b"not promoter's\n"
        with second.client("operator") as op:
            merged = op.post(f"/v1/operations/{operation_id}/merge")
        assert merged.status_code == 201, merged.text
        assert merged.json()["paths"][0]["result"] == "clean"
        assert sorted(os.listdir(merge)) == sorted(kept)  # the merge removed its own scratch
    finally:
        second.stop()
    assert (repo / "src" / "app.py").read_bytes() == PERSON  # the merge wrote no worktree byte
