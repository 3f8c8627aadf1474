"""A sandbox's start narrowed by the daemon's watch: the baseline and the candidate paths.

This module owns ``<state>/starts/<key>-<generation>.json``, a worktree's baselines, one
per generation of the daemon's watch (each worker process of ``promoter serve`` has its
own), the ``MAX_BASELINES`` most recently written kept. A baseline holds the paths the
last seeded status pass named (``SeededShadow.status_paths``, and the folders git could
not open: ``start_state`` passes them, so every narrowed start names them), the watch position
(generation, clock) asked for *before* that pass began, the base tree it compared with,
a fingerprint of what outside the worktree changes the answer without an event (the
index, ``info/exclude``, ``info/attributes``, the repository's config files: device,
inode, size, mtime_ns, ctime_ns), and the pass's walk of the index (its
``.gitattributes`` paths, keyed by the index's checksum trailer: the next pass walks an
index only when its bytes differ; and where every ``seed_index.MARK_EVERY``-th entry
begins in the index file it read, named by its identity: the next narrowed pass on that
very file reads only the candidates' entries, ``seed_index.candidates_index``). ``plan``
reads the baselines, takes the fingerprint, asks the daemon with every position they
hold (``Watched.ask``: ``POST /v1/repositories/{name}/changes``; the worker answers for
the one of its generation, or unknown), compares with the baseline of the answer's
generation, never another (``Asking``: the reading and the asking begun in a thread
while the start saves its record and makes its layers, never waited for by a start that
failed or was interrupted; fault point ``start_ask_awaited``: the start about to wait
for its answer), and returns the candidate
paths: the watch's, the baseline's, and when the index changed what ``git diff-index
--cached`` names; the status pass limited to them by literal pathspecs gives the full
pass's answer
(protocol: runs#watched-start). Anything unknown or unexpected (no or a damaged
baseline, none of the answer's generation, another base tree, a changed exclude or
config, a ``.gitignore`` or ``.gitattributes`` among the watch's paths, more than
``MAX_CANDIDATES``, or ``MAX_INDEXED_CANDIDATES`` while the index is the one the
baseline walked) plans the full pass. ``record`` writes the baseline of the answering
generation after a pass (through ``OwnTemp``, renamed, not flushed: after a crash the
name holds the new baseline, the one before it, none or a damaged one, and each of them
is read as above; docs/decisions/the-start-baseline-is-not-flushed.md; a damaged one is
replaced there), keeps the others, and drops the oldest past ``MAX_BASELINES``. A
baseline stays good however old while its generation lives: its watch names every change
since its clock. A narrowed pass during which a fingerprinted file moved is read again
in full (``unmoved``, ``start_state.capture_into``).

Not here: the status pass (``seeded.py``), laying the start (``start_state.py``), the
daemon's watch (``promoter.engine.snapshots.start_watch``). Promoter's git reads no
global config, ``core.excludesFile`` or ``core.attributesFile`` (``git/runner.py`` fixes
them), so those files cannot change the answer and are not fingerprinted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from promoter.errors import PathUnsafe, PromoterError
from promoter.executor.seed_index import PlainIndex
from promoter.faults import point
from promoter.fs.own_entry import OwnTree
from promoter.fs.own_temp import OwnTemp
from promoter.git.layout import RepoLayout
from promoter.git.runner import run_git
from promoter.lazy_log import LazyLogger

__all__ = [
    "MAX_BASELINES",
    "MAX_CANDIDATES",
    "MAX_INDEXED_CANDIDATES",
    "Asking",
    "Plan",
    "Watched",
    "baseline_path",
    "baseline_paths",
    "plan",
    "record",
    "unmoved",
]

log = LazyLogger("promoter.run")

MAX_CANDIDATES = 10  # about 1.6 ms each in a 100 000-file status pass: past this, all
# with the index the baseline walked unchanged, the pass reads only the candidates'
# entries (``seed_index.candidates_index``): a promotion's own temp and displaced names
# beside its files cost little there
MAX_INDEXED_CANDIDATES = 64
MAX_BASELINES = 8  # generations a worktree keeps a baseline of (the route's MAX_POSITIONS)
STARTS_DIR = "starts"
_SCHEMA = "PromoterStartBaselineV1"
_GENERATION = re.compile(r"[0-9a-f]{16}")
_HEX = re.compile(r"(?:[0-9a-f]{2})+")
_OID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_INDEX_KEY = re.compile(r"[0-9]{1,12}:[0-9a-f]{40}")
_SPECIAL = {b".gitignore", b".gitattributes"}
_MAX_BASELINE = 1 << 20


class Watched(NamedTuple):
    """Where the baselines are kept and how the daemon is asked (every position held:
    (generation, clock) pairs, one a generation; in ``Asking``'s thread, through a client
    of its own)."""

    state_dir: Path
    ask: Callable[[list[tuple[str, int]]], Mapping[str, Any]]


class Plan(NamedTuple):
    """What the start's status pass reads: ``candidates`` only, or everything (``None``)."""

    candidates: list[bytes] | None
    generation: str
    clock: int
    fingerprint: dict[str, list[int] | None]
    reason: str = ""
    index_walk: tuple[str, PlainIndex] | None = None  # the baseline's walk of its index


