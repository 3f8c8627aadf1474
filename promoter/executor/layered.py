"""Making a layered sandbox, and building any sandbox's bundle by its layout.

``create`` lays an overlay sandbox (``layers.py``) into a new run directory: the base of
HEAD's tree is found or made (``base_cache.ensure``, under the bases' lock, and the run
record saved before the lock is let go, so a sweep never takes a base a run chose),
then the start layer (the command's ``.git`` and, unless ``from_head``, the person's
worktree where it differs from HEAD: ``start_state.capture_into`` with whiteouts). Its
cost is the person's changed paths plus, once per commit, the base's checkout.

``build`` hands a sandbox's bundle to the builder its layout needs: the upper layer
(``upper.build_from_layers``) for an overlay, the clone's worktree
(``builder.build_bundle``) for a copy clone.

Fault points: ``layers_made`` (directories made, nothing captured), ``start_laid``
(start layer complete, the record not yet saved).

Deliberately not here: the run record itself (``sandbox.py``), running the command
(``confine.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from promoter import faults
from promoter.errors import BaseMoved, GrantInvalid
from promoter.executor import base_cache, layers, upper
from promoter.executor.builder import BuiltBundle, build_bundle
from promoter.executor.start_state import StartState, capture_into
from promoter.executor.start_watch import Asking, Watched
from promoter.git.head import head_on_branch
from promoter.git.layout import RepoLayout, discover, repo_env
from promoter.git.runner import run_git

if TYPE_CHECKING:
    from promoter.domain.bundle_records import Grant, StateLike


class RunRecord(Protocol):
    """What this module reads of a run's record (``sandbox.RunRecord``)."""

    run_id: str
    worktree: str
    branch: str
    base_commit: str
    base_tree: str
    clone: str
    layout: str
    start_tree: str | None


__all__ = ["build", "create", "head_tree", "overlay_of", "written_tree"]


def _objects(worktree: str, found: RepoLayout | None = None) -> str:
    layout = found or discover(worktree)
    return os.path.join(layout.common_dir, "objects")


def head_tree(
    worktree: str, head: str, *, found: RepoLayout | None = None, branch: str | None = None
) -> str:
    """The tree of ``head``, which must still be the worktree's HEAD (``found``: the
    worktree's layout, when the caller discovered it already). HEAD still on ``branch``
    at ``head`` is read in one ``git for-each-ref`` (``head_on_branch``); any other case
    as before, by ``rev-parse``. A HEAD the person moved since the daemon read it is
    ``base_moved`` (a run started as HEAD moved: nothing is made yet; starting again
    starts from HEAD as it is then; docs/decisions/a-head-moved-as-a-run-starts.md)."""
    layout = found or discover(worktree)
    if branch is not None:
        on = head_on_branch(layout, branch)
        if on is not None and on.commit == head and on.tree is not None:
            return on.tree
    current = run_git(["rev-parse", "--verify", "HEAD^{commit}"], env=repo_env(layout))
    moved = current.stdout.decode().strip()
    if moved != head:
        raise BaseMoved(
            f"{worktree}'s HEAD moved from {head[:12]} to {moved[:12]} while the run "
            "started; nothing was made; next: run the same command again: it starts from "
            "HEAD and your files as they are then",
            head=moved,
        )
    tree = run_git(["rev-parse", "--verify", f"{head}^{{tree}}"], env=repo_env(layout))
    return tree.stdout.decode().strip()


def create(
    state_dir: Path,
    record: RunRecord,
    home: Path,
    *,
    from_head: bool,
    save: Callable[[], None],
    used: Callable[[], set[str]],
    found: RepoLayout | None = None,
    watched: Watched | None = None,
    asking: Asking | None = None,
) -> StartState | None:
    """Lay the overlay sandbox of ``record`` into ``home``; the captured start state.

    ``save`` writes the record; ``used`` lists the base trees run records name;
    ``found`` is the worktree's layout when the caller discovered it already;
    ``watched``: the daemon's watch may narrow the start's status pass (``asking``: it
    was asked already).
    """
    objects = _objects(record.worktree, found)
    save()  # named by a record before anything is made: --list shows it, --remove takes it
    with base_cache.lock(state_dir):
        base = base_cache.ensure(state_dir, objects, record.base_tree)
        box = layers.Layers(home, base.chain)
        layers.make_dirs(box)
        base_cache.sweep(state_dir, used() | {record.base_tree})
    faults.point("layers_made")
    layers.lay_git(box.start, record.branch, record.base_commit)
    state = None
    if not from_head:
        state = capture_into(
            record.worktree, box.start, home, record.base_tree, whiteouts=True,
            alternates=objects, found=found, watched=watched, asking=asking,
        )  # fmt: skip
        layers.collapse_empty(box.start, box.bases)
    layers.point_alternates(box.start)
    faults.point("start_laid")
    return state


def written_tree(record: RunRecord) -> Path:
    """Where the command's writes are on the host: the overlay's upper layer, or the
    clone (for a walk over what a kept sandbox holds, e.g. to drop setuid bits)."""
    if record.layout == "overlay":
        return Path(record.clone).parent / "layers" / "upper"
    return Path(record.clone)


def overlay_of(record: RunRecord, *, found: RepoLayout | None = None) -> layers.Overlay:
    """What ``confine`` needs to mount ``record``'s overlay sandbox (``found``: the
    worktree's layout, when the caller discovered it already)."""
    box, _ = upper.run_layers(record.clone, record.base_tree)
    return layers.Overlay(box, Path(_objects(record.worktree, found)))


def build(
    record: RunRecord,
    grant: Grant,
    *,
    since: Mapping[str, StateLike] | None = None,
    created_at: str | None = None,
    leave_out: frozenset[str] = frozenset(),
) -> BuiltBundle:
    """The bundle of ``record``'s sandbox, by its layout; the caller closes it.
    ``leave_out``: paths the person chose not to promote (a refused link's)."""
    if record.layout == "overlay":
        if grant.base_tree != record.base_tree:
            raise GrantInvalid(  # a grant made for another base: a refusal of it
                f"the grant's base_tree {grant.base_tree} is not the sandbox's "
                f"{record.base_tree}: the grant was not made for run {record.run_id}; a new "
                f"step registers its own: promoter run --continue {record.run_id} -- CMD",
                base_tree=grant.base_tree,
            )
        box, gitlinks = upper.run_layers(record.clone, record.base_tree)
        return upper.build_from_layers(
            box, grant, gitlinks=gitlinks, since=since, created_at=created_at,
            leave_out=leave_out,
        )  # fmt: skip
    return build_bundle(
        Path(record.clone), grant, since=since, start_tree=record.start_tree,
        created_at=created_at, leave_out=leave_out,
    )  # fmt: skip
