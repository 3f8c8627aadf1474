"""The ledger's receipt-signing public keys and DSSE-signed receipts.

protocol: bundles#signed-receipts, bundles#envelopes-signed-once, hosts#host-keys.

Thin adapters. ``GET /v1/keys`` lists every key of every host of the ledger (each entry
names its ``host_id`` and validity window and is also an RFC 8037 OKP JWK, so the answer
is a JWKS); ``GET /v1/keys.pem`` is the same set as PEM blocks, each preceded by its
keyid, host, status and window (RFC 7468 explanatory text), this host's active key first.
The signed receipts are the envelopes stored when the receipts were made, served byte for
byte by ``promoter.engine.operation.served``. Who may read which receipt is decided here,
the same way as for the unsigned receipts; nothing here creates or changes a receipt.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from promoter.api.deps import AnyRoleDep, OrchestratorDep, Port
from promoter.api.openapi import Ok, operation
from promoter.api.responses import canonical_response, json_response
from promoter.api.routes.bundles import check_owner
from promoter.domain.models import DsseEnvelope
from promoter.domain.views import KeySet
from promoter.engine.operation import served
from promoter.engine.ports import Sealing, Serving
from promoter.engine.receipts.envelopes import ledger_key_set

router = APIRouter(prefix="/v1")
ORCHESTRATOR = ("orchestrator", "operator")
PEM_FIELDS = ("keyid", "host_id", "status", "not_before", "not_after")


@router.get(
    "/keys",
    response_model=KeySet,
    **operation(
        "getKeys",
        summary="The receipt-signing public keys of every host",
        description="Every receipt-signing public key every host of the ledger published, "
        "each with its `host_id` and validity window: this host's first (active, then "
        "retired), then the other hosts'. Each entry is also an RFC 8037 OKP JWK (a JWKS).",
        tags=["public"],
        roles=None,
        errors=["database_unavailable"],  # every host's keys: the ledger's
        ok={200: Ok("the keys", KeySet)},
    ),
)
def get_keys(services: Port[Sealing]) -> Response:
    active, entries = ledger_key_set(services)
    host = services.owner.host
    return json_response({"active_keyid": active, "host_id": host, "keys": entries})


@router.get(
    "/keys.pem",
    response_class=Response,  # PEM text, with its own media type
    **operation(
        "getKeyPem",
        summary="Every host's signing keys as PEM",
        description="The keys of `GET /v1/keys` as PEM SubjectPublicKeyInfo blocks "
        "(Ed25519), this host's active key first; before each block, RFC 7468 explanatory "
        "lines `keyid:`, `host_id:`, `status:`, `not_before:`, `not_after:`.",
        tags=["public"],
        roles=None,
        errors=["database_unavailable"],  # every host's keys: the ledger's
        ok={
            200: Ok(
                "the PEM",
                {"type": "string"},
                "-----BEGIN PUBLIC KEY-----\n",
                media_type="application/x-pem-file",
            )
        },
    ),
)
def get_key_pems(services: Port[Sealing]) -> Response:
    _, entries = ledger_key_set(services)
    blocks = [
        "".join(f"{f}: {entry.get(f)}\n" for f in PEM_FIELDS if entry.get(f) is not None)
        + entry["public_key_pem"]
        for entry in entries
    ]
    return Response("".join(blocks), media_type="application/x-pem-file")


@router.get(
    "/operations/{operation_id}/receipt.dsse",
    response_model=DsseEnvelope,
    **operation(
        "getSignedPromotionReceipt",
        summary="The signed promotion receipt",
        description="The promotion receipt in the DSSE envelope its host signed when it "
        "made it, served as stored (404 `receipt_unavailable` until the operation "
        "completed; 421 `owned_by_other_host` for a receipt made before envelopes were "
        "stored by another host, which alone signs it).",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["operation_unknown", "receipt_unavailable", "owned_by_other_host"],
        ok={200: Ok("the envelope", DsseEnvelope)},
    ),
)
def get_promotion_envelope(
    operation_id: str, _: OrchestratorDep, services: Port[Serving]
) -> Response:
    return canonical_response(served.promotion_envelope(services, operation_id))


@router.get(
    "/operations/{operation_id}/rollback-receipt.dsse",
    response_model=DsseEnvelope,
    **operation(
        "getSignedRollbackReceipt",
        summary="The signed rollback receipt",
        description="The rollback receipt of an operation in a DSSE envelope.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["receipt_unavailable", "owned_by_other_host"],
        ok={200: Ok("the envelope", DsseEnvelope)},
    ),
)
def get_rollback_envelope(
    operation_id: str, _: OrchestratorDep, services: Port[Serving]
) -> Response:
    return canonical_response(served.rollback_envelope(services, operation_id))


@router.get(
    "/bundles/{bundle_id}/verification.dsse",
    response_model=DsseEnvelope,
    **operation(
        "getSignedVerification",
        summary="The signed verification receipt",
        description="A bundle's verification receipt in a DSSE envelope. An executor may "
        "read those of its own run only.",
        tags=["orchestrator", "executor"],
        errors=[
            "bundle_unknown",
            "not_found",
            "forbidden",
            "receipt_unavailable",
            "owned_by_other_host",
        ],
        ok={200: Ok("the envelope", DsseEnvelope)},
    ),
)
def get_verification_envelope(
    bundle_id: str, principal: AnyRoleDep, services: Port[Serving]
) -> Response:
    check_owner(services, principal, bundle_id)
    return canonical_response(served.verification_envelope(services, bundle_id))
