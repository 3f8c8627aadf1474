"""A state directory is one host's: `promoter serve` of another host refuses to start on it.

Two daemons of different hosts on one state directory each found the other's bundle
documents on disk and served them (200 where the ledger says 421 ``owned_by_other_host``),
and each swept the other's temps at its start. The first ``serve`` records its host id
in ``<state_dir>/host-id``; a daemon of another host then stops with ``config_error``
(78) naming both hosts and what to do, before it makes anything. The same host (another
process, or the workers of ``serve --workers 2``) starts; so does a replacement configured
with ``replaces_host`` naming the recorded host (a fence's handover). A daemon started
without ``--host-id`` records the machine's id, and one with another id is refused.
A ``host-id`` that is not a regular file (a symlink, a directory, a FIFO) refuses the
start, never followed, read through or blocked on, and is kept as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from promoter.engine.ownership import machine_host_id
from promoter.store import state_host
from tests.support.process import DaemonProcess

pytestmark = pytest.mark.slow  # daemons as processes


def _serve(state: Path, host_id: str | None, **extra: str) -> subprocess.CompletedProcess[str]:
    """``promoter serve`` on ``state`` as ``host_id`` (None: the machine's), expected to
    end by itself (bounded)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PROMOTER_") or k == "PROMOTER_DATABASE_URL"
    }
    env.update({"PROMOTER_WORKERS": "1", **extra})
    if host_id is not None:
        env["PROMOTER_HOST_ID"] = host_id
    argv = [sys.executable, "-m", "promoter.cli.main", "serve", "--state-dir", str(state)]
    return subprocess.run(
        [*argv, "--port", "0"], env=env, capture_output=True, text=True, timeout=60
    )


def _names(state: Path) -> set[str]:
    """Every name under the state directory but the SQLite database's own files."""
    return {
        str(path.relative_to(state))
        for path in state.rglob("*")
        if not path.name.startswith("promoter.db")
    }


def _refusal(state: Path, recorded: str, host: str) -> str:
    where = state.resolve()
    return (
        f"error [config_error] state directory {where} belongs to host {recorded} (recorded "
        f"in {where / 'host-id'}); this daemon is host {host}, and two hosts on one state "
        "directory serve each other's bundles and sweep each other's temps. Start it as "
        f"{recorded} (--host-id {recorded}), give {host} a state directory of its own "
        f"(--state-dir), or, for {recorded}'s replacement that takes its work over once it "
        f'is fenced, set replaces_host = "{recorded}" (docs/operator/many-hosts.md)\n'
    )


def test_a_second_host_on_a_state_directory_refuses_to_start_and_changes_nothing(
    tmp_path: Path, started: list[DaemonProcess]
) -> None:
    state = tmp_path / "state"
    a = DaemonProcess(state, {}, extra_env={"PROMOTER_HOST_ID": "host-a"})
    started.append(a)
    before = _names(state)

    refused = _serve(state, "host-b")  # it once started, and served A's bundles
    assert refused.returncode == 78, refused.stderr
    assert refused.stderr.endswith(_refusal(state, "host-a", "host-b")), refused.stderr
    assert _names(state) == before
    assert (state / "host-id").read_text() == "host-a\n"
    with a.client("operator") as operator:  # A serves on, the only host of its ledger
        hosts = operator.get("/v1/hosts").json()["hosts"]
    assert [h["host_id"] for h in hosts] == ["host-a"]


def test_the_machines_default_id_is_recorded_and_another_id_refused(
    tmp_path: Path, started: list[DaemonProcess]
) -> None:
    state = tmp_path / "state"
    first = DaemonProcess(state, {})  # no host id: the machine's
    first.kill()
    machine = machine_host_id()
    assert (state / "host-id").read_text() == f"{machine}\n"
    before = _names(state)

    refused = _serve(state, "host-a")
    assert refused.returncode == 78, refused.stderr
    assert refused.stderr.endswith(_refusal(state, machine, "host-a")), refused.stderr
    assert _names(state) == before
    again = DaemonProcess(state, {}, extra_env={"PROMOTER_HOST_ID": machine})  # the same host
    started.append(again)


def test_the_same_host_again_and_its_workers_start(
    tmp_path: Path, started: list[DaemonProcess]
) -> None:
    state = tmp_path / "state"
    env = {"PROMOTER_HOST_ID": "host-a"}
    DaemonProcess(state, {}, extra_env=env).kill()
    workers = DaemonProcess(state, {}, extra_env=env, workers=2)
    started.append(workers)
    with workers.client("operator") as operator:
        assert operator.get("/v1/hosts").status_code == 200
    assert (state / "host-id").read_text() == "host-a\n"


def test_a_replacement_named_for_the_recorded_host_shares_its_state_directory(
    tmp_path: Path, started: list[DaemonProcess]
) -> None:
    state = tmp_path / "state"
    a = DaemonProcess(state, {}, extra_env={"PROMOTER_HOST_ID": "host-a"})
    started.append(a)
    b = DaemonProcess(
        state,
        {},
        extra_env={
            "PROMOTER_HOST_ID": "host-b",
            "PROMOTER_REPLACES_HOST": "host-a",
            "PROMOTER_SIGNING_KEY_DIR": str(tmp_path / "signing-b"),  # a key of its own
        },
    )
    started.append(b)
    assert (state / "host-id").read_text() == "host-a\n"  # still A's
    assert state_host.writers(state) == {"host-a", "host-b"}  # A's start learns of B
    refused = _serve(state, "host-c", PROMOTER_REPLACES_HOST="host-b")  # not the recorded
    assert refused.returncode == 78, refused.stderr
    assert refused.stderr.endswith(_refusal(state, "host-a", "host-c")), refused.stderr


