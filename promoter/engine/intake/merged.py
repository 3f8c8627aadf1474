"""What a merged bundle's old states are checked against.

``merged_states`` proves a merged bundle's binding to its original from the stored
documents (protocol: runs#merged-bundle-binding) and returns the person's states the
``preconditions`` check compares its merged paths with; a failure raises
``VerificationFailed``.

Not here: making the merge (``promoter.engine.operation.merge``), refusing merged bundles
from executors (``promoter.engine.intake.bundles``).
"""

from __future__ import annotations

from promoter.domain.models import Change, PatchBundleV1
from promoter.domain.path_state import StateWire
from promoter.engine.ports import Archive
from promoter.errors import VerificationFailed

__all__ = ["merged_states"]


def _refuse(detail: str, bundle: PatchBundleV1) -> VerificationFailed:
    origin = bundle.merge
    return VerificationFailed(
        f"the merge binding does not hold: {detail}",
        merged_from=None if origin is None else origin.bundle_id,
    )


def merged_states(services: Archive, bundle: PatchBundleV1) -> dict[str, StateWire]:
    """Per merged path the old state the merged bundle must have (the person's bytes)."""
    origin = bundle.merge
    if origin is None:
        return {}
    original = services.audit.load("bundle", origin.bundle_id, PatchBundleV1)
    if original is None or original.bundle_sha256 != origin.bundle_sha256:
        raise _refuse(f"the original bundle {origin.bundle_id} is not stored as named", bundle)
    if services.audit.get("verification", origin.bundle_id) is None:
        raise _refuse("the original bundle has no passed verification receipt", bundle)
    if (original.grant_id, original.grant_sha256) != (bundle.grant_id, bundle.grant_sha256):
        raise _refuse("the original bundle was verified against another grant", bundle)
    if original.merge is not None:
        raise _refuse("a merged bundle is merged again from its own original only", bundle)
    before: dict[str, Change] = {change.path: change for change in original.changes}
    paths = {item.path: item for item in origin.paths}
    if len(paths) != len(origin.paths):
        raise _refuse("a merged path is listed twice", bundle)
    expected: dict[str, StateWire] = {}
    for item in origin.paths:
        was = before.get(item.path)
        if was is None or was.operation != "modify":
            raise _refuse(f"{item.path!r} is not a modify of the original bundle", bundle)
        if (was.old.sha256, was.new.sha256) != (item.old_sha256, item.new_sha256):
            raise _refuse(f"{item.path!r}: old or new differs from the original's", bundle)
    for change in bundle.changes:
        was = before.get(change.path)
        if was is None:
            raise _refuse(f"{change.path!r} is not a path of the original bundle", bundle)
        bound = paths.get(change.path)
        if bound is None:
            if change != was:
                raise _refuse(f"{change.path!r} was not merged but differs", bundle)
            continue
        if change.operation != "modify" or change.old.sha256 != bound.current_sha256:
            raise _refuse(f"{change.path!r}: the old state is not the merge's current", bundle)
        expected[change.path] = {
            "exists": True,
            "sha256": bound.current_sha256,
            "mode": change.old.mode,
        }
    return expected
