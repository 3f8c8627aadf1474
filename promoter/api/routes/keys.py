"""The host's public signing keys and DSSE-signed receipts (SPEC §3.9, §10.6, §7).

Thin adapters: the receipts come from the engine exactly as the unsigned routes serve
them, and ``promoter.engine.receipts.signing`` wraps their canonical bytes in an in-toto
Statement and a DSSE envelope. ``GET /v1/keys`` lists every key the host signs or
signed with (each entry is also an RFC 8037 OKP JWK, so the answer is a JWKS);
``GET /v1/keys.pem`` is the active key's PEM. Who may
read which receipt is decided here, the same way as for the unsigned receipts; nothing
here creates or changes a receipt.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from promoter.api.deps import AnyRoleDep, OrchestratorDep, ServicesDep
from promoter.api.models import KeySet
from promoter.api.openapi import Ok, operation
from promoter.api.responses import canonical_response, json_response
from promoter.api.routes.bundles import check_owner
from promoter.domain.canonical import canonical_bytes
from promoter.domain.models import DsseEnvelope
from promoter.engine.intake.bundles import load_verification
from promoter.engine.operation import requests as operations
from promoter.engine.receipts.signing import host_key, host_keyring, sign_envelope
from promoter.engine.services import Services

router = APIRouter(prefix="/v1")
ORCHESTRATOR = ("orchestrator", "operator")


def _signed(services: Services, receipt: bytes) -> Response:
    return canonical_response(sign_envelope(host_key(services), receipt))


@router.get(
    "/keys",
    **operation(
        "getKeys",
        summary="The receipt-signing public keys",
        description="Every receipt-signing public key, active first, retired ones with "
        "their validity window; each entry is also an RFC 8037 OKP JWK (a JWKS).",
        tags=["public"],
        roles=None,
        ok={200: Ok("the keys", KeySet)},
    ),
)
def get_keys(services: ServicesDep) -> Response:
    keyring = host_keyring(services)
    return json_response({"active_keyid": keyring.active.keyid, "keys": keyring.entries()})


@router.get(
    "/keys.pem",
    **operation(
        "getKeyPem",
        summary="The active signing key as PEM",
        description="The public key new receipts are signed with, as a PEM "
        "SubjectPublicKeyInfo (Ed25519).",
        tags=["public"],
        roles=None,
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
def get_active_key_pem(services: ServicesDep) -> Response:
    return Response(host_key(services).public_pem(), media_type="application/x-pem-file")


@router.get(
    "/operations/{operation_id}/receipt.dsse",
    **operation(
        "getSignedPromotionReceipt",
        summary="The signed promotion receipt",
        description="The promotion receipt in a DSSE envelope signed with the host key "
        "(404 `receipt_unavailable` until the operation completed).",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["operation_unknown", "receipt_unavailable"],
        ok={200: Ok("the envelope", DsseEnvelope)},
    ),
)
def get_promotion_envelope(
    operation_id: str, _: OrchestratorDep, services: ServicesDep
) -> Response:
    return _signed(services, operations.promotion_receipt(services, operation_id))


@router.get(
    "/operations/{operation_id}/rollback-receipt.dsse",
    **operation(
        "getSignedRollbackReceipt",
        summary="The signed rollback receipt",
        description="The rollback receipt of an operation in a DSSE envelope.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["receipt_unavailable"],
        ok={200: Ok("the envelope", DsseEnvelope)},
    ),
)
def get_rollback_envelope(operation_id: str, _: OrchestratorDep, services: ServicesDep) -> Response:
    return _signed(services, operations.rollback_receipt(services, operation_id))


@router.get(
    "/bundles/{bundle_id}/verification.dsse",
    **operation(
        "getSignedVerification",
        summary="The signed verification receipt",
        description="A bundle's verification receipt in a DSSE envelope. An executor may "
        "read those of its own run only.",
        tags=["orchestrator", "executor"],
        errors=["bundle_unknown", "not_found", "forbidden", "receipt_unavailable"],
        ok={200: Ok("the envelope", DsseEnvelope)},
    ),
)
def get_verification_envelope(
    bundle_id: str, principal: AnyRoleDep, services: ServicesDep
) -> Response:
    check_owner(services, principal, bundle_id)
    return _signed(services, canonical_bytes(load_verification(services, bundle_id)))
