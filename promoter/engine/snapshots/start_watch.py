"""The daemon's answer to "which worktree paths changed since": one start watch a repository.

``changed_since`` is the engine call of ``POST /v1/repositories/{name}/changes``
(protocol: runs#watched-start): it makes the repository's ``StartWatch``
(``promoter.fs.start_watch``) on first ask, with its marks in the daemon's own
``watch-sync`` directory, and answers unknown for a repository not to be watched. Each
worker process of ``promoter serve`` has its own watch and generation: the command line
names every position it holds, and the worker answers for the one of its generation.
Fault point: ``start_watch_asked`` (asked, nothing answered yet).

Not here: the watch, its generation and clock (``promoter.fs.start_watch``), the
snapshots' watch (``promoter.git.shadow_watch``), and what the command line does with
the answer (``promoter.executor.start_watch``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from promoter.faults import point
from promoter.fs import inotify
from promoter.fs.start_watch import Changes, StartWatch
from promoter.store.durable import make_dirs

if TYPE_CHECKING:
    from promoter.engine.ports import StartWatching
    from promoter.engine.repos import Repository

__all__ = ["SYNC_DIR", "changed_since"]

SYNC_DIR = "watch-sync"  # in the daemon's state directory: its marks, nothing else
_MADE = threading.Lock()


def changed_since(
    services: StartWatching, repo: Repository, positions: Mapping[str, int]
) -> Changes:
    """The answer of ``repo``'s start watch (made on first ask) for the position of its
    generation among ``positions`` (generation: clock), or unknown when the repository is
    not to be watched (``snapshot_watch = false``) or cannot be."""
    point("start_watch_asked")
    if not repo.config.snapshot_watch or not inotify.available():
        return Changes("", 0, None, "the repository's worktree is not watched")
    with _MADE:
        watch = services.start_watches.get(repo.name)
        if watch is None:
            sync_dir = services.settings.state_dir / SYNC_DIR
            make_dirs(sync_dir, mode=0o700)
            watch = StartWatch(repo.worktree, str(sync_dir))
            services.start_watches[repo.name] = watch
    return watch.changed_since(positions)
