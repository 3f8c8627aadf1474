"""``promoter run --list`` and ``--prune``: the sandboxes, their true status, their size.

``list_sandboxes`` refreshes each step that waits on the host (an operation awaiting
approval or in progress) or was refused (a merge may have mended it) from the daemon when
it answers, and says ``unknown`` when it does not (the daemon is asked only for such
steps, and not again once unreachable); a promotion an operator accepted in part reads
``approved in part`` (not ``refused``), one refused for drift and then merged (by
``promoter merge`` too) takes the merged promotion's operation, bundle and status, as a
run's own merge records them, and a step left ``started`` with no process in its sandbox
reads ``interrupted``; each line shows the status in words (``no changes``, ``command
failed``: ``status.shown``, as ``--prune`` says it), with the code that ended a step
``refused`` or ``interrupted`` when it recorded one (``refused (base_moved)``), the paths
its bundle left out (``completed, without src/app.py``: a refused link, a conflicted
file), and the sandbox's size on disk.
``prune`` removes, through the safe ``sandbox.remove``, every sandbox whose last step is
finished (``completed`` or ``no_changes``) and untouched for ``--older-than`` (default:
any age), and every abandoned one (any other status the host is not still working on,
``refused`` too) untouched for ``--older-than`` but at least ``ABANDONED_AFTER``; never
one that a live process has as its working or root directory, never one whose status is
unknown; it prints what it freed.

Deliberately not here: anything that touches a person's worktree.
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

from promoter.cli.common import console, escape
from promoter.client.sync import PromoterClient
from promoter.domain.hidden import visible
from promoter.errors import ConfigError, PathUnsafe, PromoterError
from promoter.executor import sandbox as sandboxes
from promoter.executor.run.merged import followed
from promoter.executor.run.state import Run
from promoter.executor.run.status import shown
from promoter.fs.tree_walk import DIR_FLAGS, Level, Walk

__all__ = ["age", "list_sandboxes", "prune"]

IN_PART = "approved_in_part"
FINISHED = frozenset({"completed", "no_changes", IN_PART})
AT_THE_HOST = frozenset({"awaiting_approval", "in_progress", "needs_recovery"})
ASKED = AT_THE_HOST | {"refused"}  # a refusal for drift may have been merged since
STILL_AT_THE_HOST = AT_THE_HOST | {"needs_reconciliation", "unknown"}
ABANDONED_AFTER = 24 * 3600.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def age(text: str | None) -> float:
    """Seconds of ``7d``, ``12h``, ``30m``, ``45s``, ``2w`` (None: 0)."""
    if text is None:
        return 0.0
    match = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", text)
    if match is None:
        raise ConfigError(f"--older-than {text!r}: give a number and a unit: 45s, 30m, 12h, 7d, 2w")
    return float(int(match.group(1)) * _UNITS[match.group(2)])


def _size(home: Path) -> int:
    """Bytes on disk under ``home`` (links not followed, hard links counted once, any
    depth: ``promoter.fs.tree_walk``); what cannot be read is not counted."""
    seen: set[tuple[int, int]] = set()
    total = 0

    def count(info: os.stat_result) -> None:
        nonlocal total
        if (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512

    def entry(level: Level, name: str, info: os.stat_result) -> bool:
        count(info)
        return True

    def leave(parent: Level, child: Level) -> bool:
        assert child.fd is not None
        count(os.fstat(child.fd))
        return True

    try:
        top = os.open(home, DIR_FLAGS)
    except OSError:
        return 0
    try:
        Walk(top, str(home)).run(entry, leave)
    except (OSError, PathUnsafe):
        pass  # a tree changing under the walk: what was counted so far
    finally:
        os.close(top)
    return total


def human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


class _Host:
    """The daemon, asked only when a step waits on it; once unreachable, not asked again."""

    def __init__(self, url: str, token: str | None) -> None:
        self._url = url
        self._token = token
        self._client: PromoterClient | None = None
        self._reachable = token is not None

    def status(self, operation_id: str) -> tuple[str, dict[str, str]] | None:
        """The operation's status and, when a merge made a promotion of it, that promotion's
        operation and bundle ids; None when the host cannot say."""
        if not self._reachable:
            return None
        if self._client is None:
            self._client = PromoterClient(self._url, self._token, timeout=10.0)
        client = self._client
        try:
            first = client.get_operation(operation_id)
            view = followed(first, client.get_operation)
        except ConfigError:  # unavailable (a ConfigError too) or unusable: the rest unknown too
            self._reachable = False
            return None
        except PromoterError:
            return None
        fields: dict[str, str] = {}
        if view["operation_id"] != operation_id and view.get("bundle_id"):
            fields = {"operation_id": view["operation_id"], "bundle_id": str(view["bundle_id"])}
        if view["status"] == "refused" and view.get("code") == IN_PART:
            return IN_PART, fields  # an operator accepted a part: promoted as its own operation
        return str(view["status"]), fields

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def _refresh(host: _Host, record: sandboxes.RunRecord) -> tuple[str, dict[str, str]]:
    """The last step's status (and the merged promotion's ids, when a merge made one),
    asked of the host where the host still decides it or a merge may have mended it."""
    if not record.steps:
        return "new", {}
    last = record.steps[-1]
    if last.status not in ASKED or last.operation_id is None:
        return last.status, {}
    answer = host.status(last.operation_id)
    unknown = last.status if last.status == "refused" else "unknown"  # a refusal stands
    return (unknown, {}) if answer is None else answer


def _statuses(
    state_dir: Path, url: str, token: str | None
) -> list[tuple[sandboxes.RunRecord, str]]:
    host = _Host(url, token)
    try:
        found = []
        for record in sandboxes.list_runs(state_dir):
            before = record.steps[-1].status if record.steps else None
            status, merged = _refresh(host, record)
            if record.steps and (status != before or merged) and status != "unknown":
                Run(state_dir, record).move(record.steps[-1], status, **merged)  # the host's word
            if status == "started" and not _live(sandboxes.runs_dir(state_dir) / record.run_id):
                status = "interrupted"  # no process runs the step any more
            found.append((record, status))
        return found
    finally:
        host.close()


def list_sandboxes(state_dir: Path, url: str, token: str | None) -> None:
    runs = _statuses(state_dir, url, token)
    if not runs:
        console.print(f"no sandboxes under {sandboxes.runs_dir(state_dir)}", soft_wrap=True)
    for record, status in runs:
        home = sandboxes.runs_dir(state_dir) / record.run_id
        console.print(
            f"{record.run_id}  {escape(record.repository)}  {len(record.steps)} step(s), "
            f"last {_ended(record, status)}  {human(_size(home))}  {record.clone}",
            soft_wrap=True,
            highlight=False,
        )


def _ended(record: sandboxes.RunRecord, status: str) -> str:
    """``status`` in words, with the code that ended the last step there when it has one
    and the paths its bundle left out: ``refused (base_moved)``, ``interrupted
    (unauthenticated)``, ``completed, without src/app.py``."""
    last = record.steps[-1] if record.steps else None
    code = last.code if last is not None and last.status == status else None
    left = ", ".join(map(visible, last.left_out)) if last is not None else ""
    return (
        shown(status)
        + (f" ({escape(code)})" if code else "")
        + (f", without {escape(left)}" if left else "")
    )


def _live(home: Path) -> list[int]:
    """Processes whose working or root directory is inside ``home``."""
    real = os.path.realpath(home)
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        for link in ("cwd", "root"):
            try:
                target = os.readlink(f"/proc/{entry}/{link}")
            except OSError:
                continue
            if target == real or target.startswith(real + "/"):
                found.append(int(entry))
                break
    return found


def _untouched_for(state_dir: Path, run_id: str) -> float:
    try:
        st = os.lstat(sandboxes.runs_dir(state_dir) / run_id / "run.json")
    except OSError:
        return 0.0
    return time.time() - st.st_mtime if stat.S_ISREG(st.st_mode) else 0.0


def _span(seconds: float) -> str:
    """``a day``, ``7 days``, ``12 hours``: the wait before an unfinished sandbox goes."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"a {unit}" if count == 1 else f"{count} {unit}s"
    return f"{int(seconds)} seconds"


