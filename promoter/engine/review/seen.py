"""The approval rule of a cut review: a file not shown in full is approved only by name.

protocol: api#every-byte-reviewable. A bundle's review is answered in pages of
``review_diff_page_bytes`` (``promoter.engine.review.diff``). When its first page does not show
every file in full (the diff is cut, or a file is summarized: too large to diff, or out of time), an
approval must say what its person saw: ``Seen.all_seen`` (every file, or the person
takes the ones not seen as they are), or ``Seen.paths`` naming each file of the
approval that the first page does not show in full. ``require`` refuses anything less
(``diff_not_seen``, every such path with its sizes, flags and the cursor that shows it)
before a decision is taken: nothing is journaled, nothing moves. Files an approval
declines (``except``, or left out of ``only``) need no name: they are not promoted. A
name that is not a path of the bundle is ``selection_invalid``.

The rule is the host's floor, the same for every credential and surface, computed from
the bundle alone (its bytes are immutable; the executor chooses them but not the bound).
A surface that showed a smaller first page (the console's review page) says so
(``Seen.page``): the rule then holds at that page, and its person ticks the files it
did not show.

Deliberately not here: the decision (``promoter.engine.review.approval``), and what a
person actually read (no server can know; the request says it, under the operator's own
credential, and the decision event records it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict

from promoter.domain.answers import UnseenFileView
from promoter.domain.status import OperationKind, OperationStatus
from promoter.engine.intake.bundles import load_bundle
from promoter.engine.ports import Reviewing
from promoter.engine.review.diff import unseen_at_bound
from promoter.engine.review.partial import Selection
from promoter.errors import DiffNotSeen, SelectionInvalid
from promoter.store import journal

__all__ = ["Seen", "require"]

LISTED = 50  # paths named in the refusal's detail (the problem's ``paths`` has them all)


class SeenWire(TypedDict):
    """``Seen.wire``: as journaled with the decision."""

    all_seen: bool
    paths: list[str]
    page: NotRequired[int]


@dataclass(frozen=True)
class Seen:
    """What an approve request says its person saw beyond the first page."""

    all_seen: bool = False
    paths: tuple[str, ...] = ()
    page: int | None = None  # the surface showed a first page this small (else the host's)

    @property
    def said(self) -> bool:
        """Whether the request said anything (journaled only then)."""
        return self.all_seen or bool(self.paths)

    def wire(self) -> SeenWire:
        """As journaled with the decision."""
        out: SeenWire = {"all_seen": self.all_seen, "paths": sorted(set(self.paths))}
        if self.page is not None:
            out["page"] = self.page
        return out


def _accepted(paths: list[str], selection: Selection | None) -> set[str]:
    if selection is not None and selection.only is not None:
        return set(selection.only)
    if selection is not None and selection.except_ is not None:
        return set(paths) - set(selection.except_)
    return set(paths)


def _size(entry: UnseenFileView) -> str:
    old, new = entry["old_bytes"], entry["new_bytes"]
    flags = f", {', '.join(entry['flags'])}" if entry["flags"] else ""
    return f"{entry['path_shown']} ({old if old is not None else '-'} -> {new} bytes{flags})"


def require(
    services: Reviewing, operation_id: str, seen: Seen, selection: Selection | None
) -> None:
    """Refuse (``diff_not_seen``) an approval of ``operation_id`` that neither names every
    accepted file its first review page does not show in full nor says ``all_seen``.

    An operation that is not a held promotion is left to the decision to refuse.
    Blocking (builds the first page of the diff): call it in a worker thread, outside
    any lock.
    """
    with journal.unit_of_work(services.db) as session:
        row = journal.get_operation(session, operation_id)
        if row is None or row.kind != OperationKind.PROMOTION:
            return
        if row.status != OperationStatus.AWAITING_APPROVAL or row.bundle_id is None:
            return
        bundle_id = str(row.bundle_id)
    bundle = load_bundle(services, bundle_id)
    paths = [change.path for change in bundle.changes]
    strangers = sorted(set(seen.paths) - set(paths))
    if strangers:
        raise SelectionInvalid(
            f"seen names paths that are not in the bundle: {strangers}", paths=strangers
        )
    if seen.all_seen:
        return
    accepted = _accepted(paths, selection)
    named = set(seen.paths)
    bound = services.settings.review_diff_page_bytes
    if seen.page is not None:
        bound = min(bound, seen.page)
    missing = [
        entry
        for entry in unseen_at_bound(services, bundle_id, bound)
        if entry["path"] in accepted and entry["path"] not in named
    ]
    if not missing:
        return
    listed = "; ".join(_size(entry) for entry in missing[:LISTED])
    more = f"; and {len(missing) - LISTED} more" if len(missing) > LISTED else ""
    raise DiffNotSeen(
        f"the review of bundle {bundle_id} does not show {len(missing)} file(s) in full: "
        f"{listed}{more}. Read each (promoter review {operation_id} --path PATH), then name "
        f"it (promoter approve {operation_id} --seen PATH) or approve with --all-seen; "
        "nothing was changed",
        operation_id=operation_id,
        bundle_id=bundle_id,
        paths=missing,
    )
