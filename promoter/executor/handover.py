"""Handing a built bundle to the host: upload the blobs it lacks, submit, read a grant.

``submitted_receipt`` uploads only the referenced blobs the host does not hold, old and
new (small ones batched, big ones streamed, with progress), then submits the bundle and
returns the verification receipt's checked document (``upload_and_submit`` its model);
``promote_with_evidence`` hands blobs, bundle and the promotion over in one request, for
a caller holding both authorities (protocol: promotion#one-request-with-both-authorities),
and warns of each part of the review the answer names not carried (read next by its own
request);
``grant_from_file`` reads a grant document (checked by ``promoter.domain.wirecheck``, a
``GrantRecord``: no pydantic unless it is refused, and then the model words the refusal).
A receipt is checked by the validator too: its model loads only for a refusal or for
``upload_and_submit``.
Deliberately not here: building the bundle (``promoter.executor.builder``), the HTTP
transport (``promoter.client.sync``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from promoter.domain import wirecheck
from promoter.domain.blob_frames import BATCH_MAX_BYTES, frame_bytes
from promoter.domain.bundle_records import StateRecord, grant_record
from promoter.errors import GrantInvalid
from promoter.executor.builder import BuiltBundle
from promoter.lazy_log import LazyLogger

if TYPE_CHECKING:
    from promoter.client.sync import PromoterClient
    from promoter.domain.bundle_records import Grant
    from promoter.domain.models import PatchVerificationReceiptV1

__all__ = [
    "Progress",
    "Promoted",
    "fetched_base",
    "fetched_grant",
    "grant_from_file",
    "promote_with_evidence",
    "submitted_receipt",
    "upload_and_submit",
    "upload_missing",
]

log = LazyLogger("promoter.run")

Progress = Callable[[int, int], None]
"""Called with (bytes uploaded so far, bytes to upload in all)."""


def upload_missing(
    client: PromoterClient, built: BuiltBundle, progress: Progress | None = None
) -> list[str]:
    """Upload the referenced blobs the host does not hold (small ones batched); their sha256s."""
    missing = [s for s in client.blobs_missing(sorted(built.blobs)) if s in built.blobs]
    total = sum(built.blobs[s].size for s in missing)
    sent = 0
    if progress is not None:
        progress(0, total)

    def counted(sha256: str) -> Iterator[bytes]:
        nonlocal sent
        for chunk in built.iter_blob(sha256):
            sent += len(chunk)
            if progress is not None:
                progress(sent, total)
            yield chunk

    client.put_blobs((s, built.blobs[s].size, counted(s)) for s in missing)
    return missing


def submitted_receipt(
    client: PromoterClient, built: BuiltBundle, progress: Progress | None = None
) -> dict[str, Any]:
    """Upload missing blobs, submit the bundle, return the passed verification receipt:
    its document, checked by ``promoter.domain.wirecheck`` (the model words a refusal).

    A failed verification is raised by the client as the code of the first failed check,
    the failed receipt in the error's ``verification_receipt`` context member.
    """
    upload_missing(client, built, progress)
    answer = client.submit_bundle(built.bundle)
    return _checked_receipt(answer["verification_receipt"])


def upload_and_submit(
    client: PromoterClient, built: BuiltBundle, progress: Progress | None = None
) -> PatchVerificationReceiptV1:
    """``submitted_receipt``'s receipt as its model, for a caller that wants the model."""
    from promoter.domain.models import PatchVerificationReceiptV1

    return PatchVerificationReceiptV1.model_validate(submitted_receipt(client, built, progress))


def _checked_receipt(answer: Any) -> dict[str, Any]:
    """A receipt document the validator accepts; else the model's refusal, raised."""
    receipt = dict(answer)
    if wirecheck.problem("PatchVerificationReceiptV1", receipt) is not None:
        from promoter.domain.models import PatchVerificationReceiptV1

        PatchVerificationReceiptV1.model_validate(receipt)  # the model's refusal, as before
    return receipt


class Promoted(NamedTuple):
    """What one request answered: the passed verification receipt (checked), the
    operation (its view once it ended), and what it carried for the review: the bundle's
    first diff page and the promotion receipt, each None when the host left it out."""

    receipt: dict[str, Any]
    operation: dict[str, Any]
    diff: dict[str, Any] | None
    promotion_receipt: dict[str, Any] | None


