"""The names of a signed receipt's wrapping (protocol: bundles#signed-receipts).

The DSSE payload type, the in-toto Statement type and one ``predicateType`` per receipt
kind, as plain constants: what checking an envelope needs without the Statement models
of ``promoter.domain.intoto`` (which re-exports them) and so without pydantic.
"""

from __future__ import annotations

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"

# receipt schema -> predicateType
PREDICATE_TYPES: dict[str, str] = {
    "PatchVerificationReceiptV1": "urn:promoter:receipt:verification:v1",
    "PatchPromotionReceiptV1": "urn:promoter:receipt:promotion:v1",
    "RollbackReceiptV1": "urn:promoter:receipt:rollback:v1",
}
