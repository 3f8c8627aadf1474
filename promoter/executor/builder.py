"""Build a sealed PatchBundleV1 from an isolated worktree, and hand it to the host.

This module owns the executor side of the bundle (protocol: bundles#bundle,
snapshots#executor-side-shadow): ``build_bundle`` finds every change of a worktree against the
grant's ``base_tree`` with a ``SeededShadow`` (tracked files and untracked files that are not
ignored; a temporary index and object directory, so the worktree's ``.git`` is never written),
trusting no list of changed files that anyone reports; the worktree's own index serves only as a
stat cache, the way ``git status`` uses it, so an unchanged tree is not re-read. It
refuses, before anything is uploaded, gitlinks, nested repositories and symlinks the
grant does not allow (``PathUnsafe``; with ``symlinks: inside|any`` links are included
and their targets checked against the policy, ``VerificationFailed`` naming each target
text), paths that break the path rules (``PathInvalid``) and changes the grant does not
authorize (``VerificationFailed``, see ``policy.py``), each naming every offending path;
and what git would drop or cannot add: a FIFO, socket or device over a tracked path
(``PathUnsafe``), a directory git could not open while listing untracked files
(``PathInvalid`` when too deep for the host to name, else ``PathUnsafe``).
A name that is not UTF-8 is included like any other, under its wire form
(protocol: documents#byte-paths): git's ``-z`` names arrive as disk-form text (``surrogateescape``)
and leave as ``wire_path`` of it.
Old states are the base tree's, which is what the host checks; for a chained grant
(``base_operation``), the states the base operations left at the paths they touched
(``since``); for a sandbox that started from the person's worktree, the start tree's
(``start_tree``: the grant's explicit preconditions).

States and changes are plain records (``promoter.domain.bundle_records``), the grant a
``GrantV1`` or a ``GrantRecord``; the sealed document is checked by
``promoter.domain.wirecheck`` (the model, loaded only then, words a refusal; a bundle of
more than ``VALIDATOR_MAX_CHANGES`` changes is checked by the model, cheaper per change),
so building loads no pydantic; the records give the models' bytes.

It deliberately does not talk to the host (``promoter.executor.handover`` uploads and
submits), register grants, set leases or promote (orchestrator work), and it never
writes the worktree or its repository.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from promoter.domain import links, wirecheck
from promoter.domain.bundle_records import ChangeRecord, StateLike, StateRecord
from promoter.domain.canonical import now_rfc3339
from promoter.domain.closing import Closing
from promoter.domain.documents import grant_sha256, seal_bundle
from promoter.domain.paths import disk_path, sort_key, wire_path
from promoter.errors import (
    GitError,
    GrantInvalid,
    PathInvalid,
    PathUnsafe,
    RepositoryInvalid,
    VerificationFailed,
)
from promoter.executor.policy import check_changes, check_paths, printable
from promoter.executor.seeded import SeededShadow
from promoter.git.layout import RepoLayout, discover, repo_env
from promoter.git.objects import CatFile
from promoter.git.readback import GITLINK_MODE, list_tree_files, tree_entries
from promoter.git.records import DiffEntry, require_oid
from promoter.git.worktree_tree import special_over

if TYPE_CHECKING:
    from promoter.domain.bundle_records import Grant
    from promoter.domain.models import PatchBundleV1

__all__ = ["BlobReader", "BlobSource", "BuiltBundle", "build_bundle", "seal_changes"]

_OPERATIONS = {"A": "create", "M": "modify", "D": "delete", "T": "modify"}  # T: file <-> link
# git's reasons (LC_ALL=C strerror) for a directory it could not open
_TOO_LONG, _DENIED = "File name too long", "Permission denied"

VALIDATOR_MAX_CHANGES = 2000
"""Above this many changes the model checks the sealed bundle: the validator's cost per
change is about three times the model's, which outweighs loading pydantic there."""


class BlobSource(NamedTuple):
    """Where the bytes of one referenced blob are read from.

    ``origin`` is ``new`` for content of the worktree (hashed into the shadow object
    directory) and ``base`` for content of ``base_tree`` (the repository's objects);
    both are read through the shadow's object look-up, by git blob id.
    """

    sha256: str
    oid: str
    size: int
    origin: Literal["new", "base"]


class BlobReader(Protocol):
    """What a built bundle reads its blobs through (``SeededShadow``, or a sandbox's
    layers: ``upper.LayerBlobs``)."""

    seeded: bool

    @property
    def tree(self) -> str: ...

    def iter_blob(self, oid: str) -> Iterator[bytes]: ...

    def read_blob(self, oid: str) -> bytes: ...

    def close(self) -> None: ...


