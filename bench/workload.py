"""The benchmarks' workload and the bare variants promoter is measured against.

``make_workload``: ``files`` tracked files of ``size`` bytes (about 50 per directory, two
levels deep) and one change set mixing about 60 % modify, 20 % create (half of them in
new directories) and 20 % delete, the same for a given seed. ``make_source``: a git
repository on the base commit with the binary diff base -> target beside it;
``copy_repo`` makes identical copies. The variants: ``bare_loop`` (per change a temp
write + fsync + rename + parent-directory fsync; a delete: unlink + parent fsync; a new
directory: mkdir + fsync of its parent), ``bare_batched`` (the same I/O in promoter's
order), ``bare_syncfs`` (the same writes, renames, unlinks and mkdirs with no flush of
their own, then one ``syncfs`` of the worktree's filesystem) and ``git_apply_sync``.
``check_tree`` says whether a worktree holds exactly the target files.

Deliberately not here: promoter itself (``bench.prepared``), timing and reporting.
"""

from __future__ import annotations

import os
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from promoter.fs import flush

LINE = 64  # bytes per text line, newline included
PER_DIR = 50

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "LC_ALL": "C",
}


# --- the workload ------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One change of the workload: ``old``/``new`` bytes, ``None`` for missing."""

    path: str
    old: bytes | None
    new: bytes | None

    @property
    def operation(self) -> str:
        if self.old is None:
            return "create"
        return "delete" if self.new is None else "modify"


@dataclass
class Workload:
    base: dict[str, bytes]
    target: dict[str, bytes]
    steps: list[Step]
    counts: dict[str, int] = field(default_factory=dict)