def test_a_replacement_started_first_after_the_upgrade_records_the_host_it_replaces(
    tmp_path: Path, started: list[DaemonProcess]
) -> None:
    """A state directory made before ``host-id`` existed, and host-a's replacement the
    first daemon started on it after the upgrade: the directory is recorded as host-a's,
    never the replacement's, and host-a then starts on its own directory."""
    state = tmp_path / "state"
    DaemonProcess(state, {}, extra_env={"PROMOTER_HOST_ID": "host-a"}).kill()
    (state / "host-id").unlink()  # as a version before the record left the directory
    b = DaemonProcess(
        state,
        {},
        extra_env={
            "PROMOTER_HOST_ID": "host-b",
            "PROMOTER_REPLACES_HOST": "host-a",
            "PROMOTER_SIGNING_KEY_DIR": str(tmp_path / "signing-b"),
        },
    )
    started.append(b)
    assert (state / "host-id").read_text() == "host-a\n"
    a = DaemonProcess(state, {}, extra_env={"PROMOTER_HOST_ID": "host-a"})
    started.append(a)
    with a.client("operator") as operator:
        assert operator.get("/v1/hosts").status_code == 200


def test_a_first_start_that_fails_on_its_database_records_no_host(
    tmp_path: Path, started: list[DaemonProcess]
) -> None:
    """A first ``serve`` with a mistyped ``--host-id`` whose database cannot be reached
    stops before recording it: the right id then starts and is the one recorded."""
    state = tmp_path / "state"
    unreachable = "postgresql+psycopg://postgres@127.0.0.1:1/promoter"  # port 1: refused
    failed = _serve(state, "host-typo", PROMOTER_DATABASE_URL=unreachable)
    assert failed.returncode not in (0, 78), failed.stderr
    assert not (state / "host-id").exists(), failed.stderr
    a = DaemonProcess(state, {}, extra_env={"PROMOTER_HOST_ID": "host-a"})
    started.append(a)
    assert (state / "host-id").read_text() == "host-a\n"


@pytest.mark.parametrize("planted", ["symlink_to_the_id", "directory", "fifo", "dangling_symlink"])
def test_a_host_id_that_is_not_a_plain_file_refuses_the_start_and_is_kept(
    tmp_path: Path, planted: str
) -> None:
    """``host-id`` planted as a symlink (even to a file naming this very host, outside the
    state directory), a directory or a FIFO: the start refuses (``config_error``) without
    following it, reading through it or blocking on it, and the entry stays as it was."""
    from promoter.errors import ConfigError

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    outside = tmp_path / "elsewhere"
    outside.write_text("host-a\n")
    entry = state / "host-id"
    if planted == "symlink_to_the_id":
        entry.symlink_to(outside)
    elif planted == "dangling_symlink":
        entry.symlink_to(tmp_path / "nothing")
    elif planted == "directory":
        entry.mkdir()
    else:
        os.mkfifo(entry)
    before = os.lstat(entry)

    with pytest.raises(ConfigError, match=r"host-id is not a regular file"):
        state_host.claim(state, "host-a")
    after = os.lstat(entry)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert outside.read_text() == "host-a\n"
    assert sorted(p.name for p in state.iterdir()) == ["host-id"]


def test_a_planted_replacement_record_leaves_the_directorys_writers_unknown(
    tmp_path: Path,
) -> None:
    """A file under ``replacements/`` not named after the id it holds (planted, or a
    symlink) is not a record of promoter's: the writers are unknown (``config_error``),
    which keeps every temp a start cannot prove gone; nothing is changed."""
    from promoter.errors import ConfigError

    state = tmp_path / "state"
    state_host.claim(state, "host-b", replaces="host-a")
    assert state_host.writers(state) == {"host-a", "host-b"}
    planted = state / state_host.REPLACEMENTS / ("0" * 32)
    planted.write_text("host-c\n")
    with pytest.raises(ConfigError, match="is not a replacement's record of promoter's"):
        state_host.writers(state)
    assert planted.read_text() == "host-c\n"


def test_a_host_id_with_space_around_it_is_refused_before_it_records_itself(
    tmp_path: Path, started: list[DaemonProcess]
) -> None:
    """A host id is read back from its record without the space around it: a replacement
    started as ``"host-b "`` recorded itself under a file its id then no longer named, so
    every later start found the directory's writers unknown and kept every temp, fenced
    or not (and a recorded host with such an id was refused its own restart). A host id
    or ``replaces_host`` with space around it, or a control character in it, refuses the
    start (``config_error``) before it makes or records anything."""
    state = tmp_path / "state"
    a = DaemonProcess(state, {}, extra_env={"PROMOTER_HOST_ID": "host-a"})
    started.append(a)
    before = _names(state)
    for odd in ("host-b ", " host-b", "host-b\n", "host-\x1b[2Kb"):
        refused = _serve(state, odd, PROMOTER_REPLACES_HOST="host-a")
        assert refused.returncode == 78, refused.stderr
        assert refused.stderr.startswith("error [config_error] invalid settings: "), refused
        assert "host_id" in refused.stderr
    refused = _serve(state, "host-b", PROMOTER_REPLACES_HOST="host-a ")
    assert refused.returncode == 78, refused.stderr
    assert "replaces_host" in refused.stderr
    assert _names(state) == before
    assert state_host.writers(state) == {"host-a"}