class BuiltBundle(Closing):
    """A sealed bundle plus the means to read every blob it references.

    It keeps the shadow object directory open until ``close`` (use it as a context
    manager): new blobs exist nowhere else.
    """

    def __init__(
        self, bundle: dict[str, Any], blobs: dict[str, BlobSource], shadow: BlobReader
    ) -> None:
        self.bundle = bundle
        self.blobs = blobs
        self._shadow: BlobReader | None = shadow
        self._tree: str | None = None
        self.seeded = shadow.seeded
        """Whether the worktree's index served as the stat cache (else every file was read)."""

    @property
    def tree(self) -> str:
        """The worktree's tree id, written on first use (while the bundle is open)."""
        if self._tree is None:
            self._tree = self._open().tree
        return self._tree

    @property
    def bundle_id(self) -> str:
        return str(self.bundle["bundle_id"])

    @property
    def bundle_sha256(self) -> str:
        return str(self.bundle["bundle_sha256"])

    def model(self) -> PatchBundleV1:
        from promoter.domain.models import PatchBundleV1

        return PatchBundleV1.model_validate(self.bundle)

    def iter_blob(self, sha256: str) -> Iterator[bytes]:
        """The blob's bytes in chunks; read each blob to its end before the next."""
        return self._open().iter_blob(self.blobs[sha256].oid)

    def read_blob(self, sha256: str) -> bytes:
        return self._open().read_blob(self.blobs[sha256].oid)

    def _open(self) -> BlobReader:
        if self._shadow is None:
            raise RuntimeError("the built bundle is closed; its new blobs are gone")
        return self._shadow

    def close(self) -> None:
        if self._shadow is not None:
            self._shadow.close()
            self._shadow = None


def _require_trees(layout: RepoLayout, objects: CatFile, trees: list[str]) -> str | None:
    """``RepositoryInvalid`` unless each of ``trees`` is a tree of the worktree's repository;
    HEAD's tree when HEAD is a commit (else ``None``), asked of the same ``objects``
    (``commit_tree``'s reading of HEAD)."""
    try:
        for tree in trees:
            info = objects.request(require_oid(tree, "tree"))
            if info is None or info.type != "tree":
                raise _not_held(tree)
        head, head_tree = objects.head()
    except GitError:
        # git gave up (a damaged object, say): a tree it cannot read is the refusal the
        # executor can act on; only with every tree readable is git's own error raised
        for tree in trees:
            _require_tree(layout, tree)
        raise
    if head is None or head.type != "commit" or head_tree is None or head_tree.type != "tree":
        return None
    return head_tree.oid


def _require_tree(layout: RepoLayout, tree: str) -> None:
    """``RepositoryInvalid`` unless ``tree`` reads as a tree, asked alone."""
    with CatFile(cwd=layout.worktree, env=repo_env(layout)) as cat:
        info = cat.request(tree)
    if info is None or info.type != "tree":
        raise _not_held(tree)


def _not_held(tree: str) -> RepositoryInvalid:
    return RepositoryInvalid(
        f"the worktree's repository does not hold the grant's base_tree {tree}; "
        "clone the source repository at the grant's base_commit",
        base_tree=tree,
    )


def _bound_sha256(grant: Grant) -> str:
    computed = grant_sha256(grant)
    if grant.grant_sha256 is not None and grant.grant_sha256 != computed:
        raise GrantInvalid(
            "the grant's grant_sha256 does not match its content",
            grant_sha256=grant.grant_sha256,
            computed=computed,
        )
    return computed


def _hidden_in_gitlinks(
    layout: RepoLayout, base_tree: str, gitlinks: tuple[str, ...] | None
) -> dict[str, str]:
    """Gitlinks of the base tree whose directory holds files but is not a repository.

    git sees nothing inside a gitlink's directory, so files put there would silently
    be left out of the bundle; they are refused instead. ``gitlinks``: the base tree's
    gitlink paths when already known (else the base tree is listed).
    """
    if gitlinks is None:
        listing = list_tree_files(layout, base_tree).items()
        gitlinks = tuple(path for path, entry in listing if entry.mode == GITLINK_MODE)
    found: dict[str, str] = {}
    for path in gitlinks:
        directory = os.path.join(layout.worktree, path)
        try:
            if not stat.S_ISDIR(os.lstat(directory).st_mode):
                continue
            names = os.listdir(directory)
        except FileNotFoundError:
            continue
        except OSError as exc:
            found[path] = f"a gitlink (submodule) that cannot be examined: {exc.strerror}"
            continue
        if names and ".git" not in names:
            found[path] = "a gitlink (submodule) whose directory holds files git does not see"
    return found


