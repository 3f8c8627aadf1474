"""Names of promoter's named temp files in its state directory, and the start-up sweep.

``temp_name()``, ``scratch_name()``, ``review_scratch_name()`` and ``metrics_name()`` name
a temp after its writer (``.promoter-state-tmp-<boot>-<pid>-<start>-<16 hex>``, ``merge-…``
for a merge's scratch, ``review-diff-…`` for a review diff's links, ``serve-…`` for the
metrics directory of ``serve --workers N``) for the few places that need a name (a
filesystem without ``O_TMPFILE``, the moment before a rename, a directory a daemon keeps
while it serves).
``sweep(state_dir, shared_with=...)`` runs once at the daemon's start and removes, logging
each, only the temps whose writer is provably gone, in promoter's own directories, also
under the names older versions used (protocol: recovery#own-names-outside-worktrees). A
writer of another boot is provably gone only when no other host may write in the
directory (``shared_with`` None, ``promoter.engine.state_sharing``): on a shared disk it
may be a live host's on another machine, so such temps are then kept and counted in one
line. In a shared directory, a temp of this boot is removed only when its writer is gone
from the whole machine (``Machine``: a host of this machine in a container of its own
names its writers by the ids of its own pid namespace). ``metrics_writer()`` judges a
metrics directory's writer by the same rules for ``promoter.api.metrics_dir``.

Not here: writing temps (``promoter.store.durable``, ``promoter.store.blobs``), and
anything in a person's worktree (protocol: recovery#journaled-names-only).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import threading
from pathlib import Path

from promoter.errors import PathUnsafe
from promoter.fs import flush
from promoter.fs.own_tree import remove_own_tree
from promoter.lazy_log import LazyLogger

__all__ = [
    "MERGE_INPUTS",
    "MERGE_PREFIX",
    "METRICS_PREFIX",
    "PREFIX",
    "REVIEW_PREFIX",
    "Machine",
    "is_metrics_name",
    "is_own_temp",
    "metrics_name",
    "metrics_writer",
    "review_scratch_name",
    "scratch_name",
    "sweep",
    "temp_name",
]

log = LazyLogger("promoter.state")

PREFIX = ".promoter-state-tmp-"
_OWN = re.compile(r"\.promoter-state-tmp-([0-9a-f]{8})-(\d+)-(\d+)-[0-9a-f]{16}")
MERGE_PREFIX = "merge-"
MERGE_INPUTS = frozenset({"yours", "base", "agent"})  # the files merge_file writes
_OWN_MERGE = re.compile(r"merge-([0-9a-f]{8})-(\d+)-(\d+)-[0-9a-f]{16}")
REVIEW_PREFIX = "review-diff-"
_OWN_REVIEW = re.compile(r"review-diff-([0-9a-f]{8})-(\d+)-(\d+)-[0-9a-f]{16}")
METRICS_PREFIX = "serve-"
_OWN_METRICS = re.compile(r"serve-([0-9a-f]{8})-(\d+)-(\d+)-[0-9a-f]{16}")
_LEGACY_AUDIT = re.compile(r"\.tmp-[0-9a-f]{16}")  # durable.py and blobs.py, before
_LEGACY_SHADOW = re.compile(r".+\.tmp-(\d+)-\d+")  # shadow_files.put_file, before
_LEGACY_RUN = "run.tmp"  # sandbox.save, before
_UNKNOWN_START = "0"


def _boot() -> str:
    try:
        raw = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "0" * 8
    digits = raw.replace("-", "").lower()
    return digits[:8] if re.fullmatch(r"[0-9a-f]{8,}", digits) else "0" * 8


def _start_of(pid: int) -> str | None:
    """The start time (clock ticks since boot) of ``pid``; None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return _UNKNOWN_START
    fields = raw.rsplit(")", 1)[1].split()  # the command name may hold ')' and spaces
    return fields[19] if len(fields) > 19 else _UNKNOWN_START


_BOOT = _boot()


_self: tuple[int, str] | None = None  # (pid, start) of this process, read once per pid


