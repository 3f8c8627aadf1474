"""The directory the workers of one ``serve --workers N`` keep their metrics in.

``STATE/metrics/serve-<boot>-<pid>-<start>-<16 hex>/``, named after the serving parent as
``promoter.store.state_temps`` names a temp after its writer (boot id, process id, the
process's start time in clock ticks), mode 0700: created by the parent before it starts
its workers, handed to each as ``PROMETHEUS_MULTIPROC_DIR``, where prometheus_client keeps
every worker's values in ``KIND_PID.db`` files; removed by the parent once the daemon
stopped. A new daemon's name is never an earlier one's, even of the same process id (a
container's daemon is always PID 1). At start, what earlier daemons left in
``STATE/metrics/`` is removed only when provably promoter's own: a directory named as the
daemon names it, of a daemon provably gone, holding only the library's ``*_PID.db`` files.
Its daemon is gone when its process id runs no process now or one started at another
tick; in a directory another host may write in, only when no process of the whole machine
started at its tick (``state_temps.Machine``), else it is kept, counted in one line. Older
versions named it ``STATE/metrics/PID/`` (a process id alone, which names no machine and
no start): such a directory is removed when that process id runs no process here, or is
this daemon's own, and only when no other host may write in the state directory.
Anything else is kept and logged with where it is.

Deliberately not here: what goes into the files and how a scrape reads them
(``promoter.api.metrics``), starting the workers (``promoter.api.fleet``).
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

from promoter.api.logs import event
from promoter.errors import PathUnsafe
from promoter.fs.own_tree import remove_own_tree
from promoter.store.state_temps import (
    ELSEWHERE,
    GONE,
    Machine,
    is_metrics_name,
    metrics_name,
    metrics_writer,
)

log = logging.getLogger("promoter.serve")

ROOT = "metrics"
_OLD_NAME = re.compile(r"[1-9][0-9]*")  # an older version's: the parent's process id
_FILE = re.compile(r"(counter|histogram|summary|gauge_[a-z]+)_[0-9]+\.db")  # the library's


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _only_library_files(fd: int) -> bool:
    """Whether the opened directory holds only the library's regular files (read through
    its descriptor, so the directory proved is the one removed)."""
    try:
        names = os.listdir(fd)
        for name in names:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not _FILE.fullmatch(name) or not stat.S_ISREG(st.st_mode):
                return False
    except OSError:
        return False
    return True


def _own_name(name: str) -> bool:
    return is_metrics_name(name) or _OLD_NAME.fullmatch(name) is not None


def _remove(directory: Path) -> bool:
    """Remove ``directory`` when provably promoter's own (``promoter.fs.own_tree``);
    whether it was. Anything else is kept and logged with where it is."""
    if not _own_name(directory.name):
        proven = False
    else:
        try:
            remove_own_tree(directory.parent, directory.name, _only_library_files)
        except PathUnsafe:
            proven = False
        else:
            return True
    event(
        log,
        f"kept {directory}: not only this daemon's metrics files",
        logging.WARNING,
        path=str(directory),
    )
    return proven


def prepare(state_dir: Path, *, shared_with: str | None) -> Path:
    """Sweep the leftovers of ended daemons, then create this daemon's directory.

    ``shared_with``: None when no other host may write in the state directory
    (``promoter.engine.state_sharing``); else a directory whose daemon is not provably gone
    from this whole machine may be a live daemon's on another machine or in another pid
    namespace, and is kept (one line counts them).
    """
    root = state_dir / ROOT
    root.mkdir(mode=0o700, exist_ok=True)
    machine = None if shared_with is None else Machine()  # before the listing
    elsewhere: list[Path] = []
    for entry in sorted(root.iterdir()):
        if is_metrics_name(entry.name):
            state = metrics_writer(entry.name, machine)
            if state == GONE:
                _remove(entry)
            elif state == ELSEWHERE:
                elsewhere.append(entry)
        elif _OLD_NAME.fullmatch(entry.name):  # an older version's: judged by its pid alone
            ended = entry.name == str(os.getpid()) or not _alive(int(entry.name))
            if ended and shared_with is not None:
                elsewhere.append(entry)  # its process may run on another machine
            elif ended:
                _remove(entry)  # an ended daemon's (an earlier one of this very process id)
        else:
            _remove(entry)  # logged and kept: never a name this daemon gives
    if elsewhere:
        kind = "directory" if len(elsewhere) == 1 else "directories"
        event(
            log,
            f"kept {len(elsewhere)} metrics {kind} whose daemon may run on another machine "
            f"or in another pid namespace: {shared_with} may write in {state_dir} (a start "
            f"after its fence removes them): {', '.join(str(path) for path in elsewhere)}",
            logging.WARNING,
            kept=[str(path) for path in elsewhere],
        )
    mine = root / metrics_name()  # never a leftover's: it names this process
    mine.mkdir(mode=0o700)
    mine.chmod(0o700)
    return mine


def remove(directory: Path) -> None:
    """At the daemon's stop: its directory, when it holds only the library's files."""
    if directory.exists():
        _remove(directory)
