"""Removing a finished sandbox off the person's critical path.

``remove_later`` takes a sandbox out of the runs at once (a rename of
``<state>/runs/<run_id>`` to ``<state>/runs/.promoter-removing-<run_id>``: one
``renameat2`` with ``RENAME_NOREPLACE``, so ``--list`` and ``--continue`` no longer see
it) and starts a detached process (a fork of this process when it runs no other thread,
else this module's ``main`` in this interpreter without ``site``, given this process's
import path; either in its own session, without a terminal) that removes it through
``sandbox.remove_own``: by descriptors, only after the ``run.json`` read through the
opened directory names that very run, and with an overlay only promoter's own layers
(the base is shared and stays). That process holds an ``flock`` on the directory while
it works.

``sweep`` (at the start of the next ``promoter run``) finishes a removal whose process
is gone (the lock can be taken): a kill at any point leaves a directory that is still
provably the run's, or nothing. It never removes a directory that is not so named and
proved; a run directory a kill left before its record was written is removed only when
empty (``rmdir``).

Fault points: ``removal_renamed`` (out of the runs, the process not started),
``removal_walking`` (in the detached process, before the walk).

Deliberately not here: deciding that a run is finished (``promoter.executor.run.flow``),
removing the person's anything.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from promoter import faults
from promoter.errors import PathUnsafe
from promoter.executor import layers
from promoter.executor import sandbox as sandboxes
from promoter.fs.own_entry import OwnDir, OwnTree
from promoter.fs.own_tree import remove_own_tree
from promoter.fs.syscalls import RENAME_NOREPLACE, renameat2
from promoter.lazy_log import LazyLogger

__all__ = ["REMOVING", "remove_later", "sweep"]

REMOVING = ".promoter-removing-"
log = LazyLogger("promoter.run")


def remove_later(state_dir: Path, run_id: str) -> Path:
    """Take run ``run_id``'s sandbox out of the runs and remove it in the background;
    returns where it is while it goes. Refuses what ``sandbox.remove`` refuses."""
    record = sandboxes.load(state_dir, run_id)
    sandboxes.check_removable(state_dir, record)
    root = sandboxes.runs_dir(state_dir)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        renameat2(fd, run_id, fd, REMOVING + run_id, RENAME_NOREPLACE)
    finally:
        os.close(fd)
    faults.point("removal_renamed")
    args = [str(state_dir.absolute()), run_id]
    if threading.active_count() == 1:
        _fork(args)  # this process's copy, everything it needs already loaded
    else:  # a fork would copy another thread's locks: a new interpreter
        argv = [sys.executable, "-I", "-S", "-c", _BOOT, _import_path(), *args]
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    return root / (REMOVING + run_id)


def _fork(args: list[str]) -> None:
    """``main(args)`` in a child of this (single-threaded) process, detached as the
    spawned one is: its own session, no terminal, every descriptor but /dev/null on 0–2
    closed; it leaves by ``os._exit`` (nothing of this process's runs again there)."""
    pid = os.fork()
    if pid != 0:
        return
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        code = main(args)
    finally:
        os._exit(code)


# the detached process: this interpreter without ``site`` (no ``.pth`` files, no
# editable-install finder to load), this process's import path, then ``main``
_BOOT = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); del sys.argv[1]; "
    "from promoter.executor.removal import main; sys.exit(main(sys.argv[1:]))"
)


def _import_path() -> str:
    """Where this process found promoter (first), then its own import path, as JSON."""
    package = Path(__file__).resolve().parent.parent.parent
    return json.dumps([str(package), *(entry for entry in sys.path if entry)])


def _remove_renamed(state_dir: Path, run_id: str, *, wait: bool) -> bool:
    """Remove ``.promoter-removing-<run_id>`` under its lock; False when another holds it."""
    root = sandboxes.runs_dir(state_dir)
    name = REMOVING + run_id
    try:
        fd = os.open(root / name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        faults.point("removal_walking")
        layers.prepare_removal(root / name)
        try:
            remove_own_tree(root, name, lambda top: sandboxes.names_run(top, run_id))
        except FileNotFoundError:
            return False
    finally:
        os.close(fd)
    return True


def _has_record(runs: OwnDir, entry: str) -> bool:
    """Whether the run directory ``entry`` holds a ``run.json`` (looked up below ``runs``)."""
    with runs.tree.directory([entry]) as run:
        return run.mode("run.json") is not None


def sweep(state_dir: Path) -> list[str]:
    """Finish the removals whose process is gone; the run ids finished."""
    root = sandboxes.runs_dir(state_dir)
    if not root.is_dir():
        return []
    done: list[str] = []
    with OwnTree.open(root) as tree, tree.directory([]) as runs:
        entries = sorted(os.listdir(runs.fd))
        for entry in entries:
            if entry.startswith(sandboxes.RUN_PREFIX):
                with contextlib.suppress(OSError, PathUnsafe):
                    if not _has_record(runs, entry) and runs.remove_empty_dir(entry):
                        done.append(entry)  # killed before its record: empty, or kept
    for entry in entries:
        if not entry.startswith(REMOVING + sandboxes.RUN_PREFIX):
            continue
        run_id = entry.removeprefix(REMOVING)
        with contextlib.suppress(OSError, PathUnsafe):
            if _remove_renamed(state_dir, run_id, wait=False):
                done.append(run_id)
    return done


def main(argv: list[str]) -> int:
    state_dir, run_id = Path(argv[0]), argv[1]
    try:
        _remove_renamed(state_dir, run_id, wait=True)
    except (OSError, PathUnsafe) as exc:
        log.warning("the sandbox of %s was not removed: %s", run_id, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
