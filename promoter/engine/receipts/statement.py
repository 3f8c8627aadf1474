"""Receipts as in-toto Statements v1: build one from receipt bytes, check one offline.

``statement_bytes`` wraps the canonical bytes of a receipt (unchanged) as the predicate
of a Statement whose subjects are what the receipt is about: the targets of a promotion
or rollback that have content (path as name, sha256 digest), the bundle of a
verification. Deleted and missing paths have no digest; they stay recorded in the
predicate (a promotion that only deletes names its bundle, a rollback that left no
content names the receipt itself, because a Statement needs one subject). The payload
is RFC 8785 canonical JSON, so the predicate's bytes are exactly the stored receipt and
``receipt_sha256`` recomputes from them.

``open_statement`` and ``check_subjects`` are the inverse check: Statement shape,
predicate type, canonical bytes, and subjects that are exactly the ones the predicate
gives; ``json_object`` (the one JSON object check of a receipt's parts, the signing's
too). Checking the predicate receipt itself (schema, hash) is
``promoter.engine.receipts.signing.check_document``'s job; no signatures here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from promoter.domain.canonical import canonical_bytes
from promoter.domain.json_input import load_json
from promoter.domain.statement_types import PREDICATE_TYPES, STATEMENT_TYPE
from promoter.errors import PromoterError, ReceiptInvalid

STATEMENT_FIELDS = ("_type", "subject", "predicateType", "predicate")


class Subject(TypedDict):
    """A Statement subject: a name and its sha256."""

    name: str
    digest: dict[str, str]


class Statement(TypedDict):
    _type: str
    subject: list[Subject]
    predicateType: str
    predicate: Mapping[str, Any]  # an in-toto Statement v1 over a receipt


# a receipt document parsed from its canonical bytes (never re-encoded by a model)
def subjects_of(receipt: dict[str, Any]) -> list[Subject]:
    """The Statement subjects of a receipt document (see the module docstring)."""
    schema = receipt.get("schema")
    named: list[tuple[str, str]]
    if schema == "PatchVerificationReceiptV1":
        named = [(receipt["bundle_id"], receipt["bundle_sha256"])]
    elif schema == "PatchPromotionReceiptV1":
        named = [(t["path"], t["sha256"]) for t in receipt["targets"] if t.get("sha256")]
        named = named or [(receipt["bundle_id"], receipt["bundle_sha256"])]
    elif schema == "RollbackReceiptV1":
        named = [
            (t["path"], t["actual"]["sha256"])
            for t in receipt["targets"]
            if t.get("actual") and t["actual"].get("sha256")
        ]
        named = named or [(receipt["operation_id"], receipt["receipt_sha256"])]
    else:
        raise ReceiptInvalid(f"a {schema!r} is not a receipt; it has no Statement")
    return [{"name": name, "digest": {"sha256": digest}} for name, digest in named]


# the receipt parsed from its exact bytes; the Statement carries them back unchanged
def statement_of(receipt: dict[str, Any]) -> Statement:
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects_of(receipt),
        "predicateType": PREDICATE_TYPES[receipt["schema"]],
        "predicate": receipt,
    }


def statement_bytes(receipt_bytes: bytes) -> bytes:
    """The canonical Statement whose predicate is exactly ``receipt_bytes``."""
    receipt = json_object(receipt_bytes, "the receipt")
    body = canonical_bytes(statement_of(receipt))
    if receipt_bytes not in body:  # the receipt was not canonical: never re-encode it
        raise ReceiptInvalid("only canonical receipt bytes are wrapped in a Statement")
    return body


def checked_statement_bytes(receipt: dict[str, Any], receipt_bytes: bytes) -> bytes:
    """``statement_bytes`` of ``receipt`` parsed from ``receipt_bytes``, which the caller
    has checked are its canonical bytes (``signing.check_document``): the Statement's
    members joined in JCS order (``_type``, ``predicate``, ``predicateType``, ``subject``)
    around those bytes, so the receipt is neither parsed nor encoded again."""
    statement = statement_of(receipt)
    return b"".join(
        (
            b'{"_type":',
            canonical_bytes(statement["_type"]),
            b',"predicate":',
            receipt_bytes,
            b',"predicateType":',
            canonical_bytes(statement["predicateType"]),
            b',"subject":',
            canonical_bytes(statement["subject"]),
            b"}",
        )
    )


# a Statement from a signed payload, checked member by member here
def open_statement(payload: bytes) -> tuple[dict[str, Any], bytes, list[str]]:
    """(Statement, predicate bytes, check lines) of a Statement payload.

    Checks the Statement's shape, canonical bytes and predicate type; the caller checks
    the predicate receipt, then ``check_subjects``. Raises ``ReceiptInvalid``.
    """
    statement = json_object(payload, "the payload")
    if statement.get("_type") != STATEMENT_TYPE:
        raise ReceiptInvalid(
            f"not an in-toto Statement v1: _type is {statement.get('_type')!r}, expected "
            f"{STATEMENT_TYPE!r}"
        )
    fields = sorted(statement)
    if fields != sorted(STATEMENT_FIELDS):
        raise ReceiptInvalid(
            f"Statement fields are {', '.join(fields)}; expected {', '.join(STATEMENT_FIELDS)}"
        )
    if canonical_bytes(statement) != payload:
        raise ReceiptInvalid("the Statement payload is not RFC 8785 (JCS) canonical JSON")
    predicate = statement["predicate"]
    kind = statement["predicateType"]
    if not isinstance(predicate, dict):
        raise ReceiptInvalid("the Statement predicate is not a JSON object")
    schema = predicate.get("schema")
    if kind not in PREDICATE_TYPES.values() or PREDICATE_TYPES.get(str(schema)) != kind:
        raise ReceiptInvalid(
            f"predicateType mismatch: {kind!r} is not the predicate type of a {schema!r}"
        )
    lines = [f"statement: in-toto Statement v1, predicateType {kind}"]
    return statement, canonical_bytes(predicate), lines


# a Statement from ``open_statement``, its shape checked there
def check_subjects(statement: dict[str, Any]) -> str:
    """The check line when the subjects are exactly the ones the (checked) predicate gives."""
    expected = subjects_of(statement["predicate"])
    if statement["subject"] != expected:
        raise ReceiptInvalid(
            "the Statement subjects are not the ones its predicate gives (subject altered)"
        )
    return f"subjects: {len(expected)} recomputed from the predicate, match"


# any JSON object: what it must hold is checked by the caller
def json_object(data: bytes, what: str) -> dict[str, Any]:
    """``data`` as a JSON object, or ``ReceiptInvalid`` naming ``what`` it is."""
    try:
        value = load_json(data)
    except PromoterError as exc:
        raise ReceiptInvalid(f"{what} is not JSON: {exc.detail}") from exc
    if not isinstance(value, dict):
        raise ReceiptInvalid(f"{what} is not a JSON object")
    return value