def prune(state_dir: Path, url: str, token: str | None, older_than: float) -> None:
    freed = 0
    removed = 0
    for record, status in _statuses(state_dir, url, token):
        home = sandboxes.runs_dir(state_dir) / record.run_id
        idle = _untouched_for(state_dir, record.run_id)
        if status in STILL_AT_THE_HOST:
            why = f"kept: last {shown(status)}"
        elif status not in FINISHED and idle < (wait := max(older_than, ABANDONED_AFTER)):
            why = (
                f"kept: last {shown(status)}, untouched for less than {_span(wait)} "
                f"(promoter run --remove {record.run_id} removes it now)"
            )
        elif idle < older_than:
            why = "kept: newer than --older-than"
        elif pids := _live(home):
            why = f"kept: process {', '.join(map(str, pids))} runs in it"
        else:
            size = _size(home)
            sandboxes.remove(state_dir, record.run_id)
            freed += size
            removed += 1
            console.print(
                f"removed {record.run_id} (last {shown(status)}), freed {human(size)}",
                soft_wrap=True,
                highlight=False,
            )
            continue
        console.print(f"{record.run_id}  {why}", soft_wrap=True, highlight=False)
    console.print(f"pruned {removed} sandbox(es), freed {human(freed)}", soft_wrap=True)