def promote_with_evidence(
    orchestrator: PromoterClient, executor_token: str, built: BuiltBundle, fence: int
) -> Promoted:
    """Blobs, bundle and promotion in one request (``orchestrator`` holds an orchestrator's
    or the operator's credential, ``executor_token`` is the run's); waits for the outcome,
    and asks the answer to carry the diff and the receipt a review reads next.

    Every referenced blob rides in the request when they fit one batch (no question
    first); else the host is asked which it lacks and only those are sent.
    """
    wanted = sorted(built.blobs)
    if sum(frame_bytes(s, built.blobs[s].size) for s in wanted) > BATCH_MAX_BYTES:
        with orchestrator.with_token(executor_token) as executor:
            wanted = [s for s in executor.blobs_missing(wanted) if s in built.blobs]
    blobs = ((s, built.blobs[s].size, built.iter_blob(s)) for s in wanted)
    answer = orchestrator.promote_with_evidence(
        built.bundle, blobs, fence, executor_token=executor_token, wait=True, with_review=True
    )
    diff, promoted = answer.get("diff"), answer.get("receipt")
    for missing in answer.get("not_carried") or ():  # read next by its own request
        log.warning(
            "the host did not carry the review's %s (%s: %s); it is read by its own request",
            missing.get("part"), missing.get("code"), missing.get("detail"),
        )  # fmt: skip
    return Promoted(
        _checked_receipt(answer["verification_receipt"]),
        dict(answer["operation"]),
        dict(diff) if isinstance(diff, dict) else None,
        dict(promoted) if isinstance(promoted, dict) else None,
    )


def fetched_grant(client: PromoterClient, grant_id: str) -> Grant:
    """The grant the host holds: the record of its answer when the validator accepts it,
    else the model's reading of it (which refuses it in its own words)."""
    document = client.grant_document(grant_id)
    if wirecheck.problem("GrantV1", document) is None:
        return grant_record(document)
    from promoter.domain.models import GrantV1

    return GrantV1.model_validate(document)


def fetched_base(client: PromoterClient, grant_id: str) -> dict[str, StateRecord]:
    """A chained grant's base (``PromoterClient.grant_base``) as records. A state whose
    record would not give back its exact document is read by the model, which refuses it
    in its own words; the values of the others are checked with the bundle they end in."""
    found: dict[str, StateRecord] = {}
    for item in client.grant_base_document(grant_id)["states"]:
        state = item["state"]
        record = _state_record(state)
        if record is None:
            from promoter.domain.models import FileState

            record = StateRecord.from_state(FileState.model_validate(state))
        found[str(item["path"])] = record
    return found


def _state_record(state: Any) -> StateRecord | None:
    if not isinstance(state, dict) or set(state) != _STATE_KEYS:
        return None
    if any(type(state[key]) not in kinds for key, kinds in _STATE_TYPES.items()):
        return None
    values = (state["sha256"], state["mode"], state["bytes"])
    if (None in values) if state["exists"] else (values != (None, None, None)):
        return None  # ``FileState``'s consistency: all of them when it exists, else none
    record = StateRecord(state["exists"], *values)
    return record if record.wire() == state else None


_STATE_KEYS = frozenset(("exists", "sha256", "mode", "bytes", "blob_ref"))
_STATE_TYPES: dict[str, tuple[type, ...]] = {
    "exists": (bool,),
    "sha256": (str, type(None)),
    "mode": (str, type(None)),
    "bytes": (int, type(None)),
}


def grant_from_file(path: Path) -> Grant:
    """A grant read from a JSON file (sealed or not): the record of a document the
    validator accepts; else the model's refusal (``ValidationFailed``), worded as ever."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GrantInvalid(f"cannot read grant file {path}: {exc.strerror or exc}") from exc
    from promoter.domain.json_input import load_json  # a grant file: not run's path

    document = load_json(raw)
    if isinstance(document, dict) and wirecheck.problem("GrantV1", document) is None:
        return grant_record(document)
    from promoter.domain.models import GrantV1
    from promoter.domain.parsing import parse_model

    return parse_model(GrantV1, document)
