"""The directory the workers of one ``serve --workers N`` keep their metrics in.

``STATE/metrics/PID/`` (the serving parent's process id), mode 0700: created by the
parent before it starts its workers, handed to each as ``PROMETHEUS_MULTIPROC_DIR``, where
prometheus_client keeps every worker's values in ``KIND_PID.db`` files; removed by the
parent once the daemon stopped. At start, what earlier daemons left in ``STATE/metrics/``
is removed only when provably promoter's own: a directory named as the daemon names it,
of a process that no longer runs, holding only the library's ``*_PID.db`` files, and only
when no other host may write in the state directory (a process id names no machine).
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
from promoter.errors import ConfigError, PathUnsafe
from promoter.fs.own_tree import remove_own_tree

log = logging.getLogger("promoter.serve")

ROOT = "metrics"
_NAME = re.compile(r"[1-9][0-9]*")  # the parent's process id
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


def _remove(directory: Path) -> bool:
    """Remove ``directory`` when provably promoter's own (``promoter.fs.own_tree``);
    whether it was. Anything else is kept and logged with where it is."""
    if not _NAME.fullmatch(directory.name):
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
    (``promoter.engine.state_sharing``); else a directory of a process id that does not run
    here may be a live daemon's on another machine, and is kept (one line counts them).
    """
    root = state_dir / ROOT
    root.mkdir(mode=0o700, exist_ok=True)
    mine = root / str(os.getpid())
    elsewhere: list[Path] = []
    for entry in sorted(root.iterdir()):
        ended = entry == mine or (_NAME.fullmatch(entry.name) and not _alive(int(entry.name)))
        if ended and shared_with is not None:
            elsewhere.append(entry)  # its process may run on another machine
        elif ended:
            _remove(entry)  # an ended daemon's (an earlier one of this very process id)
        elif not _NAME.fullmatch(entry.name):
            _remove(entry)  # logged and kept: never a name this daemon gives
    if elsewhere:
        kind = "directory" if len(elsewhere) == 1 else "directories"
        event(
            log,
            f"kept {len(elsewhere)} metrics {kind} whose daemon may run on another machine: "
            f"{shared_with} may write in {state_dir} (a start after its fence removes them): "
            f"{', '.join(str(path) for path in elsewhere)}",
            logging.WARNING,
            kept=[str(path) for path in elsewhere],
        )
    if mine in elsewhere:
        raise ConfigError(
            f"{mine} is kept: a daemon of this process id on another machine may use it "
            f"({shared_with} may write in {state_dir}); start again (another process id)"
        )
    mine.mkdir(mode=0o700)  # still there: not promoter's own, the start stops
    mine.chmod(0o700)
    return mine


def remove(directory: Path) -> None:
    """At the daemon's stop: its directory, when it holds only the library's files."""
    if directory.exists():
        _remove(directory)
