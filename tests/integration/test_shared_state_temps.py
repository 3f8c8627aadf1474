"""A replacement's start never sweeps the temps of the live host it replaces.

A temp's name names its writer by boot id, pid and start time. Host A's state directory
is shared with its replacement B (``replaces_host``, a shared disk): a temp A's writer is
writing on A's machine carries A's boot id, which B's machine does not have, so it looked
like a killed writer's and B's start removed it while A was alive (A only looked dead
until an operator fences it). B keeps every temp it cannot prove gone, says so in one
counted line, and removes them at its first start after the ledger says A is fenced. The
other way round too: A restarted keeps B's, since B may write there while it is active.

The temps are written by the test in the exact name format, with a boot id that is not
this machine's (A's machine). Two daemons as processes on one ledger (the suite's
PostgreSQL database, else the state directory's SQLite file).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from promoter.store import state_temps
from tests.support.process import DaemonProcess

pytestmark = pytest.mark.slow  # daemons as processes

WRITING = b"host-a's blob, half written\n"
A = {"PROMOTER_HOST_ID": "host-a", "PROMOTER_OWNER_LEASE_SECONDS": "1"}


def _other_machines_boot() -> str:
    return "eeeeeeee" if state_temps._BOOT == "ffffffff" else "ffffffff"


def _plant(state: Path) -> tuple[Path, Path]:
    """A's in-flight temp in the blob store's ``tmp/`` and a merge's scratch directory with
    its inputs, both named by a writer of A's machine (another boot id)."""
    boot = _other_machines_boot()
    temp = state / "audit" / "tmp" / f"{state_temps.PREFIX}{boot}-4242-991-{'0f' * 8}"
    temp.write_bytes(WRITING)
    scratch = state / "merge" / f"{state_temps.MERGE_PREFIX}{boot}-4243-992-{'1e' * 8}"
    scratch.mkdir(parents=True)
    for name in state_temps.MERGE_INPUTS:
        (scratch / name).write_bytes(name.encode())
    return temp, scratch


def _replacement(state: Path, tmp_path: Path, **daemon: Any) -> DaemonProcess:
    return DaemonProcess(
        state,
        {},
        **daemon,
        extra_env={
            "PROMOTER_HOST_ID": "host-b",
            "PROMOTER_REPLACES_HOST": "host-a",
            "PROMOTER_SIGNING_KEY_DIR": str(tmp_path / "signing-b"),  # a key of its own
        },
    )


def _kept_lines(daemon: DaemonProcess) -> list[str]:
    return [line for line in daemon.log if "whose writer may be alive" in line]


def _fence_a_to_b(b: DaemonProcess) -> None:
    """Fence host-a (killed) to host-b once its host lease ran out (the ledger says so:
    waited for as a condition, bounded)."""
    deadline = time.monotonic() + 60
    with b.client("operator") as operator:
        while True:
            hosts = {h["host_id"]: h for h in operator.get("/v1/hosts").json()["hosts"]}
            if hosts["host-a"]["lease_expired"]:
                break
            assert time.monotonic() < deadline, "host-a's lease never ran out"
            time.sleep(0.05)
        fenced = operator.post("/v1/hosts/host-a/fence", json={"to": "host-b"})
        assert fenced.status_code == 200, fenced.text


def test_a_replacements_start_keeps_a_live_replaced_hosts_temps_until_it_is_fenced(
    tmp_path: Path, started: list[DaemonProcess]
) -> None:
    state = tmp_path / "state"
    a = DaemonProcess(state, {}, extra_env=A)
    started.append(a)
    temp, scratch = _plant(state)

    b = _replacement(state, tmp_path)  # A still runs: it only looks dead to B's machine
    started.append(b)
    assert temp.read_bytes() == WRITING  # byte for byte
    assert {p.name: p.read_bytes() for p in scratch.iterdir()} == {
        name: name.encode() for name in state_temps.MERGE_INPUTS
    }
    (line,) = _kept_lines(b)
    assert (
        "kept 2 temps whose writer may be alive on another machine or in another pid namespace: host host-a "
        in line
    )
    assert "(active, not fenced)" in line
    assert str(temp) in line and str(scratch) in line
    assert not [entry for entry in b.log if "removed leftover" in entry]

    a.kill()
    _fence_a_to_b(b)
    b.kill()
    again = _replacement(state, tmp_path)  # its first start after the fence
    started.append(again)
    assert not temp.exists() and not scratch.exists()
    assert again.logged(f"removed leftover temp {temp} ({len(WRITING)} bytes)")
    assert again.logged(f"removed leftover merge scratch {scratch}")
    assert _kept_lines(again) == []


def test_the_replaced_host_restarted_keeps_its_active_replacements_temps(
    tmp_path: Path, started: list[DaemonProcess]
) -> None:
    """B (active, a replacement that started on A's directory) may be writing on its own
    machine: A's restart keeps B's temp of another boot, and names B."""
    state = tmp_path / "state"
    DaemonProcess(state, {}, extra_env=A).kill()
    b = _replacement(state, tmp_path)
    started.append(b)
    temp, _ = _plant(state)

    a = DaemonProcess(state, {}, extra_env=A)
    started.append(a)
    assert temp.read_bytes() == WRITING
    (line,) = _kept_lines(a)
    assert (
        "kept 2 temps whose writer may be alive on another machine or in another pid namespace: host host-b "
        in line
    )


def test_a_container_daemon_restarted_after_a_crash_starts_in_a_shared_directory(
    tmp_path: Path, started: list[DaemonProcess]
) -> None:
    """A daemon in a container is always PID 1. Killed while it served with workers, it
    left its metrics directory; an older version's, of the same process id, is there too
    (``metrics/1``). Its restart, the same PID 1, in the state directory a replaced host may
    still write in, starts and serves: neither leftover is its own directory's name, and
    neither is touched (their daemon is not provably gone: another pid namespace's ids name
    no process of this machine)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("a pid namespace of the daemon's own needs root and unshare(1)")
    state = tmp_path / "state"
    DaemonProcess(state, {}, extra_env=A).kill()
    older = state / "metrics" / "1"
    older.mkdir(parents=True)
    (older / "counter_1.db").write_bytes(b"an older version's\n")
    crashed = _replacement(state, tmp_path, workers=2, container=True)
    started.append(crashed)
    (first,) = {p for p in (state / "metrics").iterdir() if p != older}
    crashed.kill()
    left = {p: p.stat().st_mtime_ns for p in (first, older)}
    again = _replacement(state, tmp_path, workers=2, container=True)
    started.append(again)
    with again.client("operator") as operator:
        assert operator.get("/metrics").status_code == 200
    assert (older / "counter_1.db").read_bytes() == b"an older version's\n"
    assert {p: p.stat().st_mtime_ns for p in (first, older)} == left
    (line,) = [entry for entry in again.log if "metrics directories whose daemon" in entry]
    assert "host host-a (active, not fenced)" in line
    assert str(first) in line and str(older) in line
    assert not [entry for entry in again.log if "config_error" in entry]