def _refuse_unopened(shadow: SeededShadow) -> None:
    """Refuse, naming it, a directory git could not open while listing untracked files:
    git leaves out what it holds, and a bundle never drops a write silently. One too deep
    for the host to name (git cut its warning, or ``ENAMETOOLONG``) is ``PathInvalid``,
    as the upper layer's (``upper._readable``); any other (``EACCES``: a directory made
    mode 000) is ``PathUnsafe``."""
    for path, reason in sorted(shadow.unopened.items()):
        shown = printable(path)
        if reason is None or reason == _TOO_LONG:
            raise PathInvalid(
                f"a path in the worktree is too long to be read on the host (more than "
                f"{len(os.fsencode(path))} bytes, which git leaves out): {shown[:80]}...",
                path=shown,
            )
        why = "its mode shuts its owner out" if reason == _DENIED else reason
        raise PathUnsafe(f"a path in the worktree cannot be read ({why}): {shown}", path=shown)


def _refuse_unsupported(
    layout: RepoLayout, shadow: SeededShadow, entries: list[DiffEntry], grant: Grant
) -> None:
    deleted = [e.path for e in entries if e.status == "D"]  # a FIFO over them: never gone
    unsupported = {
        **_hidden_in_gitlinks(layout, grant.base_tree, shadow.gitlinks),
        **shadow.unsupported(entries, symlinks=grant.symlinks != "none"),
        **special_over(layout.worktree, deleted),
    }
    if unsupported:
        found = [{"path": printable(path), "reason": why} for path, why in unsupported.items()]
        listing = "; ".join(f"{item['path']!r}: {item['reason']}" for item in found)
        raise PathUnsafe(
            f"the worktree has changes that cannot be promoted: {listing}", paths=found
        )


def _changes(
    shadow: SeededShadow, objects: CatFile, entries: list[DiffEntry]
) -> tuple[list[ChangeRecord], dict[str, BlobSource]]:
    """Changes with file states of exact bytes, and where each referenced blob lives."""
    oids = [oid for e in entries for oid in (e.old_oid, e.new_oid) if oid is not None]
    digests = shadow.blob_sha256(oids, base=objects)
    blobs: dict[str, BlobSource] = {}

    def state(oid: str | None, mode: str | None, origin: Literal["new", "base"]) -> StateRecord:
        if oid is None or mode is None:
            return StateRecord.missing()
        sha256, size = digests[oid]
        blobs.setdefault(sha256, BlobSource(sha256, oid, size, origin))
        return StateRecord.of(sha256, mode, size)

    changes = [
        ChangeRecord(
            path=wire_path(entry.path),
            operation=_OPERATIONS[entry.status],
            old=state(entry.old_oid, entry.old_mode, "base"),
            new=state(entry.new_oid, entry.new_mode, "new"),
        )
        for entry in sorted(entries, key=lambda e: sort_key(wire_path(e.path)))
    ]
    return changes, blobs


def _check_links(
    changes: list[ChangeRecord], blobs: dict[str, BlobSource], shadow: BlobReader, grant: Grant
) -> None:
    """``VerificationFailed`` naming every new link whose target the grant's policy refuses."""
    refused: list[dict[str, str]] = []
    for change in changes:
        if not links.is_link(change.new.mode) or change.new.sha256 is None:
            continue
        target = shadow.read_blob(blobs[change.new.sha256].oid)
        why = links.target_problem(change.path, target, grant.symlinks)
        if why is not None:
            refused.append({"path": change.path, "target": links.shown(target), "reason": why})
    if refused:
        listing = "; ".join(f"{r['path']!r} -> {r['target']!r}: {r['reason']}" for r in refused)
        raise VerificationFailed(
            f"the grant's symlink policy refuses these links: {listing}", paths=refused
        )


def _rebase(
    shadow: SeededShadow,
    objects: CatFile,
    layout: RepoLayout,
    start_tree: str,
    changes: list[ChangeRecord],
    blobs: dict[str, BlobSource],
    since: dict[str, StateRecord],
) -> list[ChangeRecord]:
    """The changes against the chain's states: ``since`` replaces the base at its paths.

    A path the chain touched is a change when the worktree differs from the state the
    chain left there (back to the base tree's content included), and none when equal.
    """
    by_path = {c.path: c for c in changes}
    untouched = [p for p in since if p not in by_path]
    found = tree_entries(layout, start_tree, [disk_path(p) for p in untouched]) if untouched else {}
    entries = {wire_path(path): entry for path, entry in found.items()}
    oids = [e.oid for e in entries.values() if e is not None]
    digests = shadow.blob_sha256(oids, base=objects) if oids else {}
    out = [c for c in changes if c.path not in since]
    for path, old in since.items():
        entry = entries.get(path)
        if path in by_path:
            new = by_path[path].new
        elif entry is None:
            new = StateRecord.missing()
        else:
            sha256, size = digests[entry.oid]
            blobs.setdefault(sha256, BlobSource(sha256, entry.oid, size, "base"))
            new = StateRecord.of(sha256, entry.mode, size)
        if old.same_content(new):
            continue
        operation = "create" if not old.exists else "delete" if not new.exists else "modify"
        out.append(ChangeRecord(path, operation, old, new))
    return sorted(out, key=lambda c: sort_key(c.path))


