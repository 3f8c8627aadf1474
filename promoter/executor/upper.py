"""The bundle of a layered sandbox, built from its upper layer.

``build_from_layers`` finds the changes a command made in an overlay sandbox
(``layers.py``) from the upper layer alone, so the cost follows the command's writes:
candidates from the upper layer, old and new states read through the layers, new paths
kept only where git would list them untracked (one ``ls-files -o --exclude-standard`` in
a private scratch repository), then the clone builder's refusals and seal
(``builder.seal_changes``) (protocol: runs#layered-sandboxes, runs#upper-layer-bundle).

A blob is read again to be uploaded (fault point ``layer_blob_read``) and compared with
what was sealed: a file changed in between is ``source_changed``, no answer about the
change. Not here: mounting (``layers.py``), the base (``base_cache.py``), the clone builder
(``builder.py``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from promoter import faults
from promoter.domain.bundle_records import ChangeRecord, StateLike, StateRecord
from promoter.domain.paths import disk_path, sort_key, wire_path
from promoter.errors import PathInvalid, PathUnsafe, RepositoryInvalid, SourceChanged
from promoter.executor import base_cache, layers
from promoter.executor.builder import BlobSource, BuiltBundle, seal_changes
from promoter.executor.policy import check_paths, printable
from promoter.git.records import decode_path
from promoter.git.runner import run_git
from promoter.git.worktree_tree import SPECIAL_OVER

if TYPE_CHECKING:
    from promoter.domain.bundle_records import Grant

__all__ = ["LayerBlobs", "build_from_layers", "run_layers"]

_CHUNK = 1 << 20
_LINK = "120000"

Lookup = Callable[[str], "layers.Found | None"]  # a path through one stack (``layers.Resolver``)


class _State(NamedTuple):  # no dataclass: made at each run's import
    """A changed file or link of the layers: its mode, content ids, size and source."""

    mode: str
    sha256: str
    oid: str
    size: int
    source: bytes  # the file's path in a layer, or a link's target text
    link: bool


class LayerBlobs:
    """Reads the blobs of a layered sandbox's bundle from the layers' files (by git id)."""

    seeded = True  # no tree is hashed: the upper layer says what changed

    def __init__(self) -> None:
        self._by_oid: dict[str, _State] = {}

    def add(self, state: _State) -> None:
        self._by_oid.setdefault(state.oid, state)

    @property
    def tree(self) -> str:
        raise RuntimeError("a layered sandbox's bundle has no tree of its own")

    def iter_blob(self, oid: str) -> Iterator[bytes]:
        state = self._by_oid[oid]
        if state.link:
            yield state.source
            return
        digest = hashlib.sha256()
        size = 0
        faults.point("layer_blob_read")  # a blob read again, to upload it
        fd = os.open(state.source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                yield chunk
        if digest.hexdigest() != state.sha256 or size != state.size:
            raise SourceChanged(
                f"{os.fsdecode(state.source)} changed while the bundle was built",
                path=os.fsdecode(state.source),
            )

    def read_blob(self, oid: str) -> bytes:
        return b"".join(self.iter_blob(oid))

    def close(self) -> None:
        self._by_oid.clear()


def _hash_file(path: bytes, st: os.stat_result) -> tuple[str, str, int]:
    """(sha256, git blob id, size) of the regular file at ``path`` (opened, not followed)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(handle.fileno())
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            raise SourceChanged(
                f"{os.fsdecode(path)} changed while it was read", path=os.fsdecode(path)
            )
        sha = hashlib.sha256()
        oid = hashlib.sha1(b"blob %d\0" % opened.st_size, usedforsecurity=False)
        size = 0
        while chunk := handle.read(_CHUNK):
            sha.update(chunk)
            oid.update(chunk)
            size += len(chunk)
    if size != opened.st_size:
        raise SourceChanged(
            f"{os.fsdecode(path)} changed while it was read", path=os.fsdecode(path)
        )
    return sha.hexdigest(), oid.hexdigest(), size


def _state(stack: Lookup, path: str) -> _State | None:
    """The file or link at ``path`` in the merged view of ``stack``; None when absent
    (or a directory, or not a file git tracks)."""
    found = stack(path)
    if found is None:
        return None
    where, st = found
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(where)
        blob = hashlib.sha1(b"blob %d\0" % len(target) + target, usedforsecurity=False)
        digest = hashlib.sha256(target).hexdigest()
        return _State(_LINK, digest, blob.hexdigest(), len(target), target, True)
    if not stat.S_ISREG(st.st_mode):
        return None
    sha, oid, size = _hash_file(where, st)
    mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
    return _State(mode, sha, oid, size, where, False)


def _is_file(stack: Lookup, path: str) -> bool:
    """Whether ``path`` is a file or link git would track in the merged view of ``stack``."""
    found = stack(path)
    return found is not None and (stat.S_ISREG(found[1].st_mode) or stat.S_ISLNK(found[1].st_mode))


def _is_dir(stack: Lookup, path: str) -> bool:
    found = stack(path)
    return found is not None and stat.S_ISDIR(found[1].st_mode)


