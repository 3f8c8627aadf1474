"""The in-toto Statement v1 that carries a signed receipt (protocol: bundles#signed-receipts).

Strict models only: one per receipt kind whose ``predicate`` is that receipt. The wire
constants it re-exports (the DSSE payload type, the Statement type, one versioned
``predicateType`` per receipt kind: ``urn:`` URIs, so no domain is claimed) live in
``promoter.domain.statement_types``, which loads no pydantic. The JSON Schemas in
``schemas/`` are generated from these models.

Deliberately not here: building a Statement from receipt bytes or checking one
(``promoter.engine.receipts.statement``), signing (``promoter.engine.receipts.signing``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from promoter.domain.models import (
    PatchPromotionReceiptV1,
    PatchVerificationReceiptV1,
    RollbackReceiptV1,
)
from promoter.domain.statement_types import PAYLOAD_TYPE, PREDICATE_TYPES, STATEMENT_TYPE

__all__ = ["PAYLOAD_TYPE", "PREDICATE_TYPES", "STATEMENT_MODELS", "STATEMENT_TYPE"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class Sha256Digest(_Strict):
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class Subject(_Strict):
    """A target path (promotion, rollback) or a bundle id (verification) and its digest."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=4096)]
    digest: Sha256Digest


class _Statement(_Strict):
    type_: Literal["https://in-toto.io/Statement/v1"] = Field(alias="_type")
    subject: Annotated[list[Subject], Field(min_length=1)]


class VerificationStatementV1(_Statement):
    predicateType: Literal["urn:promoter:receipt:verification:v1"]  # noqa: N815 - wire name
    predicate: PatchVerificationReceiptV1


class PromotionStatementV1(_Statement):
    predicateType: Literal["urn:promoter:receipt:promotion:v1"]  # noqa: N815 - wire name
    predicate: PatchPromotionReceiptV1


class RollbackStatementV1(_Statement):
    predicateType: Literal["urn:promoter:receipt:rollback:v1"]  # noqa: N815 - wire name
    predicate: RollbackReceiptV1


STATEMENT_MODELS: dict[str, type[BaseModel]] = {
    "VerificationStatementV1": VerificationStatementV1,
    "PromotionStatementV1": PromotionStatementV1,
    "RollbackStatementV1": RollbackStatementV1,
}