def _key(layout: RepoLayout) -> str:
    key = os.fsencode(layout.worktree) + b"\0" + os.fsencode(layout.git_dir)
    return hashlib.sha256(key).hexdigest()[:32]


def baseline_path(state_dir: Path, layout: RepoLayout, generation: str) -> Path:
    """The baseline file of the worktree ``layout`` names, for a watch's ``generation``."""
    return state_dir / STARTS_DIR / f"{_key(layout)}-{generation}.json"


def baseline_paths(state_dir: Path, layout: RepoLayout) -> list[tuple[str, Path]]:
    """The worktree's baseline files, (generation, path), the most recently written first
    (regular files named as ``baseline_path`` names them; nothing else in the directory)."""
    name = re.compile(re.escape(_key(layout)) + r"-([0-9a-f]{16})\.json")
    found: list[tuple[int, str, Path]] = []
    try:
        with os.scandir(state_dir / STARTS_DIR) as entries:
            for entry in entries:
                match = name.fullmatch(entry.name)
                if match is None or not entry.is_file(follow_symlinks=False):
                    continue
                try:
                    mtime = entry.stat(follow_symlinks=False).st_mtime_ns
                except OSError:
                    continue
                found.append((mtime, match.group(1), Path(entry.path)))
    except OSError:
        return []
    found.sort(reverse=True)
    return [(generation, path) for _, generation, path in found]


def fingerprint(layout: RepoLayout) -> dict[str, list[int] | None]:
    """(device, inode, size, mtime_ns, ctime_ns) of each file outside the worktree the
    pass reads (a write in place changes the ctime, and so does setting the mtime back)."""
    files = {
        "index": os.path.join(layout.git_dir, "index"),
        "exclude": os.path.join(layout.common_dir, "info", "exclude"),
        "attributes": os.path.join(layout.common_dir, "info", "attributes"),
        "config": os.path.join(layout.common_dir, "config"),
        "config.worktree": os.path.join(layout.git_dir, "config.worktree"),
    }
    found: dict[str, list[int] | None] = {}
    for name, path in files.items():
        try:
            st = os.stat(path)
        except OSError:
            found[name] = None
            continue
        found[name] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return found


class _Asked(NamedTuple):
    """``plan``'s reading and asking: the fingerprint, the baselines, the answer (or why
    there is none)."""

    fingerprint: dict[str, list[int] | None]
    baselines: dict[str, _Baseline]
    answer: Mapping[str, Any]
    position: tuple[str, int]
    failed: str = ""


def _ask(watched: Watched, layout: RepoLayout) -> _Asked:
    print_ = fingerprint(layout)
    baselines: dict[str, _Baseline] = {}
    for generation, path in baseline_paths(watched.state_dir, layout)[:MAX_BASELINES]:
        loaded = _load(path)
        if loaded is not None and loaded.generation == generation:  # as its name says
            baselines[generation] = loaded
    try:
        answer = watched.ask([(b.generation, b.clock) for b in baselines.values()])
        position = _position(answer)
    except (PromoterError, OSError, ValueError) as exc:
        return _Asked(print_, baselines, {}, ("", 0), f"the daemon's watch did not answer: {exc}")
    return _Asked(print_, baselines, answer, position)