def _candidates(box: layers.Layers, below_look: Lookup) -> set[str]:
    """Every path the upper layer may have changed (step 1 of the module docstring);
    ``below_look`` reads through ``box``'s layers below the upper one."""
    upper = os.fsencode(box.upper)
    top_git = os.path.join(upper, b".git")
    try:
        git_st = os.lstat(top_git)
    except FileNotFoundError:
        git_st = None
    if git_st is not None and not stat.S_ISDIR(git_st.st_mode):
        raise RepositoryInvalid(
            "the sandbox's .git is not a directory any more (a symlink or a gitdir file?); "
            "nothing was read through it",
            path=".git",
        )
    below = box.below()
    found: set[str] = set()
    pending: list[bytes] = [b""]
    while pending:
        rel = pending.pop()
        for entry in os.scandir(os.path.join(upper, rel) if rel else upper):
            name = os.fsencode(entry.name)
            if not rel and name == b".git":
                continue
            child = os.path.join(rel, name) if rel else name
            path = os.fsdecode(child)
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if layers.opaque(os.path.join(upper, child)):
                    found.update(layers.walk_files(below, path))
                elif not _is_dir(below_look, path) and below_look(path) is not None:
                    found.add(path)  # a directory over a file: the file is gone
                pending.append(child)
            elif layers.is_whiteout(st) or stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                found.add(path)
                if _is_dir(below_look, path):
                    found.update(layers.walk_files(below, path))
            elif below_look(path) is not None:
                found.add(path)  # a FIFO, socket or device over a file or directory: refused
    return found


_SPECIAL = SPECIAL_OVER


def _special(stack: Lookup, path: str) -> bool:
    """Whether ``path`` is a FIFO, socket or device in the merged view of ``stack`` (never
    a whiteout: the resolver answers None for one)."""
    found = stack(path)
    if found is None:
        return False
    mode = found[1].st_mode
    return not (stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode))


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:depth]) for depth in range(len(parts))]


def _scratch_repository(tree: Path) -> None:
    """An empty repository at ``tree``, made as ``git init --template=`` would make what
    git needs to take it for one (``HEAD`` naming a branch, ``objects``, ``refs``), without
    running git: no configuration, no exclude file, no hooks."""
    git_dir = tree / ".git"
    git_dir.mkdir(parents=True)
    (git_dir / "objects").mkdir()
    (git_dir / "refs").mkdir()
    (git_dir / "HEAD").write_bytes(b"ref: refs/heads/main\n")


def _not_ignored(box: layers.Layers, paths: list[str], stack: Lookup) -> set[str]:
    """Of new ``paths``, those git would list as untracked and not ignored (step 3);
    ``stack`` reads through all of ``box``'s layers. With no ``.gitignore`` in any of
    their directories and no ``.git`` among their names, nothing can exclude one (git runs
    with no exclude file of its own here: ``git.runner``) and git's walk lists each: all
    of them, without git (``_listed_by_git`` answers the same, a test holds it)."""
    if not paths:
        return set()
    directories = {directory for path in paths for directory in _ancestors(path)}
    rules = {d: stack(f"{d}/.gitignore" if d else ".gitignore") for d in sorted(directories)}
    dotgit = any(part.lower() == ".git" for path in paths for part in path.split("/"))
    if not dotgit and all(found is None for found in rules.values()):
        return set(paths)
    return _listed_by_git(box, paths, rules)


def _listed_by_git(
    box: layers.Layers, paths: list[str], rules: Mapping[str, layers.Found | None]
) -> set[str]:
    """Of new ``paths``, those ``git ls-files -o --exclude-standard`` lists in a scratch
    repository holding empty files at ``paths`` and the ``.gitignore`` files found in
    their directories (``rules``)."""
    with tempfile.TemporaryDirectory(prefix=".promoter-tmp-ignore-", dir=box.home) as temp:
        tree = Path(temp) / "tree"
        _scratch_repository(tree)
        for directory, found in rules.items():
            if found is not None and stat.S_ISREG(found[1].st_mode):
                (tree / directory).mkdir(parents=True, exist_ok=True)
                with open(found[0], "rb") as handle:
                    (tree / directory / ".gitignore").write_bytes(handle.read())
        for path in paths:
            leaf = tree / path
            leaf.parent.mkdir(parents=True, exist_ok=True)
            if not leaf.exists():
                leaf.write_bytes(b"")
        listed = run_git(
            ["ls-files", "-o", "-z", "--exclude-standard", "--full-name"], cwd=tree
        ).stdout
    return {decode_path(raw) for raw in listed.split(b"\0") if raw}


def _refusals(
    stack: Lookup,
    changed: dict[str, tuple[_State | None, _State | None]],
    gitlinks: Sequence[str],
    grant: Grant,
) -> dict[str, str]:
    """Changed paths that cannot be promoted, with the reason (step 4); ``stack`` reads
    through all of the sandbox's layers."""
    found: dict[str, str] = {}
    nested: dict[str, bool] = {}
    for path, (old, new) in changed.items():
        if _special(stack, path):
            found.setdefault(path, _SPECIAL)
        for side, state in (("new", new), ("old", old)):
            if state is not None and state.link and grant.symlinks == "none":
                found.setdefault(path, f"the {side} state is a symbolic link")
        for link in gitlinks:
            if path == link or path.startswith(link + "/"):
                found.setdefault(
                    path, "a gitlink (submodule) whose directory holds files git does not see"
                )
        for directory in _ancestors(path)[1:]:
            if directory not in nested:
                nested[directory] = stack(f"{directory}/.git") is not None
            if nested[directory]:
                found.setdefault(path, "an untracked nested repository (it holds a .git entry)")
    return dict(sorted(found.items()))


