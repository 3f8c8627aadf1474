"""What a merged bundle's old states are checked against (SPEC §10.14, verification side).

A merged bundle (``PatchBundleV1.merge`` set) is made by the host from a drifted
bundle: for each merged path its old state is the person's current bytes, which the
grant never named. ``merged_states`` is what the ``preconditions`` check compares those
old states with, after proving the merge's binding from the stored documents:

- the original bundle is stored, has the ``bundle_sha256`` the merge names, a stored
  passed verification receipt and the same grant (id and sha256) as the merged bundle;
- every change of the merged bundle is a change of the original for the same path;
  a change at a path the merge did not merge is byte-for-byte the original's (so its old
  state is still checked against the grant's precondition, as it was);
- at a merged path the original was a ``modify`` whose old and new sha256 are the
  merge's ``old_sha256`` and ``new_sha256``, and the merged change is a ``modify`` whose
  old sha256 is the merge's ``current_sha256``;
- a merged path may be absent from the merged bundle (the person's bytes already were
  the merge's result: nothing left to write there), never added.

So the only old states not authorized by the grant's preconditions are the person's own
current bytes at paths the original bundle was authorized to modify, each bound by hash.
Failures raise ``VerificationFailed`` (the bundle is not stored, or a promotion of it is
refused at step 2).

Deliberately not here: making the merge (``promoter.engine.operation.merge``), and refusing
merged bundles from executors (``promoter.engine.intake.bundles``: only the host makes
them).
"""

from __future__ import annotations

from typing import Any

from promoter.domain.models import Change, PatchBundleV1
from promoter.engine.services import Services
from promoter.errors import VerificationFailed

__all__ = ["merged_states"]


def _refuse(detail: str, bundle: PatchBundleV1) -> VerificationFailed:
    origin = bundle.merge
    return VerificationFailed(
        f"the merge binding does not hold: {detail}",
        merged_from=None if origin is None else origin.bundle_id,
    )


def merged_states(services: Services, bundle: PatchBundleV1) -> dict[str, dict[str, Any]]:
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
    expected: dict[str, dict[str, Any]] = {}
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
