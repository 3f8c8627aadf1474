"""The executor side of promoter: turn an isolated worktree into a sealed bundle.

``builder.build_bundle`` computes and seals the changes of a throw-away worktree against
a grant's base tree without writing its ``.git``; ``handover.upload_and_submit`` hands
the blobs and the bundle to the host through ``promoter.client.sync``. ``policy`` holds the
local refusals that mirror the host's checks. Nothing here writes a source worktree:
that is the host's job alone.
"""

from __future__ import annotations

from promoter.executor.builder import BlobSource, BuiltBundle, build_bundle
from promoter.executor.handover import grant_from_file, upload_and_submit, upload_missing

__all__ = [
    "BlobSource",
    "BuiltBundle",
    "build_bundle",
    "grant_from_file",
    "upload_and_submit",
    "upload_missing",
]
