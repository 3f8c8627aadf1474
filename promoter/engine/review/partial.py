"""Accepting part of a bundle at review: the selection, and the sub-bundle derived from it.

``Selection`` is what the operator chose: ``only`` (the paths accepted) or ``except``
(the paths declined), and per text path the hunks accepted (numbered from 1 as in the
review diff). ``derive`` checks it against the stored parent bundle and builds the
derived bundle: the accepted changes with the same blobs (a path with chosen hunks gets
new bytes composed from its old content and those hunks, stored as a blob), and a
``derived_from`` naming the parent bundle, the declined paths and the composed paths
with their hunks and who composed them. That field is inside the bundle's identity, so
the derived bundle id binds the parent and the selection. ``store`` verifies it against
the same grant, exactly as intake verifies a submitted bundle (a new verification
receipt), and stores it, its receipt and its blobs' pins.

Refused before anything is stored: an empty selection, ``only`` and ``except`` together,
a path or hunk not in the bundle (``selection_invalid``), and a selection that accepts
one half of a rename (a delete and a create of the same non-empty bytes) and declines
the other (``selection_splits_pair``): the pair is accepted or declined together.

The derivation is deterministic (the parent's ``created_at``, sorted lists), so the same
selection of the same bundle always gives the same bundle id.

Deliberately not here: the decision and the operations (``promoter.engine.review.approval``)
and how hunks are computed (``promoter.domain.hunks``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from promoter.domain import hunks as hunk_math
from promoter.domain.canonical import sha256_hex
from promoter.domain.documents import canonical, sealed_bundle
from promoter.domain.hidden import visible
from promoter.domain.models import (
    Change,
    ComposedPath,
    DerivedFrom,
    FileState,
    PatchBundleV1,
    PatchVerificationReceiptV1,
)
from promoter.domain.renames import exact_groups
from promoter.engine.intake.bundles import verify_bundle
from promoter.engine.ports import Archive, Checking
from promoter.engine.review.diff import SMALL_BYTES, SMALL_LINES
from promoter.errors import (
    BundleConflict,
    ReceiptConflict,
    SelectionInvalid,
    SelectionSplitsPair,
    error_class,
)
from promoter.store import journal, repo

__all__ = ["Derived", "Selection", "derive", "store"]

BINARY_PROBE = 8000  # as git: a NUL byte in the first 8000 bytes makes a side binary


SelectionWire = TypedDict(
    "SelectionWire",
    {"only": list[str], "except": list[str], "hunks": dict[str, list[int]]},
    total=False,
)  # ``Selection.wire``: only what was given


class ComposedWire(TypedDict):
    """A composed path as a decision journals it (a ``ComposedPath``)."""

    path: str
    hunks: list[int]
    by: str


@dataclass(frozen=True)
class Selection:
    """The operator's choice; an empty ``Selection`` accepts the whole bundle."""

    only: tuple[str, ...] | None = None
    except_: tuple[str, ...] | None = None
    hunks: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def partial(self) -> bool:
        return self.only is not None or self.except_ is not None or bool(self.hunks)

    def wire(self) -> SelectionWire:
        """As journaled: only what was given."""
        out: SelectionWire = {}
        if self.only is not None:
            out["only"] = list(self.only)
        if self.except_ is not None:
            out["except"] = list(self.except_)
        if self.hunks:
            out["hunks"] = {p: list(h) for p, h in sorted(self.hunks.items())}
        return out


@dataclass(frozen=True)
class Derived:
    """The derived bundle, the paths it accepts and declines, its composed paths."""

    bundle: PatchBundleV1
    accepted: list[str]
    declined: list[str]
    composed: list[ComposedPath]
    blobs: dict[str, bytes]  # composed content to store, by sha256


def _named(paths: Sequence[str]) -> str:
    """Paths as the review shows them, one after another: never a list's repr, which
    doubles a wire path's backslashes."""
    return ", ".join(visible(p) for p in paths)


def _unknown(paths: Sequence[str], known: set[str], what: str) -> None:
    missing = sorted({p for p in paths if p not in known})
    if missing:
        raise SelectionInvalid(
            f"{what} names paths that are not in the bundle: {_named(missing)}", paths=missing
        )


def _choose(parent: PatchBundleV1, selection: Selection) -> tuple[list[str], list[str]]:
    paths = [c.path for c in parent.changes]
    known = set(paths)
    if selection.only is not None and selection.except_ is not None:
        raise SelectionInvalid("give the paths to accept (only) or to decline (except), not both")
    if selection.only is not None:
        if not selection.only:
            raise SelectionInvalid("the selection accepts no path: reject the bundle instead")
        _unknown(selection.only, known, "only")
        accepted = set(selection.only)
    elif selection.except_ is not None:
        if not selection.except_:
            raise SelectionInvalid("except names no path")
        _unknown(selection.except_, known, "except")
        accepted = known - set(selection.except_)
    else:
        accepted = set(known)
    _unknown(list(selection.hunks), known, "hunks")
    outside = sorted(p for p in selection.hunks if p not in accepted)
    if outside:
        raise SelectionInvalid(
            f"hunks are chosen in declined paths: {_named(outside)}", paths=outside
        )
    if not accepted:
        raise SelectionInvalid("the selection accepts no path: reject the bundle instead")
    return [p for p in paths if p in accepted], [p for p in paths if p not in accepted]


