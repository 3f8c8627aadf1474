"""The executor side of promoter: turn an isolated worktree into a sealed bundle.

``builder.build_bundle`` computes and seals the changes of a throw-away worktree against
a grant's base tree without writing its ``.git``; ``handover.upload_and_submit`` hands
the blobs and the bundle to the host through ``promoter.client.sync``. ``policy`` holds the
local refusals that mirror the host's checks. Nothing here writes a source worktree:
that is the host's job alone. The names below are loaded from their modules when first
asked for, so ``promoter.executor.sandbox`` or ``confine`` alone loads no bundle models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from promoter.executor.builder import BlobSource, BuiltBundle, build_bundle
    from promoter.executor.handover import (
        grant_from_file,
        promote_with_evidence,
        submitted_receipt,
        upload_and_submit,
        upload_missing,
    )

__all__ = [
    "BlobSource",
    "BuiltBundle",
    "build_bundle",
    "grant_from_file",
    "promote_with_evidence",
    "submitted_receipt",
    "upload_and_submit",
    "upload_missing",
]
_HOMES = {
    "BlobSource": "promoter.executor.builder",
    "BuiltBundle": "promoter.executor.builder",
    "build_bundle": "promoter.executor.builder",
    "grant_from_file": "promoter.executor.handover",
    "promote_with_evidence": "promoter.executor.handover",
    "submitted_receipt": "promoter.executor.handover",
    "upload_and_submit": "promoter.executor.handover",
    "upload_missing": "promoter.executor.handover",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