@contextlib.contextmanager
def _readable(box: layers.Layers) -> Iterator[None]:
    """Refuse, naming it, a path of ``box``'s layers the host cannot read, instead of
    failing with the host's error: one it cannot name in full (``ENAMETOOLONG``: a tree
    the command made deeper than the host's path limit under the upper layer) is
    ``PathInvalid``; one its owner may not read (``EACCES``: a directory or file the
    command made mode 000, which the person building the bundle cannot open) is
    ``PathUnsafe``."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENAMETOOLONG, errno.EACCES):
            raise
        full = os.fsencode(exc.filename or "")
        rel = full
        for layer in box.all():
            prefix = os.fsencode(layer) + b"/"
            if full.startswith(prefix):
                rel = full[len(prefix) :]
                break
        path = printable(os.fsdecode(rel))
        if exc.errno == errno.EACCES:
            raise PathUnsafe(
                f"a path in the sandbox cannot be read (its mode shuts its owner out): {path}",
                path=path,
            ) from exc
        raise PathInvalid(
            f"a path in the sandbox is too long to be read on the host ({len(full)} bytes "
            f"with its layer's directory): {path[:80]}...",
            path=path,
        ) from exc


def build_from_layers(
    box: layers.Layers,
    grant: Grant,
    *,
    gitlinks: Sequence[str] = (),
    since: Mapping[str, StateLike] | None = None,
    created_at: str | None = None,
    leave_out: frozenset[str] = frozenset(),
) -> BuiltBundle:
    """Seal the changes of the layered sandbox ``box`` against its start state.

    ``since`` (a chained grant's base): the states the chain's promotions left, which
    replace the start state's at their paths. ``leave_out``: paths (wire form) the person
    chose not to promote, as ``builder.build_bundle``'s. Refusals as its too.
    """
    # the layers are read once per path: nothing writes them once the command ended
    below, stack = layers.Resolver(box.below()), layers.Resolver(box.all())
    with _readable(box):
        candidates = _candidates(box, below)
        candidates |= {disk_path(p) for p in (since or {})}
        candidates -= {disk_path(p) for p in leave_out}
        # new paths git would ignore are dropped before any file is read
        fresh = sorted(p for p in candidates if not _is_file(below, p) and _is_file(stack, p))
        keep = _not_ignored(box, fresh, stack)
        candidates -= {path for path in fresh if path not in keep}
        changed: dict[str, tuple[_State | None, _State | None]] = {}
        for path in candidates:
            changed[path] = (_state(below, path), _state(stack, path))
    refused = _refusals(stack, changed, gitlinks, grant)
    if refused:
        found = [{"path": printable(path), "reason": why} for path, why in refused.items()]
        listing = "; ".join(f"{item['path']!r}: {item['reason']}" for item in found)
        raise PathUnsafe(
            f"the worktree has changes that cannot be promoted: {listing}", paths=found
        )
    reader = LayerBlobs()
    blobs: dict[str, BlobSource] = {}

    def file_state(state: _State | None, origin: Literal["new", "base"]) -> StateRecord:
        if state is None:
            return StateRecord.missing()
        reader.add(state)
        blobs.setdefault(state.sha256, BlobSource(state.sha256, state.oid, state.size, origin))
        return StateRecord.of(state.sha256, state.mode, state.size)

    changes: list[ChangeRecord] = []
    chained = {path: StateRecord.from_state(state) for path, state in (since or {}).items()}
    for path, (old_state, new_state) in changed.items():
        wire = wire_path(path)
        old = chained.get(wire) or file_state(old_state, "base")
        new = file_state(new_state, "new")
        if old.same_content(new):
            continue
        operation = "create" if not old.exists else "delete" if not new.exists else "modify"
        changes.append(ChangeRecord(wire, operation, old, new))
    changes.sort(key=lambda c: sort_key(c.path))
    check_paths([c.path for c in changes])
    sealed = seal_changes(grant, changes, blobs, reader, created_at=created_at)
    return BuiltBundle(sealed, blobs, reader)


def run_layers(record_clone: str, base_tree: str) -> tuple[layers.Layers, tuple[str, ...]]:
    """The layers of the run whose mount point is ``record_clone``, and its base's gitlinks."""
    home = Path(record_clone).parent
    state_dir = home.parent.parent
    base = base_cache.load(state_dir, base_tree)
    if base is None:
        root = base_cache.bases_dir(state_dir) / base_tree
        raise RepositoryInvalid(
            f"the sandbox's base {root} is missing or damaged; start a new run", path=str(root)
        )
    return layers.Layers(home, base.chain), base.gitlinks
