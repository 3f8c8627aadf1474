"""The metrics of ``serve --workers N`` as one set: every worker's counts summed at a
scrape, an ended worker's too, and the shared directory's own rules (what is promoter's
own and may be removed, what is kept)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.multiprocess import mark_process_dead

from promoter.api import metrics_dir
from promoter.api.metrics import Metrics
from promoter.store import state_temps
from tests.support.fsutil import free_start_tick

_WORKER = """
import os
import sys
from pathlib import Path
from promoter.api.metrics import Metrics
m = Metrics(Path(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    m.promotions.labels("completed", "ok").inc()
m.name_host("host_a")
print(os.getpid())
"""


def _worker(shared: Path, promotions: int) -> int:
    """A process counting ``promotions`` into ``shared`` as a worker does; its pid."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, str(shared), str(promotions)],
        env=env,
        check=True,
        capture_output=True,
    )
    return int(done.stdout)


def test_a_scrape_sums_the_workers_and_keeps_an_ended_one_s_counts(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    first = _worker(shared, 2)
    mark_process_dead(first, str(shared))  # type: ignore[no-untyped-call]  # as the fleet does
    _worker(shared, 3)
    scraper = Metrics(shared)
    scraper.name_host("host_a")
    text = scraper.exposition().decode()
    assert 'promoter_promotions_total{code="ok",outcome="completed"} 5.0' in text.splitlines()
    assert text.count("promoter_host_info{") == 1  # the answering worker's, not a file's
    assert 'promoter_host_info{host_id="host_a"} 1.0' in text.splitlines()


_CLOSING_WORKER = """
import sys
from pathlib import Path
from promoter.api.connections import AT_ACCEPT, HEAD, Closes
from promoter.api.metrics import Metrics
closes = Closes(1, Metrics(Path(sys.argv[1])).connections_closed)
for _ in range(int(sys.argv[2])):
    closes.closed(AT_ACCEPT)
closes.closed(HEAD)
"""


def test_the_connections_each_worker_closed_are_summed_at_a_scrape(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    for closed in (2, 5):
        subprocess.run(
            [sys.executable, "-c", _CLOSING_WORKER, str(shared), str(closed)], env=env, check=True
        )
    text = Metrics(shared).exposition().decode().splitlines()
    assert sorted(line for line in text if line.startswith("promoter_connections_closed")) == [
        'promoter_connections_closed_total{reason="at_accept"} 7.0',
        'promoter_connections_closed_total{reason="body"} 0.0',
        'promoter_connections_closed_total{reason="drain"} 0.0',
        'promoter_connections_closed_total{reason="head"} 2.0',
        'promoter_connections_closed_total{reason="make_room"} 0.0',
    ]


def test_one_process_keeps_its_own_registry(tmp_path: Path) -> None:
    alone = Metrics()
    alone.promotions.labels("completed", "ok").inc()
    alone.name_host("host_a")
    text = alone.exposition().decode().splitlines()
    assert 'promoter_promotions_total{code="ok",outcome="completed"} 1.0' in text
    assert 'promoter_host_info{host_id="host_a"} 1.0' in text
    assert "# TYPE promoter_host_info gauge" in text


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_prepare_removes_only_ended_daemons_own_directories(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / metrics_dir.ROOT
    ended = root / str(_dead_pid())
    ended.mkdir(parents=True)
    (ended / "counter_7.db").write_bytes(b"")
    (ended / "gauge_livesum_7.db").write_bytes(b"")
    empty = root / str(_dead_pid())
    empty.mkdir()
    running = root / "1"  # a process that runs: another daemon's, maybe
    running.mkdir()
    (running / "counter_9.db").write_bytes(b"")
    extra = root / str(_dead_pid())
    extra.mkdir()
    (extra / "counter_7.db").write_bytes(b"")
    (extra / "counter_7.db.bak").write_bytes(b"")
    linked = root / str(_dead_pid())
    linked.mkdir()
    (linked / "counter_7.db").symlink_to(tmp_path / "elsewhere")
    named = root / "counter_1.db"  # a file, not a directory the daemon makes
    named.write_bytes(b"")
    outside = tmp_path / "outside"  # library-named files, reached through a link
    outside.mkdir()
    (outside / "counter_7.db").write_bytes(b"theirs")
    swapped = root / str(_dead_pid())
    swapped.symlink_to(outside)
    with caplog.at_level(logging.WARNING, "promoter.serve"):
        mine = metrics_dir.prepare(tmp_path, shared_with=None)
    assert mine.parent == root and state_temps.is_metrics_name(mine.name)
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [mine.name, running.name, extra.name, linked.name, named.name, swapped.name]
    )
    assert (running / "counter_9.db").exists()
    assert (outside / "counter_7.db").read_bytes() == b"theirs"
    kept = sorted(r.getMessage() for r in caplog.records)
    assert kept == sorted(
        f"kept {p}: not only this daemon's metrics files" for p in (extra, linked, named, swapped)
    )
    assert oct(mine.stat().st_mode & 0o777) == oct(0o700)


def test_prepare_in_a_shared_state_directory_keeps_directories_of_other_machines_pids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A replacement's state directory: a process id that does not run here may be a live
    daemon's of the replaced host on its own machine, so its metrics stay, counted."""
    root = tmp_path / metrics_dir.ROOT
    theirs = root / str(_dead_pid())
    theirs.mkdir(parents=True)
    (theirs / "counter_7.db").write_bytes(b"live")
    with caplog.at_level(logging.WARNING, "promoter.serve"):
        mine = metrics_dir.prepare(tmp_path, shared_with="host host-a (active, not fenced)")
    assert (theirs / "counter_7.db").read_bytes() == b"live"
    assert [r.getMessage() for r in caplog.records] == [
        "kept 1 metrics directory whose daemon may run on another machine or in another pid "
        f"namespace: host host-a (active, not fenced) may write in {tmp_path} (a start after "
        f"its fence removes them): {theirs}"
    ]
    metrics_dir.remove(mine)


SHARED = "host host-a (active, not fenced)"


def test_a_leftover_named_as_this_daemon_s_own_never_refuses_a_start_in_a_shared_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A container's daemon is always the same process id: an older version's leftover of
    it (``metrics/<pid>``) in a shared state directory may be a live daemon's of another
    machine, so it is kept, and the start goes on in a directory of its own name."""
    root = tmp_path / metrics_dir.ROOT
    older = root / str(os.getpid())
    older.mkdir(parents=True)
    (older / "counter_1.db").write_bytes(b"theirs")
    with caplog.at_level(logging.WARNING, "promoter.serve"):
        mine = metrics_dir.prepare(tmp_path, shared_with=SHARED)
    assert mine != older and mine.is_dir()
    assert (older / "counter_1.db").read_bytes() == b"theirs"
    assert [r.getMessage() for r in caplog.records] == [
        "kept 1 metrics directory whose daemon may run on another machine or in another pid "
        f"namespace: {SHARED} may write in {tmp_path} (a start after its fence removes "
        f"them): {older}"
    ]
    assert metrics_dir.prepare(tmp_path, shared_with=SHARED) != mine  # this process again
    assert mine.is_dir()  # its writer runs


def _left(root: Path, boot: str, pid: int, tick: str) -> Path:
    """A metrics directory as a daemon of ``boot``, ``pid`` and start ``tick`` names it,
    with a library file in it."""
    path = root / f"{state_temps.METRICS_PREFIX}{boot}-{pid}-{tick}-{'0a' * 8}"
    path.mkdir(parents=True)
    (path / "counter_1.db").write_bytes(b"")
    return path


def test_prepare_judges_a_leftover_by_its_daemon_s_start(tmp_path: Path) -> None:
    """This process id now runs a process started at another tick: its daemon is gone.
    In a shared directory only when no process of the machine started at that tick."""
    boot, me = state_temps._BOOT, os.getpid()
    other_boot = "eeeeeeee" if boot == "ffffffff" else "ffffffff"
    mine_now = state_temps._start_at("self")
    for shared in (None, SHARED):
        root = tmp_path / str(shared is not None) / metrics_dir.ROOT
        gone = _left(root, boot, me, free_start_tick())  # an earlier daemon of this pid
        ticking = _left(root, boot, _dead_pid(), mine_now)  # a process runs at its tick
        booted = _left(root, other_boot, me, mine_now)
        live = _left(root, boot, me, mine_now)  # this very process
        mine = metrics_dir.prepare(root.parent, shared_with=shared)
        assert not gone.exists()
        assert live.is_dir() and mine.is_dir() and mine != live
        assert ticking.exists() == booted.exists() == (shared is not None)


def test_remove_keeps_a_directory_holding_anything_else(tmp_path: Path) -> None:
    mine = metrics_dir.prepare(tmp_path, shared_with=None)
    (mine / "histogram_3.db").write_bytes(b"")
    (mine / "notes").write_bytes(b"")
    metrics_dir.remove(mine)
    assert sorted(p.name for p in mine.iterdir()) == ["histogram_3.db", "notes"]
    (mine / "notes").unlink()
    metrics_dir.remove(mine)
    assert not mine.exists()
    assert list((tmp_path / metrics_dir.ROOT).iterdir()) == []
