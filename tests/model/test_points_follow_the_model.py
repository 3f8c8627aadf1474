"""The model is the code's: the real daemon passes its fault points in an order the model
allows (``model/points.txt``), and the model names no point the code lacks.

A daemon in its own process records every point it passes (``PROMOTER_FAULTS_TRACE``)
while it promotes a bundle with each kind of change (a create in a new directory, a
modify, a delete, a mode change, a link), rolls it back, is killed mid-promotion and
recovered by a fresh daemon, and restores a snapshot. Each trace, kept to the points the
model's actions carry, must match its pass's pattern in full, with the per-target steps
in bundle order. A reordering in the code fails here until the model and
``points.txt`` change with it.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.model import spin
from tests.support.flows import init_repo, make_bundle, sha, state
from tests.support.process import DaemonProcess, granted, promotion_request

ROOT = Path(__file__).resolve().parents[2]
FILES = {"m.txt": b"old\n", "d.txt": b"gone\n", "x.sh": b"run\n"}
CHANGES: list[dict[str, Any]] = [
    {"path": "new/dir/c.txt", "operation": "create", "old": state(None), "new": state(b"made\n")},
    {"path": "m.txt", "operation": "modify", "old": state(b"old\n"), "new": state(b"new\n")},
    {"path": "d.txt", "operation": "delete", "old": state(b"gone\n"), "new": state(None)},
    {
        "path": "x.sh",
        "operation": "modify",
        "old": state(b"run\n"),
        "new": state(b"run\n", "100755"),
    },
    {"path": "l", "operation": "create", "old": state(None), "new": state(b"m.txt", "120000")},
]
BLOBS = [b"made\n", b"old\n", b"new\n", b"gone\n", b"run\n", b"m.txt"]
# the bundle's order (sorted by path) and each change's step in the model
ORDER = ["d.txt", "l", "m.txt", "new/dir/c.txt", "x.sh"]
KINDS = {"d.txt": "delete", "l": "create", "m.txt": "modify", "new/dir/c.txt": "create"}
KINDS["x.sh"] = "modify"  # a mode change is an exchange like any modify

pytestmark = pytest.mark.slow


def _code_points() -> set[str]:
    """Every fault point the worktree code calls (the fs layer and the operations)."""
    found: set[str] = set()
    for folder in ("promoter/fs", "promoter/engine/operation"):
        for path in sorted((ROOT / folder).glob("*.py")):
            text = path.read_text()
            found |= set(re.findall(r'faults\.point\("(\w+)"\)', text))
            found |= set(re.findall(r'fault: str = "(\w+)"', text))  # GroupSync's default
    return found


def test_points_file_names_only_the_models_points() -> None:
    modeled = set(spin.model_points())
    table = spin.points()
    used: set[str] = set()
    for pattern in table.patterns.values():
        used |= spin.names_in(pattern)
    used -= set(table.patterns)
    assert used - modeled == set(), "points.txt names points the model does not carry"
    assert modeled - used == set(), "the model carries points no pattern allows"
    assert set(table.aliases.values()) <= modeled


def test_every_worktree_fault_point_is_in_the_model_or_named_unmodeled() -> None:
    table = spin.points()
    code = _code_points()
    known = set(spin.model_points()) | set(table.aliases) | set(table.unmodeled)
    assert code - known == set(), "fault points the model does not know"
    assert set(spin.model_points()) - code == set(), "model points the code does not call"


def _steps(paths: list[str]) -> str:
    table = spin.points()
    return "".join(table.patterns[KINDS[path]] for path in paths)


def _pattern(name: str, steps: list[str] | None = None) -> str:
    pattern = spin.points().patterns[name]
    return pattern.replace("{steps}", _steps(steps if steps is not None else []))


def _taken(trace: Path) -> str:
    """The points recorded in ``trace`` that the model carries (aliases mapped), then
    the file emptied for the next pass."""
    table = spin.points()
    modeled = set(spin.model_points())
    names = [table.aliases.get(n, n) for n in trace.read_text().split()]
    trace.write_text("")
    return "".join(f"{n} " for n in names if n in modeled)


def _assert_follows(taken: str, pattern: str) -> None:
    assert re.fullmatch(pattern, taken), f"the code took:\n{taken}\nthe model allows:\n{pattern}"


def _prepare(daemon: DaemonProcess, repo: Path) -> dict[str, Any]:
    with daemon.client() as orch:
        grant = granted(orch, repo, symlinks="inside")
    bundle = make_bundle(grant, CHANGES)
    assert [c["path"] for c in bundle["changes"]] == ORDER
    with daemon.executor("run_1") as ex:
        for data in BLOBS:
            assert ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data).status_code in (200, 201)
        answer = ex.post("/v1/bundles", json=bundle)
        assert answer.status_code == 201, answer.text
    return promotion_request(bundle, answer)


@pytest.mark.parametrize("group_sync", ["true", "false"])
def test_promotion_rollback_and_restore_take_the_models_order(
    tmp_path: Path, group_sync: str
) -> None:
    """With a group sync (one ``syncfs`` a group) and with an fsync each (no group sync
    offered, or a busy disk declining it: several syncs before the first name)."""
    repo = init_repo(tmp_path / "work", FILES)
    trace = tmp_path / "trace"
    env = {"PROMOTER_FAULTS_TRACE": str(trace), "PROMOTER_GROUP_SYNC": group_sync}
    daemon = DaemonProcess(tmp_path / "state", {"work": repo}, extra_env=env)
    try:
        request = _prepare(daemon, repo)
        trace.write_text("")
        with daemon.client() as orch:
            promoted = orch.post("/v1/promotions", json=request).json()
        assert promoted["status"] == "completed", promoted
        taken = _taken(trace)
        _assert_follows(taken, _pattern("promotion", ORDER))
        # the check can fail: the same points with one step's exchange moved first do not
        reordered = taken.replace(
            "before_replace after_exchange ", "after_exchange before_replace ", 1
        )
        assert re.fullmatch(_pattern("promotion", ORDER), reordered) is None

        with daemon.client("operator") as operator:
            rolled = operator.post(f"/v1/operations/{promoted['operation_id']}/rollback").json()
        assert rolled["status"] == "rolled_back", rolled
        taken = _taken(trace)
        _assert_follows(taken, _pattern("rollback"))
        steps = re.findall(r"rollback_after_step", taken)
        assert len(steps) == len(ORDER)

        base = "/v1/repositories/work/snapshots"
        with daemon.client("operator") as operator:
            first = operator.post(base, json={"label": "before"}).json()["tree"]
            (repo / "m.txt").write_bytes(b"edited\n")
            (repo / "d.txt").unlink()
            (repo / "z.txt").write_bytes(b"added\n")
            current = operator.post(base, json={"label": "after"}).json()["tree"]
            trace.write_text("")
            answer = operator.post(
                f"{base}/{first}/restore", json={"expected_current_tree": current}
            )
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "completed", answer.json()
        _assert_follows(_taken(trace), _pattern("restore"))
        assert (repo / "m.txt").read_bytes() == b"old\n"
        assert (repo / "d.txt").read_bytes() == b"gone\n"
        assert not (repo / "z.txt").exists()
    finally:
        daemon.stop()


def test_a_killed_promotion_and_its_recovery_take_the_models_order(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    trace = tmp_path / "trace"
    env = {"PROMOTER_FAULTS_TRACE": str(trace)}
    first = DaemonProcess(
        tmp_path / "state", {"work": repo}, faults="after_exchange=kill", extra_env=env
    )
    try:
        request = _prepare(first, repo)
        trace.write_text("")
        with first.client() as orch, contextlib.suppress(httpx.HTTPError):
            orch.post("/v1/promotions", json=request)
        assert first.wait_exit() == 137
    finally:
        first.kill()
    done = ORDER[: ORDER.index("m.txt")]  # placed before the first exchange
    killed = spin.points().patterns["journal"] + _steps(done) + "before_replace after_exchange "
    _assert_follows(_taken(trace), killed)

    second = DaemonProcess(tmp_path / "state", {"work": repo}, extra_env=env)
    try:
        with second.client("operator") as operator:
            [op] = operator.get("/v1/operations").json()["operations"]
        trace.write_text("")
        with second.client() as orch:
            answer = orch.post(f"/v1/operations/{op['operation_id']}/recover", json={"fence": 7})
        assert answer.status_code == 200, answer.text
        with second.client("operator") as operator:
            view = operator.get(f"/v1/operations/{op['operation_id']}").json()
    finally:
        second.stop()
    assert view["status"] == "completed", view
    rest = ORDER[ORDER.index("m.txt") + 1 :]  # m.txt read back new: confirmed, not redone
    _assert_follows(_taken(trace), _pattern("recovery", rest))
    assert (repo / "m.txt").read_bytes() == b"new\n"
