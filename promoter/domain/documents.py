"""Hashes, ids and canonical bytes of the wire documents (protocol: documents#hashes-and-ids,
documents#strict-models, promotion#operation-identity).

One function per identity rule, all built on ``promoter.domain.canonical``. Pure: no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from promoter.domain.canonical import (
    canonical_bytes,
    canonical_sealed,
    canonical_with_projection,
    content_id,
    projection_sha256,
    sha256_hex,
)

if TYPE_CHECKING:  # only annotations: hashing a document dict loads no pydantic
    from promoter.domain.bundle_records import Grant
    from promoter.domain.models import (
        GrantV1,
        PatchBundleV1,
        PatchPromotionReceiptV1,
        PatchVerificationReceiptV1,
        RollbackReceiptV1,
    )

GRANT_IDENTITY = ("grant_sha256",)
BUNDLE_IDENTITY = ("bundle_id", "bundle_sha256")
RECEIPT_IDENTITY = ("receipt_sha256",)


def grant_sha256(grant: Grant) -> str:
    return projection_sha256(grant.wire(), GRANT_IDENTITY)


def sealed_grant(grant: GrantV1) -> GrantV1:
    """The grant with its ``grant_sha256`` filled in (identity of the exact bytes)."""
    return grant.model_copy(update={"grant_sha256": grant_sha256(grant)})


def bundle_sha256(document: dict[str, Any]) -> str:
    return projection_sha256(document, BUNDLE_IDENTITY)


class BundleBytes(NamedTuple):  # no dataclass: made at an offline check's import
    """A bundle document's canonical bytes and its ``bundle_sha256``, encoded once."""

    canonical: bytes  # the bytes the audit store keeps: JCS of the whole document
    sha256: str  # sha256(JCS(the document without bundle_id and bundle_sha256))


def bundle_bytes(document: dict[str, Any], *, parsed: bool = False) -> BundleBytes:
    """``canonical_bytes(document)`` and ``bundle_sha256(document)`` from one encoding.

    For a document a ``PatchBundleV1`` was parsed from, the canonical bytes are those of
    ``canonical(bundle)``: every field is required, none has a default and strict
    parsing keeps every value as it was (a property test holds the two equal).

    ``parsed``: a ``PatchBundleV1`` was parsed from ``document`` (or it is a bundle's
    ``wire()``). Then every key is a field name of a model that forbids others (ASCII),
    and every value a strict str, bool, null or integer below 2^53, so the walk that
    decides between the standard library's encoder and ``rfc8785`` is skipped, and the
    changes are written row by row (``jcs_rows.changes_text``).
    """
    writers = None
    if parsed:
        from promoter.domain import jcs_rows  # parsed documents only (the daemon's)

        writers = {"changes": jcs_rows.changes_text}
    whole, projected = canonical_with_projection(
        document, BUNDLE_IDENTITY, plain=parsed, writers=writers
    )
    return BundleBytes(whole, sha256_hex(projected))


def bundle_id_for(sha256: str) -> str:
    return content_id("bnd", sha256)


def sealed_bundle(bundle: PatchBundleV1) -> PatchBundleV1:
    """The bundle with its ``bundle_sha256`` and ``bundle_id`` filled in from its wire
    document (whatever it held there)."""
    digest = bundle_sha256(bundle.wire())
    return bundle.model_copy(update={"bundle_sha256": digest, "bundle_id": bundle_id_for(digest)})


def seal_bundle(document: dict[str, Any]) -> dict[str, Any]:
    """Fill ``bundle_sha256`` and ``bundle_id`` of a bundle document (a copy)."""
    digest = bundle_sha256(document)
    return {**document, "bundle_sha256": digest, "bundle_id": bundle_id_for(digest)}


def receipt_sha256(document: dict[str, Any]) -> str:
    return projection_sha256(document, RECEIPT_IDENTITY)


UNSEALED = "0" * 64  # the ``receipt_sha256`` a receipt is built with, before ``sealed``

if TYPE_CHECKING:  # annotations only: a constraint named by a string is compiled when made
    Receipt = TypeVar(
        "Receipt", PatchVerificationReceiptV1, PatchPromotionReceiptV1, RollbackReceiptV1
    )


def sealed(receipt: Receipt) -> tuple[Receipt, dict[str, Any]]:
    """The receipt with its ``receipt_sha256`` filled in, and that receipt's wire document.

    The hash covers the wire document without ``receipt_sha256`` (whatever the receipt held
    there, usually ``UNSEALED``); the document is dumped once and its ``receipt_sha256``
    replaced in place, so its members keep the model's order.
    """
    return sealed_canonical(receipt)[:2]


def sealed_canonical(receipt: Receipt) -> tuple[Receipt, dict[str, Any], bytes]:
    """``sealed``, and the sealed receipt's canonical bytes (``canonical`` of it) from the
    encoding its hash was made of (``canonical_sealed``)."""
    document = receipt.wire()
    data, digest = canonical_sealed(document, RECEIPT_IDENTITY[0])
    document["receipt_sha256"] = digest
    return receipt.model_copy(update={"receipt_sha256": digest}), document, data


def canonical(
    document: GrantV1
    | PatchBundleV1
    | PatchVerificationReceiptV1
    | PatchPromotionReceiptV1
    | RollbackReceiptV1,
) -> bytes:
    """The exact bytes stored in the audit store for a document."""
    return canonical_bytes(document.wire())


def operation_id_for(
    *,
    grant_sha256: str,
    bundle_sha256: str,
    verification_receipt_sha256: str,
    repository_identity: str,
) -> str:
    terms = {
        "grant_sha256": grant_sha256,
        "bundle_sha256": bundle_sha256,
        "verification_receipt_sha256": verification_receipt_sha256,
        "repository_identity": repository_identity,
    }
    return content_id("op", sha256_hex(canonical_bytes(terms)))


def evidence_sha256(evidence: Any) -> str:
    return sha256_hex(canonical_bytes(evidence))