class Asking(threading.Thread):
    """``plan``'s reading and asking begun early, beside what the start does before its
    status pass (HEAD's tree, the record, the layers); ``plan`` takes its answer. Begun
    before that pass as ``plan`` itself is, so the position asked for still comes before
    it; the fingerprint taken earlier only widens what ``unmoved`` compares. A daemon
    thread that reads and asks only, through a client of its own (``Watched.ask`` opens
    one): a start that fails or is interrupted leaves it to its answer and never waits
    for it, so Ctrl-C ends the start at once however long the daemon takes."""

    def __init__(self, watched: Watched, layout: RepoLayout) -> None:
        super().__init__(name="promoter-start-ask", daemon=True)
        self.watched, self.layout = watched, layout
        self._asked: _Asked | None = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._asked = _ask(self.watched, self.layout)
        except BaseException as exc:  # raised again by asked
            self._error = exc

    def asked(self) -> _Asked:
        point("start_ask_awaited")  # the start waits for the answer from here
        self.join()
        if self._error is not None:
            raise self._error
        assert self._asked is not None
        return self._asked

    def plan(self, base_tree: str) -> Plan:
        """``plan`` with this answer."""
        return _planned(self.asked(), self.layout, base_tree)


def plan(watched: Watched, layout: RepoLayout, base_tree: str) -> Plan:
    """Ask the daemon and compare with the baseline: the candidates, or the full pass."""
    return _planned(_ask(watched, layout), layout, base_tree)


def _planned(asked: _Asked, layout: RepoLayout, base_tree: str) -> Plan:
    print_, baselines, answer = asked.fingerprint, asked.baselines, asked.answer
    if asked.failed:
        return Plan(None, "", 0, print_, asked.failed)
    now_generation, now_clock = asked.position
    full = Plan(None, now_generation, now_clock, print_)
    paths = answer.get("paths")
    if not baselines:
        return _why(full, "no baseline")
    if not isinstance(paths, list):
        return _why(full, str(answer.get("reason") or "the watch does not know"))
    baseline = baselines.get(now_generation) if now_generation else None
    if baseline is None:  # the paths of one watch never stand for another's
        return _why(full, "another generation of the watch")
    if baseline.base_tree != base_tree:
        return _why(full, "another HEAD tree")
    if any(print_[k] != baseline.fingerprint.get(k) for k in print_ if k != "index"):
        return _why(full, "the excludes, attributes or config changed")
    candidates = set(baseline.dirty)  # an ignore file among them: unchanged since
    for path in paths:
        if not isinstance(path, str) or not path:
            return _why(full, "an unexpected path in the answer")
        if os.path.basename(path.encode("utf-8")) in _SPECIAL:
            return _why(full, "an ignore or attributes file changed")
        candidates.add(path.encode("utf-8"))
    limit = MAX_CANDIDATES
    if print_["index"] != baseline.fingerprint.get("index"):
        if len(candidates) > limit:
            return _why(full, f"more than {limit} candidates")
        candidates.update(_staged(layout, base_tree))
    elif baseline.index_walk is not None and layout.object_format == "sha1":
        limit = MAX_INDEXED_CANDIDATES
    if len(candidates) > limit:
        return _why(full, f"more than {limit} candidates")
    return Plan(sorted(candidates), now_generation, now_clock, print_, "", baseline.index_walk)


def unmoved(layout: RepoLayout, planned: Plan) -> bool:
    """Whether the files ``planned`` fingerprinted are as they were (after its pass)."""
    return fingerprint(layout) == planned.fingerprint


def record(
    watched: Watched,
    layout: RepoLayout,
    planned: Plan,
    base_tree: str,
    dirty: list[bytes],
    index_walk: tuple[str, PlainIndex] | None = None,
) -> None:
    """Keep ``dirty`` (a pass's paths, begun after ``planned`` asked) as the baseline,
    with the pass's walk of the index (``SeededShadow.index_walk``, no gitlinks)."""
    if not planned.generation:
        return  # not watched: nothing to compare with next time
    walk = None
    if index_walk is not None and not index_walk[1].gitlinks:
        key, index = index_walk
        attributes = sorted(os.fsencode(p).hex() for p in index.attributes)
        walk = {
            "key": key,
            "attributes": attributes,
            "marks": list(index.marks),
            "source": list(index.source),
        }
    path = baseline_path(watched.state_dir, layout, planned.generation)
    document = {
        "schema": _SCHEMA,
        "worktree": layout.worktree,
        "generation": planned.generation,
        "clock": planned.clock,
        "base_tree": base_tree,
        "fingerprint": planned.fingerprint,
        "dirty": sorted(p.hex() for p in set(dirty)),
        "index_walk": walk,
    }
    data = (json.dumps(document, sort_keys=True) + "\n").encode("utf-8")
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        temp = OwnTemp.create(str(path.parent), ".promoter-tmp-start-")
        try:
            try:
                os.write(temp.fd, data)  # not flushed: a cache the next start checks
            finally:
                os.close(temp.fd)
            temp.place(str(path))
        except BaseException:
            temp.discard()
            raise
    except OSError as exc:  # the next start reads everything: nothing is lost
        log.info("the start's baseline was not kept: %s", exc)
        return
    _trim(watched.state_dir, layout)


