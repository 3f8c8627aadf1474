"""Response model of ``POST /v1/promotions:withEvidence``, for the OpenAPI document.

Kept apart from ``promoter.api.models`` (as the batch's) so this contract is in one
place; the route builds its JSON itself, nothing here serializes.
"""

from __future__ import annotations

from promoter.api.models import OperationAccepted, OperationView, Reply
from promoter.domain.models import PatchVerificationReceiptV1, Sha256


class PromotedWithEvidence(Reply):
    """The stored bundle, its passed verification receipt and the promotion: its final
    view once it ended (200, with ``wait``), else its id and status (202)."""

    bundle_id: str
    bundle_sha256: Sha256
    verification_receipt: PatchVerificationReceiptV1
    operation: OperationView | OperationAccepted