def temp_name() -> str:
    """A fresh temp name that names this process as its writer."""
    return PREFIX + _writer()


def _writer() -> str:
    global _self
    pid = os.getpid()
    if _self is None or _self[0] != pid:  # first use, or a forked child
        _self = (pid, _start_of(pid) or _UNKNOWN_START)
    return f"{_BOOT}-{pid}-{_self[1]}-{secrets.token_hex(8)}"


def scratch_name() -> str:
    """A fresh name for a merge's scratch directory in ``<state>/merge``, naming its writer."""
    return MERGE_PREFIX + _writer()


def review_scratch_name() -> str:
    """A fresh name for a review diff's private directory in ``<state>/audit/tmp``
    (hard links of stored blobs, ``promoter.engine.review.batch``), naming its writer."""
    return REVIEW_PREFIX + _writer()


def metrics_name() -> str:
    """A fresh name for the metrics directory of ``serve --workers N`` in
    ``<state>/metrics`` (``promoter.api.metrics_dir``), naming the serving parent: never an
    earlier daemon's of the same process id (a container's daemon is always PID 1)."""
    return METRICS_PREFIX + _writer()


def is_metrics_name(name: str) -> bool:
    return _OWN_METRICS.fullmatch(name) is not None


def metrics_writer(name: str, machine: Machine | None) -> str:
    """Whether the daemon that named metrics directory ``name`` is provably gone: ``GONE``
    when it is (with ``machine``, a shared directory's, gone from the whole machine);
    ``ALIVE`` when it may still run here; ``ELSEWHERE`` when it may run where this machine
    cannot look (another machine, another pid namespace); ``OTHER`` for another name."""
    state = _writer_state(name, _OWN_METRICS)
    if state in (ALIVE, OTHER):
        return state
    if machine is None:
        return GONE  # no other host writes here: another boot's ended with its boot
    return GONE if state == GONE and machine.gone(name) else ELSEWHERE


def is_own_temp(name: str) -> bool:
    return _OWN.fullmatch(name) is not None


def _writer_state(name: str, pattern: re.Pattern[str] = _OWN) -> str:
    """``ALIVE`` when the process that named temp ``name`` may still be writing it, ``GONE``
    when it provably ended on this machine, ``ELSEWHERE`` when it ran under another boot id:
    ended on this machine, or a live writer on another one (a state directory on a shared
    disk); ``OTHER`` for a name that is not the pattern's."""
    match = pattern.fullmatch(name)
    if match is None:
        return OTHER
    boot, pid, start = match.group(1), int(match.group(2)), match.group(3)
    if boot != _BOOT:
        return ELSEWHERE
    now = _start_of(pid)
    if now is None:
        return GONE
    return ALIVE if start == _UNKNOWN_START or now in (_UNKNOWN_START, start) else GONE


ALIVE, GONE, ELSEWHERE, OTHER = "alive", "gone", "elsewhere", "other"
_INIT_PID_NAMESPACE = 0xEFFFFFFC  # the kernel's initial pid namespace (PROC_PID_INIT_INO)


class Machine:
    """The start times of every process of this machine, read once by a shared
    directory's sweep. A temp of this boot names its writer's process id in the writer's
    pid namespace: another host of this machine in a namespace of its own (a container)
    names ids that here are other processes, or none. Its writer is provably gone only
    when no process of the machine started at the tick its name records, and that tick is
    older than the read (``now``: the start of a thread made for it, on the same clock; a
    writer started after the read is not in it); only a process in the initial pid
    namespace sees every process (``seen`` None elsewhere)."""

    def __init__(self) -> None:
        self.seen: frozenset[str] | None = None
        self.now = 0
        ticks: list[str] = []

        def read_now() -> None:
            with contextlib.suppress(OSError):
                ticks.append(_start_at("thread-self"))

        reader = threading.Thread(target=read_now, name="promoter-tick")
        reader.start()
        reader.join()
        if not ticks or not ticks[0].isdigit():
            return
        self.now = int(ticks[0])
        try:
            if os.stat("/proc/self/ns/pid").st_ino != _INIT_PID_NAMESPACE:
                return
            names = os.listdir("/proc")
        except OSError:
            return
        starts: set[str] = set()
        for name in names:
            if not name.isdigit():
                continue
            try:
                start = _start_at(name)
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended meanwhile
            except OSError:
                return  # a process this one cannot read: nothing is proven
            if not start.isdigit():
                return
            starts.add(start)
        self.seen = frozenset(starts)

    def gone(self, name: str) -> bool:
        """Whether the writer that named temp ``name`` (of this boot) ran nowhere now."""
        start = _named_start(name)
        if self.seen is None or start is None or start == _UNKNOWN_START:
            return False
        return start not in self.seen and int(start) < self.now


