"""A promotion with its evidence, after the blobs are stored
(protocol: promotion#one-request-with-both-authorities).

``promote_with_evidence`` is what ``POST /v1/promotions:withEvidence`` does once its
blobs are durable (``promoter.store.blob_batch``): the bundle is verified and stored with
its passed verification receipt (``submit_bundle``: both documents durable before it
returns), then the promotion is requested under that receipt (``request_verified``,
given the documents just stored rather than reading them back; its attempt journals its
plan in a durable commit before its first write). So the evidence is durable before the
plan, and asking again with the same body finds the same blobs (free), the same bundle
and receipt (verified again, identical) and the same operation: nothing runs twice.
Fault point ``evidence_stored``: every piece of evidence durable, no operation yet.

Not here: who may ask (the route checks both authorities before anything is stored),
reading the body, waiting for the outcome (the route's, as ``POST /v1/promotions``).
"""

from __future__ import annotations

from typing import Any

from promoter.domain.models import GrantV1, PatchBundleV1
from promoter.engine.intake.bundles import Submitted, submit_bundle
from promoter.engine.operation.requests import Requested, request_verified
from promoter.engine.ports import Promoting
from promoter.faults import point


def promote_with_evidence(
    services: Promoting,
    data: Any,
    admitted: tuple[PatchBundleV1, GrantV1],
    run_id: str,
    fence: int,
) -> tuple[Submitted, Requested]:
    """Verify and store the bundle ``data`` (admitted for ``run_id``), then request its
    promotion under the fence; the stored submission and the requested operation."""
    submitted = submit_bundle(services, data, run_id=run_id, admitted=admitted)
    point("evidence_stored")
    receipt = submitted.receipt
    loaded = (submitted.bundle, admitted[1])
    requested = request_verified(
        services, loaded, dict(receipt.wire()), receipt.receipt_sha256, fence
    )
    return submitted, requested
