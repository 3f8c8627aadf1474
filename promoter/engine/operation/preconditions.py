"""Step 4 of the host protocol: read back the repository under the lock.

``read_back`` compares HEAD, its tree, every target's index entries and every worktree
target (through ``promoter.fs.held.Directories``) with what the grant and the bundle
expect, and lists per path what was expected and found (protocol: promotion#step-read-back);
a target unsafe to touch raises ``PathUnsafe`` with the whole report
(protocol: promotion#unsafe-refuses-before-journal). It costs a fixed handful of git
processes whatever the bundle's and the repository's size (``read_head``,
``path_entries``, ``index_entries``), and writes nothing.

Not here: what to do about drift (the caller refuses), and the checks at write time
(``fs/atomic.py``).
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from promoter.domain.models import Change, GrantV1, PatchBundleV1
from promoter.domain.path_state import Finding, ObservedWire, State, Verdict, classify, observed
from promoter.domain.paths import disk_path, wire_path
from promoter.domain.views import (
    Expectation,
    IndexEntryState,
    PathReadBack,
    ReadBackReport,
    RepositoryReadBack,
)
from promoter.errors import PathUnsafe, PromoterError
from promoter.fs.chain import LeafState
from promoter.fs.held import Directories
from promoter.fs.root import Root
from promoter.git.gitlinks import gitlinks_and_nested
from promoter.git.head import HeadState, read_head
from promoter.git.readback import (
    IndexEntry,
    RepoLayout,
    TreeEntry,
    index_entries,
    path_entries,
    prefixes_of,
    tree_entries,
)


def leaf_report(leaf: LeafState) -> ObservedWire:
    """What a target reads as, for reports (``promoter.domain.path_state.observed``)."""
    return observed(leaf, leaf.size)


def verdict(leaf: LeafState, change: Change) -> Verdict:
    """``new``, ``old`` or ``neither`` (``promoter.domain.path_state.classify``)."""
    return classify(leaf, change.old, change.new).verdict


def hard_link_refusal(leaf: LeafState, change: Change, found: Verdict) -> str | None:
    """Why a delete of this leaf is unsafe (other hard links), or None."""
    if change.operation != "delete" or found is not Verdict.OLD:
        return None
    if leaf.kind not in ("file", "symlink"):
        return None
    if leaf.nlink is None or leaf.nlink <= 1:
        return None
    return f"the delete target has {leaf.nlink} hard links: its bytes would stay at the others"


@dataclass
class ReadBack:
    repository: RepositoryReadBack
    paths: list[PathReadBack] = field(default_factory=list)

    @property
    def repository_ok(self) -> bool:
        found = self.repository
        return found.branch.ok and found.head.ok and found.tree.ok

    @property
    def drifted(self) -> list[str]:
        return [p.path for p in self.paths if p.verdict == Finding.DRIFT]

    @property
    def unsafe(self) -> list[str]:
        return [p.path for p in self.paths if p.verdict == Finding.UNSAFE]

    @property
    def ok(self) -> bool:
        return self.repository_ok and not self.drifted and not self.unsafe

    def report(self) -> ReadBackReport:
        return ReadBackReport.model_construct(
            repository=self.repository,
            paths=self.paths,
            drifted=self.drifted,
            unsafe=self.unsafe,
        )


def _expectation(expected: str, actual: str | None) -> Expectation:
    return Expectation.model_construct(expected=expected, actual=actual, ok=actual == expected)


def read_repository(
    layout: RepoLayout, grant: GrantV1, head: HeadState | None = None
) -> RepositoryReadBack:
    if head is None:
        head = read_head(layout, grant.branch)
    return RepositoryReadBack.model_construct(
        branch=_expectation(grant.branch, head.branch),
        head=_expectation(grant.base_commit, head.commit),
        tree=_expectation(grant.base_tree, head.tree),
    )


def expected_index(
    grant: GrantV1,
    bundle: PatchBundleV1,
    layout: RepoLayout,
    base_entries: dict[str, TreeEntry | None] | None = None,
) -> dict[str, list[IndexEntryState]]:
    """Each target's expected index entries; ``base_entries``: the base tree's, if read."""
    explicit = {p.path: p for p in grant.target_preconditions}
    implicit = [c.path for c in bundle.changes if c.path not in explicit]
    if base_entries is not None:
        base = base_entries
    else:
        disk = {path: disk_path(path) for path in implicit}
        found = tree_entries(layout, grant.base_tree, list(disk.values())) if implicit else {}
        base = {path: found[name] for path, name in disk.items()}
    expected: dict[str, list[IndexEntryState]] = {}
    for change in bundle.changes:
        if change.path in explicit:
            index = explicit[change.path].index
            expected[change.path] = (
                [] if index is None else [_index_entry(index.mode, index.oid, index.stage)]
            )
        else:
            entry = base.get(change.path)
            expected[change.path] = [] if entry is None else [_index_entry(entry.mode, entry.oid)]
    return expected


def _index_entry(mode: str, oid: str, stage: int = 0) -> IndexEntryState:
    return IndexEntryState.model_construct(mode=mode, oid=oid, stage=stage)


def read_back(layout: RepoLayout, root: Root, grant: GrantV1, bundle: PatchBundleV1) -> ReadBack:
    """Read everything a promotion decides on; never writes.

    Raises ``PathUnsafe`` (with ``paths`` and the ``drift_report``) when any target is
    ``unsafe``; otherwise returns the read-back, drifted or not.
    """
    head = read_head(layout, grant.branch)
    result = ReadBack(read_repository(layout, grant, head))
    # git and the file system are asked by disk names; everything reported is wire form
    disk = {c.path: disk_path(c.path) for c in bundle.changes}
    paths = list(disk.values())
    head_entries = path_entries(layout, head.tree, paths) if head.tree is not None else {}
    base_entries = (
        {path: head_entries.get(name) for path, name in disk.items()}
        if head.tree == grant.base_tree
        else None
    )
    wanted_index = expected_index(grant, bundle, layout, base_entries)
    prefixes = list(dict.fromkeys(p for path in paths for p in prefixes_of(path)))
    index: dict[str, list[IndexEntry]] = index_entries(layout, prefixes)
    actual_index = {path: index[name] for path, name in disk.items()}
    blocked = {
        wire_path(name): why
        for name, why in gitlinks_and_nested(
            layout, paths, index=index, head_tree=(head.tree, head_entries)
        ).items()
    }
    with closing(Directories.for_reads(root)) as directories:
        _read_paths(result, directories, bundle, actual_index, wanted_index, blocked)
    if result.unsafe:
        first = next(p for p in result.paths if p.path == result.unsafe[0])
        more = f" and {len(result.unsafe) - 1} more" if len(result.unsafe) > 1 else ""
        raise PathUnsafe(
            f"a target is unsafe to touch ({first.path}{more}: {'; '.join(first.reasons)}); "
            "nothing was written",
            paths=result.unsafe,
            drift_report=result.report().wire(),
        )
    return result


def _read_paths(
    result: ReadBack,
    directories: Directories,
    bundle: PatchBundleV1,
    actual_index: dict[str, list[IndexEntry]],
    wanted_index: dict[str, list[IndexEntryState]],
    blocked: dict[str, str],
) -> None:
    """Each target's verdict, read through the directories held for this read-back
    (all in one ``read_states`` call)."""
    leaves = directories.read_states([disk_path(change.path) for change in bundle.changes])
    for change, leaf in zip(bundle.changes, leaves, strict=True):
        reasons: list[str] = []
        actual: dict[str, Any] | None = None  # the reading's members vary by leaf kind
        found = Verdict.NEITHER
        unsafe = False
        old, new = State.of(change.old), State.of(change.new)  # once per change
        if isinstance(leaf, PromoterError):
            reasons.append(f"{leaf.code}: {leaf.detail}")
            actual = {"error": leaf.code, **{k: str(v) for k, v in leaf.context.items()}}
            unsafe = isinstance(leaf, PathUnsafe)
        else:
            actual = dict(leaf_report(leaf))
            reading = classify(leaf, old, new)
            found = reading.verdict
            if found is Verdict.NEITHER:
                reasons.append(
                    f"the worktree file is neither the old nor the new state: {reading.reason}"
                )
            elif refusal := hard_link_refusal(leaf, change, found):
                reasons.append(f"{PathUnsafe.code}: {refusal}")
                actual["links"] = leaf.nlink
                unsafe = True
        index_now = [
            _index_entry(e.mode, e.oid, e.stage) for e in actual_index.get(change.path, [])
        ]
        if index_now != wanted_index[change.path]:
            reasons.append("the index entry differs from the precondition")
        if change.path in blocked:
            reasons.append(blocked[change.path])
        verdict = Finding.UNSAFE if unsafe else Finding.DRIFT if reasons else Finding(found)
        result.paths.append(
            PathReadBack.model_construct(
                path=change.path,
                operation=change.operation,
                expected_old=dict(old.wire()),
                expected_new=dict(new.wire()),
                actual=actual,
                index_expected=wanted_index[change.path],
                index_actual=index_now,
                verdict=verdict,
                reasons=reasons,
            )
        )