def _start_at(entry: str) -> str:
    """The start time field of ``/proc/<entry>/stat`` ("" when it has none); OSError as
    reading raises it."""
    fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else ""


def _named_start(name: str) -> str | None:
    """The writer's start time a temp's name records, or None for a name without one."""
    for pattern in (_OWN, _OWN_MERGE, _OWN_REVIEW, _OWN_METRICS):
        match = pattern.fullmatch(name)
        if match is not None:
            return match.group(3)
    return None


def _leftover(place: str, name: str) -> str:
    """Whether ``name`` in a directory of kind ``place`` is a leftover temp of promoter's:
    ``GONE`` (its writer provably ended here), ``ELSEWHERE`` (its writer cannot be looked
    up on this machine: another boot id, or an older version's name that names no boot),
    or ``OTHER`` (a live writer's, or not a temp of promoter's)."""
    if place == "merge":
        state = _writer_state(name, _OWN_MERGE)
    elif is_own_temp(name):
        state = _writer_state(name)
    elif place == "audit" and _OWN_REVIEW.fullmatch(name):
        state = _writer_state(name, _OWN_REVIEW)
    elif place in ("audit", "credentials", "quota") and _LEGACY_AUDIT.fullmatch(name):
        state = ELSEWHERE  # names no writer at all
    elif place == "run" and name == _LEGACY_RUN:
        state = ELSEWHERE
    elif place == "shadow" and (legacy := _LEGACY_SHADOW.fullmatch(name)) is not None:
        state = ALIVE if _start_of(int(legacy.group(1))) is not None else ELSEWHERE
    else:
        state = OTHER
    return OTHER if state == ALIVE else state


def _directories(state_dir: Path) -> list[tuple[str, Path]]:
    """Every directory of promoter's own that a temp may be left in, with its kind."""
    places: list[tuple[str, Path]] = [("top", state_dir), ("top", state_dir / "replacements")]
    audit = state_dir / "audit"
    places += [("audit", audit)]
    for found in _walk(audit, skip={audit / "blobs"}):
        places.append(("audit", found))
    for name in ("credentials", "quota"):
        places.append((name, state_dir / name))
    runs = state_dir / "runs"
    places.append(("runs", runs))
    places += [("run", run) for run in _children(runs)]
    snapshots = state_dir / "snapshots"
    places.append(("snapshots", snapshots))
    for shadow in _children(snapshots):
        places += [("shadow", shadow), ("shadow", shadow / "info")]
    places.append(("merge", state_dir / "merge"))
    return places