def _trim(state_dir: Path, layout: RepoLayout) -> None:
    """The oldest baselines of this worktree past ``MAX_BASELINES`` removed: files named
    as ``baseline_path`` names them, in promoter's own ``starts/``, each by name in that
    directory held open (``OwnTree``: never through a link, never on another device)."""
    old = baseline_paths(state_dir, layout)[MAX_BASELINES:]
    if not old:
        return
    try:
        with OwnTree.open(state_dir / STARTS_DIR) as tree, tree.directory([]) as starts:
            for _, path in old:
                if stat.S_ISREG(starts.mode(path.name) or 0):
                    starts.remove_entry(path.name)
    except (OSError, PathUnsafe) as exc:
        log.info("an old start baseline was not removed: %s", exc)


# --- reading -------------------------------------------------------------------------------


class _Baseline(NamedTuple):  # no dataclass: made at each run's import
    """A baseline as read back from its file (``_load``)."""

    generation: str
    clock: int
    base_tree: str
    fingerprint: dict[str, list[int] | None]
    dirty: frozenset[bytes]
    index_walk: tuple[str, PlainIndex] | None


def _load(path: Path) -> _Baseline | None:
    """The baseline at ``path``; ``None`` when missing or in any way not as written."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read(_MAX_BASELINE + 1)
        doc = json.loads(raw) if len(raw) <= _MAX_BASELINE else None
        return _parse(doc)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _parse(doc: Any) -> _Baseline | None:
    if not isinstance(doc, dict) or doc.get("schema") != _SCHEMA:
        return None
    generation, clock, tree = doc["generation"], doc["clock"], doc["base_tree"]
    prints, dirty = doc["fingerprint"], doc["dirty"]
    if not (isinstance(generation, str) and _GENERATION.fullmatch(generation)):
        return None
    if type(clock) is not int or clock < 0 or not (isinstance(tree, str) and _OID.fullmatch(tree)):
        return None
    if not isinstance(prints, dict) or not isinstance(dirty, list):
        return None
    for value in prints.values():
        if value is not None and not (
            isinstance(value, list) and len(value) == 5 and all(type(v) is int for v in value)
        ):
            return None
    if not all(isinstance(p, str) and _HEX.fullmatch(p) for p in dirty):
        return None
    walk = doc["index_walk"]
    index_walk = None
    if walk is not None:
        key, attributes = walk["key"], walk["attributes"]
        if not (isinstance(key, str) and _INDEX_KEY.fullmatch(key)):
            return None
        if not (isinstance(attributes, list) and all(isinstance(p, str) for p in attributes)):
            return None
        if not all(_HEX.fullmatch(p) for p in attributes):
            return None
        names = tuple(os.fsdecode(bytes.fromhex(p)) for p in attributes)
        marks, source = walk.get("marks", []), walk.get("source", [])
        if not (isinstance(marks, list) and all(type(m) is int and m >= 12 for m in marks)):
            return None
        if marks != sorted(set(marks)):
            return None
        if not (isinstance(source, list) and len(source) in (0, 5)):
            return None
        if not all(type(v) is int for v in source):
            return None
        index_walk = (key, PlainIndex((), names, tuple(marks), tuple(source)))
    dirty_paths = frozenset(bytes.fromhex(p) for p in dirty)
    return _Baseline(generation, clock, tree, prints, dirty_paths, index_walk)


def _position(answer: Mapping[str, Any]) -> tuple[str, int]:
    generation, clock = answer.get("generation"), answer.get("clock")
    if not isinstance(generation, str) or type(clock) is not int:
        raise ValueError("the watch's answer has no position")
    if generation and not _GENERATION.fullmatch(generation):
        raise ValueError("the watch's answer has no position")
    return generation, clock


def _why(planned: Plan, reason: str) -> Plan:
    return Plan(None, planned.generation, planned.clock, planned.fingerprint, reason)


def _staged(layout: RepoLayout, base_tree: str) -> list[bytes]:
    """Paths whose index entry differs from ``base_tree``: what a changed index can add."""
    from promoter.git.layout import repo_env

    result = run_git(
        ["diff-index", "--cached", "-z", "--no-renames", "--name-only", base_tree, "--"],
        cwd=layout.worktree,
        env=repo_env(layout),
    )
    return [raw for raw in result.stdout.split(b"\0") if raw]