def build_bundle(
    worktree: Path,
    grant: Grant,
    *,
    created_at: str | None = None,
    since: Mapping[str, StateLike] | None = None,
    seed: bool = True,
    start_tree: str | None = None,
    leave_out: frozenset[str] = frozenset(),
) -> BuiltBundle:
    """Seal every change of ``worktree`` against ``grant.base_tree`` into a bundle.

    ``since`` (a chained grant's base, ``PromoterClient.grant_base``): the states the
    base operations left, which replace the base tree's at their paths, so the bundle
    holds only the edits made after the base promotion.

    ``start_tree`` (a sandbox that started from the person's worktree, ``start_state``):
    the changes are taken against it instead of ``base_tree``, so a change's old state
    is the person's captured state (the grant's explicit precondition) and their own
    edits are not in the bundle.

    Nothing is uploaded and nothing in the worktree or its ``.git`` is written. Refusals
    name every offending path: ``PathUnsafe`` (symlink, gitlink, nested repository),
    ``PathInvalid`` (path rules), ``VerificationFailed`` (allowlist, explicit
    preconditions, limits). The caller owns the result and must ``close`` it.
    ``seed=False`` ignores the worktree's index (every file is read; same bundle).
    ``leave_out``: changed paths (as git names them, or in wire form) the person chose not
    to promote (``promoter run`` offers the rest of a bundle without a refused link or a
    conflicted file); they are not
    in the bundle, and nothing about them is checked.
    """
    _bound_sha256(grant)
    layout = discover(worktree)
    start = start_tree or grant.base_tree
    # one reader of the repository's objects: the trees and HEAD first, the base's blobs last
    with CatFile(cwd=layout.worktree, env=repo_env(layout)) as objects:
        trees = list(dict.fromkeys([grant.base_tree, start]))
        head_tree = _require_trees(layout, objects, trees)
        shadow = SeededShadow(layout, base_tree=start, seed=seed, head_tree=head_tree)
        shadow.__enter__()
        try:
            entries = [
                e
                for e in shadow.diff(start)
                if e.path not in leave_out and wire_path(e.path) not in leave_out
            ]
            _refuse_unopened(shadow)
            _refuse_unsupported(layout, shadow, entries, grant)
            odd = [
                {"path": printable(e.path), "reason": "a type change"}
                for e in entries
                if e.status not in _OPERATIONS
            ]
            if odd:
                paths = [o["path"] for o in odd]
                raise PathUnsafe(f"git reports type changes at {paths}", paths=odd)
            check_paths([wire_path(e.path) for e in entries])
            changes, blobs = _changes(shadow, objects, entries)
            if since:
                chained = {path: StateRecord.from_state(state) for path, state in since.items()}
                changes = _rebase(shadow, objects, layout, start, changes, blobs, chained)
            sealed = seal_changes(grant, changes, blobs, shadow, created_at=created_at)
            return BuiltBundle(sealed, blobs, shadow)
        except BaseException:
            shadow.close()
            raise


def seal_changes(
    grant: Grant,
    changes: list[ChangeRecord],
    blobs: dict[str, BlobSource],
    reader: BlobReader,
    *,
    created_at: str | None = None,
) -> dict[str, Any]:
    """The sealed bundle of ``changes`` under ``grant``, after the grant's checks
    (allowlist, preconditions, limits, symlink policy); ``VerificationFailed`` otherwise."""
    bound = _bound_sha256(grant)
    check_changes(changes, grant)
    _check_links(changes, blobs, reader, grant)
    document: dict[str, Any] = {
        "schema": "PatchBundleV1",
        "bundle_id": "",
        "bundle_sha256": "",
        "grant_id": grant.grant_id,
        "grant_sha256": bound,
        "executor_run_id": grant.executor_run_id,
        "repository_identity": grant.repository_identity,
        "base_commit": grant.base_commit,
        "base_tree": grant.base_tree,
        "changes": [change.wire() for change in changes],
        "change_count": len(changes),
        "total_bytes": sum(c.new.bytes or 0 for c in changes if c.new.exists),
        "created_at": created_at or now_rfc3339(),
    }
    sealed = seal_bundle(document)
    # the document the host will parse: checked by the validator, or by the model when it
    # refuses (the model's own error, as before) or when the bundle is big
    big = len(changes) > VALIDATOR_MAX_CHANGES
    if big or wirecheck.problem("PatchBundleV1", sealed) is not None:
        from promoter.domain.models import PatchBundleV1

        PatchBundleV1.model_validate(sealed)
    return sealed