def _children(directory: Path) -> list[Path]:
    """The real directories (not symlinks) directly in ``directory``."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(Path(entry.path) for entry in entries if entry.is_dir(follow_symlinks=False))


def _walk(directory: Path, *, skip: set[Path]) -> list[Path]:
    found: list[Path] = []
    for child in _children(directory):
        if child in skip:
            continue
        found.append(child)
        found += _walk(child, skip=skip)
    return found


def sweep(state_dir: Path, *, shared_with: str | None) -> list[Path]:
    """Remove leftover temps of promoter's own under ``state_dir``; the paths removed.

    ``shared_with``: None when no other host may write in the directory (a temp of another
    boot is then provably a killed writer's), else the hosts that may, as the log names
    them: their temps cannot be told from this machine's own of an earlier boot, so every
    temp whose writer is not provably gone on this machine is kept, and one line names
    them and why.
    """
    removed: list[Path] = []
    kept: list[Path] = []
    machine = Machine() if shared_with else None  # read before any directory is listed
    for place, directory in _directories(state_dir):
        try:
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            log.warning("cannot sweep %s for leftover temps: %s", directory, exc)
            continue
        try:
            gone = _sweep_one(place, directory, dir_fd, kept, machine)
            if gone:
                flush.fsync(dir_fd)
            removed += gone
        finally:
            os.close(dir_fd)
    if kept:
        log.warning(
            "kept %d temp%s whose writer may be alive on another machine or in another pid "
            "namespace: %s may write in %s (a start after its fence removes them): %s",
            len(kept),
            "" if len(kept) == 1 else "s",
            shared_with,
            state_dir,
            ", ".join(str(path) for path in kept[:_NAMED]) + _more(len(kept)),
        )
    return removed


_NAMED = 20  # the kept temps a log line names; the count says how many more


def _more(count: int) -> str:
    return f" and {count - _NAMED} more" if count > _NAMED else ""


def _sweep_one(
    place: str, directory: Path, dir_fd: int, kept: list[Path], machine: Machine | None
) -> list[Path]:
    """The leftovers of ``directory`` removed; with ``machine`` (a shared directory), those
    whose writer cannot be proven gone from the whole machine are added to ``kept``
    instead."""
    gone: list[Path] = []
    for name in sorted(os.listdir(dir_fd)):
        state = _leftover(place, name)
        if state == OTHER:
            continue
        if machine is not None and (state == ELSEWHERE or not machine.gone(name)):
            kept.append(directory / name)  # another machine's, or another pid namespace's
            continue
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if place == "merge":
                gone += _remove_scratch(directory, name, info.st_mode)
                continue
            if place == "snapshots" and stat.S_ISDIR(info.st_mode) and is_own_temp(name):
                gone += _remove_staging(directory, name)
                continue
            if place == "audit" and stat.S_ISDIR(info.st_mode) and _OWN_REVIEW.fullmatch(name):
                gone += _remove_staging(directory, name)  # a review diff's links, its writer gone
                continue
            if not stat.S_ISREG(info.st_mode):
                log.warning("kept %s: named like a temp but not a regular file", directory / name)
                continue
            os.unlink(name, dir_fd=dir_fd)
            log.warning("removed leftover temp %s (%d bytes)", directory / name, info.st_size)
            gone.append(directory / name)
    return gone


def _remove_staging(snapshots: Path, name: str) -> list[Path]:
    """Remove a shadow repository staged by a writer that is gone (never renamed into place).

    By descriptors, never through a symlink or onto another mount
    (``promoter.fs.own_tree``); what cannot be removed is kept and logged.
    """
    try:
        removed = remove_own_tree(snapshots, name, lambda _fd: True)
    except (PathUnsafe, OSError) as exc:
        log.warning("kept %s: %s", snapshots / name, exc)
        return []
    log.warning("removed leftover staging directory %s", removed)
    return [removed]


def _only_merge_inputs(fd: int) -> bool:
    """Whether the open directory ``fd`` holds nothing but a merge's regular input files."""
    for name in os.listdir(fd):
        if name not in MERGE_INPUTS:
            return False
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            return False
    return True


def _remove_scratch(merge: Path, name: str, mode: int) -> list[Path]:
    """Remove a merge's scratch directory whose writer is gone (``promoter.git.merge_file``).

    Only a real directory holding nothing but the merge's own input files; anything else
    under a scratch name (a file, a symlink, a directory with other entries) is kept.
    """
    if not stat.S_ISDIR(mode):
        log.warning("kept %s: named like a merge scratch but not a directory", merge / name)
        return []
    try:
        removed = remove_own_tree(merge, name, _only_merge_inputs)
    except (PathUnsafe, OSError) as exc:
        log.warning("kept %s: %s", merge / name, exc)
        return []
    log.warning("removed leftover merge scratch %s", removed)
    return [removed]
