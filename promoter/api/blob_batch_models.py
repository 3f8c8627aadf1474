"""Response models of ``POST /v1/blobs:batchUpdate``, for the OpenAPI document.

Kept apart from ``promoter.api.models`` so the batch's contract is in one place; the
route builds its JSON itself (``promoter.store.blob_batch``), nothing here serializes.
"""

from __future__ import annotations

from promoter.api.models import Reply
from promoter.domain.models import Sha256


class BlobBatchItem(Reply):
    """One blob of a batch: stored (201 new, 200 already there) or refused with a code."""

    sha256: Sha256
    bytes: int
    created: bool
    status: int
    code: str | None
    detail: str | None


class BlobBatchStored(Reply):
    responses: list[BlobBatchItem]
