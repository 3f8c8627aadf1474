"""The chain of a promotion: its promotion receipt names the verification it rests on.

``check_chain`` takes two checked documents (``promoter.engine.receipts.signing.verify_document``
results) and establishes that both are signed by a listed key and that the promotion
receipt names exactly the verification receipt (``verification_receipt_sha256``), the
bundle (id and sha256), the grant (id and sha256) and the repository of that verified,
passed verification receipt.

Deliberately not here: fetching the envelopes or keys (``promoter.cli.receipt_cmd``),
checking signatures or hashes (done before, by ``verify_document``), and the bundle
or grant documents themselves (the hashes bind them; their bytes are not needed).
"""

from __future__ import annotations

from promoter.domain.json_input import load_json
from promoter.engine.receipts.signing import VerifiedDocument
from promoter.errors import ReceiptInvalid

BOUND = ("bundle_id", "bundle_sha256", "grant_id", "grant_sha256", "repository_identity")


def check_chain(verification: VerifiedDocument, promotion: VerifiedDocument) -> list[str]:
    """One line per established link; ``ReceiptInvalid`` on the first broken one."""
    if {verification.kind, promotion.kind} != {"verification_receipt", "promotion_receipt"}:
        raise ReceiptInvalid(
            f"--chain needs a verification and a promotion receipt, not a {verification.kind}"
            f" and a {promotion.kind}"
        )
    if verification.kind != "verification_receipt":
        verification, promotion = promotion, verification
    for document in (verification, promotion):
        if not (document.enveloped and document.signature_checked):
            raise ReceiptInvalid(
                f"the {document.kind.replace('_', ' ')} is not signed by a listed key "
                "(give --public-key or --keys, or --operation with the server's keys)"
            )
    lines = [
        f"signed: verification receipt by {verification.keyid}, "
        f"promotion receipt by {promotion.keyid}"
    ]
    checked = load_json(verification.body)
    promoted = load_json(promotion.body)
    if checked["status"] != "passed":
        raise ReceiptInvalid("the verification receipt did not pass; nothing rests on it")
    named = promoted["verification_receipt_sha256"]
    if named != verification.identity_sha256:
        raise ReceiptInvalid(
            f"broken chain: the promotion names verification receipt {named}, not "
            f"{verification.identity_sha256}",
            field="verification_receipt_sha256",
        )
    lines.append(f"verification_receipt_sha256: {named} names this verification receipt")
    for field in BOUND:
        if promoted[field] != checked[field]:
            raise ReceiptInvalid(
                f"broken chain: {field} is {promoted[field]!r} in the promotion receipt but "
                f"{checked[field]!r} in the verification receipt",
                field=field,
            )
        lines.append(f"{field}: {promoted[field]} in both")
    return lines