def random_text(rng: random.Random, size: int) -> bytes:
    """``size`` bytes of hex text in lines of ``LINE`` bytes."""
    data = bytearray(rng.randbytes((size + 1) // 2).hex()[:size].encode("ascii"))
    newlines = len(range(LINE - 1, size, LINE))
    data[LINE - 1 :: LINE] = b"\n" * newlines
    return bytes(data)


def _edit(rng: random.Random, old: bytes) -> bytes:
    """``old`` with a block of about 8 lines rewritten (same size, line-aligned)."""
    lines = max(1, len(old) // LINE)
    start = rng.randrange(lines) * LINE
    block = random_text(rng, min(8 * LINE, len(old) - start))
    new = old[:start] + block + old[start + len(block) :]
    return new if new != old else random_text(rng, len(old))


def make_workload(files: int, size: int, seed: int = 3) -> Workload:
    """``files`` base files; about 60 % modified, 20 % deleted, 20 % created."""
    rng = random.Random(seed)
    base: dict[str, bytes] = {}
    for i in range(files):
        block = i // PER_DIR
        base[f"src/g{block // 5:02d}/m{block % 5}/f{i:05d}.txt"] = random_text(rng, size)
    steps: list[Step] = []
    for i, (path, old) in enumerate(sorted(base.items())):
        kind = i % 5
        if kind == 0:
            steps.append(Step(path, old, None))
        elif kind >= 2:
            steps.append(Step(path, old, _edit(rng, old)))
    blocks = max(1, (files + PER_DIR - 1) // PER_DIR)
    for k in range(max(1, files // 5)):
        if k % 2 == 0:  # next to existing files, spread over their directories
            block = (k // 2) % blocks
            path = f"src/g{block // 5:02d}/m{block % 5}/n{k:05d}.txt"
        else:  # in new directories
            path = f"gen/p{k // (2 * PER_DIR):02d}/c{k:05d}.txt"
        steps.append(Step(path, None, random_text(rng, size)))
    steps.sort(key=lambda s: s.path.encode())
    target = dict(base)
    for step in steps:
        if step.new is None:
            del target[step.path]
        else:
            target[step.path] = step.new
    counts = {
        op: sum(1 for s in steps if s.operation == op) for op in ("modify", "create", "delete")
    }
    return Workload(base, target, steps, counts)


# --- git and file helpers ----------------------------------------------------------------


def git(repo: Path, *args: str) -> bytes:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo), **GIT_ENV}
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, check=True, timeout=300
    )
    return done.stdout


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def tree_files(root: Path) -> dict[str, bytes]:
    """Every regular file below ``root`` outside ``.git`` with its bytes (others flagged)."""
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root:
            dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            full = Path(dirpath, name)
            rel = full.relative_to(root).as_posix()
            found[rel] = full.read_bytes() if full.is_file() and not full.is_symlink() else b"?"
    return found


def check_tree(root: Path, expected: dict[str, bytes], variant: str) -> None:
    actual = tree_files(root)
    if actual != expected:
        extra = sorted(set(actual) - set(expected))[:5]
        missing = sorted(set(expected) - set(actual))[:5]
        wrong = sorted(p for p in set(actual) & set(expected) if actual[p] != expected[p])[:5]
        raise AssertionError(
            f"{variant}: worktree differs from the target: extra {extra}, missing {missing}, "
            f"different {wrong}"
        )


def filesystem_of(path: Path) -> str:
    """``type (device)`` of the mount holding ``path``, from /proc/self/mounts."""
    real = os.path.realpath(path)
    best = ("", "unknown", "?")
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                device, point, kind = line.split()[:3]
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best[0]):
                    best = (point, kind, device)
    except OSError:
        return "unknown"
    return f"{best[1]} ({best[2]})"


@dataclass
class Source:
    """The source repository on its base commit, and the binary diff base -> target."""

    path: Path
    patch: Path
    base_commit: str
    base_tree: str


def make_source(work: Path, workload: Workload) -> Source:
    repo = work / "source"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write_tree(repo, workload.base)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base_commit = git(repo, "rev-parse", "HEAD").decode().strip()
    base_tree = git(repo, "rev-parse", "HEAD^{tree}").decode().strip()
    git(repo, "checkout", "-q", "-b", "bench-target")
    for step in workload.steps:
        if step.new is None:
            (repo / step.path).unlink()
    write_tree(repo, {s.path: s.new for s in workload.steps if s.new is not None})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "target")
    patch = work / "change.patch"
    patch.write_bytes(git(repo, "diff", "--binary", "--full-index", base_commit, "bench-target"))
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "bench-target")
    git(repo, "-c", "gc.auto=0", "repack", "-a", "-d", "-q")  # one pack: cheaper copies
    git(repo, "prune-packed")
    check_tree(repo, workload.base, "source")
    return Source(repo, patch, base_commit, base_tree)


def copy_repo(source: Path, target: Path) -> Path:
    subprocess.run(["cp", "-a", str(source), str(target)], check=True, timeout=300)
    return target


# --- the variants ------------------------------------------------------------------------


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_parents(root: str, rel: str, *, durable: bool = True) -> None:
    """mkdir each missing directory on the way to ``rel``, fsyncing the one holding it
    (unless not ``durable``)."""
    parts = rel.split("/")[:-1]
    current = root
    for name in parts:
        nxt = os.path.join(current, name)
        if not os.path.isdir(nxt):
            os.mkdir(nxt)
            if durable:
                _fsync_dir(current)
        current = nxt


def _write_temp(path: str, data: bytes, *, durable: bool = True) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def bare_loop(root: Path, steps: list[Step]) -> None:
    """Per change: temp write + fsync + rename + parent fsync (delete: unlink + fsync)."""
    top = str(root)
    for step in steps:
        target = os.path.join(top, step.path)
        parent = os.path.dirname(target)
        if step.new is None:
            os.unlink(target)
        else:
            _make_parents(top, step.path)
            temp = os.path.join(parent, ".bench-tmp")
            _write_temp(temp, step.new)
            os.rename(temp, target)
        _fsync_dir(parent)


def bare_batched(root: Path, steps: list[Step]) -> None:
    """The same I/O in promoter's order: all temps, then renames/unlinks, then dir fsyncs."""
    top = str(root)
    temps: dict[int, str] = {}
    for i, step in enumerate(steps):
        if step.new is not None:
            _make_parents(top, step.path)
            temps[i] = os.path.join(top, os.path.dirname(step.path), f".bench-tmp-{i}")
            _write_temp(temps[i], step.new)
    parents: dict[str, None] = {}
    for i, step in enumerate(steps):
        target = os.path.join(top, step.path)
        if step.new is None:
            os.unlink(target)
        else:
            os.rename(temps[i], target)
        parents[os.path.dirname(target)] = None
    for parent in parents:
        _fsync_dir(parent)


def bare_syncfs(root: Path, steps: list[Step]) -> None:
    """``bare_batched`` with no flush of its own, then one ``syncfs`` of ``root``'s filesystem.

    All temps written, then renamed or the targets unlinked, the directories made on the
    way, none of them flushed; then ``syncfs(2)`` through a descriptor on ``root``
    opened before the first write (``promoter.fs.flush.syncfs``, which counts it, as
    ``promoter.fs.group_sync`` does), after which every one of them is as durable as its
    own fsync would have made it.
    """
    top = str(root)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        temps: dict[int, str] = {}
        for i, step in enumerate(steps):
            if step.new is not None:
                _make_parents(top, step.path, durable=False)
                temps[i] = os.path.join(top, os.path.dirname(step.path), f".bench-tmp-{i}")
                _write_temp(temps[i], step.new, durable=False)
        for i, step in enumerate(steps):
            if step.new is None:
                os.unlink(os.path.join(top, step.path))
            else:
                os.rename(temps[i], os.path.join(top, step.path))
        flush.syncfs(fd)
    finally:
        os.close(fd)


def git_apply_sync(root: Path, patch: Path) -> None:
    git(root, "apply", str(patch))
    os.sync()