def _pairs(parent: PatchBundleV1, accepted: set[str]) -> None:
    """Refuse a selection that splits a rename: a delete and a create of the same bytes
    (``promoter.domain.renames.exact_groups``, the pairs the review shows as renames)."""
    for group in exact_groups(parent.changes):
        inside = [p for p in group if p in accepted]
        if inside and len(inside) != len(group):
            raise SelectionSplitsPair(
                f"{_named(group)} are a rename (a delete and a create of the same bytes): "
                "accept or decline them together",
                paths=group,
            )


def _text(data: bytes) -> bool:
    return b"\0" not in data[:BINARY_PROBE]


def _compose(
    services: Archive, change: Change, chosen: tuple[int, ...]
) -> tuple[bytes, list[int]] | None:
    """The composed bytes and the sorted hunks, or None when all hunks were chosen."""
    path = change.path
    if change.operation != "modify" or change.old.sha256 is None or change.new.sha256 is None:
        raise SelectionInvalid(f"hunks can be chosen in modified files only, not in {path!r}")
    if "120000" in (change.old.mode, change.new.mode):
        raise SelectionInvalid(f"{path!r} is a symbolic link: accept or decline it whole")
    if not chosen:
        raise SelectionInvalid(f"no hunk is chosen in {path!r}: decline the path instead")
    old = services.blobs.read(change.old.sha256)
    new = services.blobs.read(change.new.sha256)
    sides = (old, new)
    if not all(_text(s) for s in sides):
        raise SelectionInvalid(f"{path!r} is binary: accept or decline it whole")
    small = all(
        len(s) <= SMALL_BYTES and len(hunk_math.split_lines(s)) <= SMALL_LINES for s in sides
    )
    if not small:
        raise SelectionInvalid(
            f"{path!r} is too large to choose hunks in (over {SMALL_BYTES} bytes or "
            f"{SMALL_LINES} lines): accept or decline it whole"
        )
    found = hunk_math.hunks(old, new)
    wanted = sorted(set(chosen))
    outside = [n for n in wanted if not 1 <= n <= len(found)]
    if outside:
        raise SelectionInvalid(
            f"{path!r} has hunks 1..{len(found)}; there is no hunk {outside}", path=path
        )
    if len(wanted) == len(found):
        return None
    return hunk_math.compose(old, new, frozenset(wanted)), wanted


def derive(services: Archive, parent: PatchBundleV1, selection: Selection, by: str) -> Derived:
    """The sub-bundle the selection cuts from ``parent`` (nothing stored yet).

    ``by`` is the authenticated operator, the author of any composed content."""
    accepted, declined = _choose(parent, selection)
    _pairs(parent, set(accepted))
    changes: list[Change] = []
    composed: list[ComposedPath] = []
    blobs: dict[str, bytes] = {}
    for change in parent.changes:
        if change.path not in accepted:
            continue
        if change.path in selection.hunks:
            made = _compose(services, change, selection.hunks[change.path])
            if made is not None:
                data, wanted = made
                digest = sha256_hex(data)
                assert change.new.mode is not None
                new = FileState.of(digest, change.new.mode, len(data))
                if data == services.blobs.read(str(change.old.sha256)):
                    raise SelectionInvalid(f"the hunks chosen in {change.path!r} change nothing")
                blobs[digest] = data
                composed.append(ComposedPath(path=change.path, hunks=wanted, by=by))
                change = change.model_copy(update={"new": new})
        changes.append(change)
    derived_from = DerivedFrom(
        parent_bundle_id=parent.bundle_id,
        parent_bundle_sha256=parent.bundle_sha256,
        declined_paths=declined,
        composed=composed,
    )
    # every part is a validated model; the copy keeps the parent's other fields
    bundle = sealed_bundle(
        parent.model_copy(
            update={
                "changes": changes,
                "change_count": len(changes),
                "total_bytes": sum(c.new.bytes or 0 for c in changes if c.new.exists),
                "derived_from": derived_from,
            }
        )
    )
    return Derived(bundle, accepted, declined, composed, blobs)


def store(services: Checking, derived: Derived) -> PatchVerificationReceiptV1:
    """Verify the derived bundle against its grant and store it with its passed receipt.

    A derived bundle that does not pass (its grant refuses composed content, say) raises
    the verification's error with the failed receipt, and nothing of it is stored.
    """
    bundle = derived.bundle
    for digest, data in sorted(derived.blobs.items()):
        services.blobs.put(digest, data)
        with journal.unit_of_work(services.db) as session:
            repo.record_blob(session, digest, len(data))
    outcome = verify_bundle(services, bundle.wire(), bundle)
    if not outcome.passed:
        raise error_class(outcome.code)(
            "the accepted part does not pass verification: "
            + "; ".join(f"{c.name}: {c.detail}" for c in outcome.receipt.checks if c.detail),
            verification_receipt=outcome.receipt.wire(),
        )
    receipt_bytes = canonical(outcome.receipt)
    services.audit.put("bundle", bundle.bundle_id, outcome.document.canonical, BundleConflict)
    stored = services.audit.get("verification", bundle.bundle_id)
    services.audit.put("verification", bundle.bundle_id, receipt_bytes, ReceiptConflict)
    with journal.unit_of_work(services.db) as session:
        repo.add_bundle(session, bundle, services.owner.host or None)
        if stored is None:
            repo.add_verification(session, bundle.bundle_id, outcome.receipt.wire())
    return outcome.receipt
