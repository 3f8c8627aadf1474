"""A promotion with its evidence, stored at once
(protocol: promotion#one-request-with-both-authorities).

``promote_with_evidence`` is what ``POST /v1/promotions:withEvidence`` does once its
blobs are written to temps and hashed (``promoter.store.evidence.Evidence``): the bundle
is verified against the stored blobs and the staged ones (read from their temps), its
passed receipt signed; then the blobs, the run's charge and both documents are stored
together (``Evidence.store``: one flush for every temp, the charge named and flushed, one
flush for every name; protocol: storage#evidence-of-one-request) and their rows recorded;
then the promotion is requested under that receipt (``request_verified``, given the
documents just stored rather than reading them back; its attempt journals its plan in a
durable commit before its first write). Nothing is answered in between, so the evidence
is durable before the plan and only there. Asking again with the same body finds the same
blobs (free), the same bundle and receipt (verified again, identical) and the same
operation: nothing runs twice. A bundle that fails verification stores nothing of the
request but its failed receipt's row. Fault point ``evidence_stored``: every piece of
evidence durable and recorded, no operation yet.

Not here: who may ask (the route checks both authorities before anything is stored),
reading the body, waiting for the outcome (the route's, as ``POST /v1/promotions``), how
the evidence is flushed (``promoter.store.evidence``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from promoter.domain.models import GrantV1, PatchBundleV1
from promoter.engine.intake.bundles import Submitted, check_submission, record_submission
from promoter.engine.operation.requests import Requested, request_verified
from promoter.engine.ports import Promoting
from promoter.faults import point
from promoter.store.blob_batch import BlobBatch
from promoter.store.evidence import GROUP_FAULT, Evidence

__all__ = ["GROUP_FAULT", "Promoted", "promote_with_evidence"]  # the route opens its batch with it


@dataclass(frozen=True)
class Promoted:
    submitted: Submitted
    requested: Requested
    blobs: list[dict[str, Any]]  # one answer per blob frame, as a batch's


def promote_with_evidence(
    services: Promoting,
    data: Any,
    admitted: tuple[PatchBundleV1, GrantV1],
    batch: BlobBatch,
    fence: int,
) -> Promoted:
    """Verify the bundle ``data`` (admitted for the run) over the blobs of ``batch`` (fed,
    opened with ``GROUP_FAULT``), store all of it, then request its promotion under the
    fence. On any error the evidence not yet stored is dropped (temps, reservations)."""
    evidence = Evidence(batch, services.audit)
    try:
        services.host.refuse_writes()  # a fenced host could never promote it
        staged = evidence.stage()
        checked = check_submission(services, data, admitted, staged)
        created, _ = evidence.store(checked.documents())
    except BaseException:
        evidence.abort()
        raise
    submitted = record_submission(services, checked, created)
    point("evidence_stored")
    receipt = submitted.receipt
    loaded = (submitted.bundle, admitted[1])
    requested = request_verified(
        services, loaded, dict(receipt.wire()), receipt.receipt_sha256, fence
    )
    return Promoted(submitted, requested, evidence.answers())
