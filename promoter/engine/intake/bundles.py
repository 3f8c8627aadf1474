"""Bundle intake: store and verify a PatchBundleV1 (protocol: bundles#bundle,
bundles#verification-receipt).

A bundle that passes verification is stored once as its canonical bytes, its blobs are
pinned and its passed receipt is stored once; a later verification that differs is a
``receipt_conflict``. A bundle that fails is not stored: the failed receipt is kept in
the database for the record and returned in the error, and a later submission of the
same bundle verifies afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from promoter.domain.models import GrantV1, PatchBundleV1, PatchVerificationReceiptV1
from promoter.domain.parsing import parse_model
from promoter.engine.intake.chained import implicit_states
from promoter.engine.intake.grants import load_grant
from promoter.engine.intake.merged import merged_states
from promoter.engine.ports import Checking, Loading, Provenance, Reconciling, Records
from promoter.engine.receipts.envelopes import VERIFICATION, make_envelope, receipt_signer
from promoter.engine.receipts.envelopes import record as record_envelope
from promoter.engine.verify.basetree import GitBaseTree
from promoter.engine.verify.bundle import Verification, verify
from promoter.engine.verify.shared import BlobSizes
from promoter.errors import (
    BundleConflict,
    BundleUnknown,
    DerivedBundleRefused,
    Forbidden,
    NotFound,
    OwnedByOtherHost,
    PromoterError,
    ReceiptConflict,
    error_class,
)
from promoter.store import journal, repo
from promoter.store.db import Database
from promoter.store.key_ledger import StoredEnvelope


@dataclass(frozen=True)
class Submitted:
    bundle: PatchBundleV1
    receipt: PatchVerificationReceiptV1
    created: bool


def verify_bundle(
    services: Checking,
    document: dict[str, Any],  # the JSON ``bundle`` was parsed from: its bytes are checked
    bundle: PatchBundleV1,
    grant: GrantV1 | None = None,
    blobs: BlobSizes | None = None,
) -> Verification:
    """Verify ``bundle`` against its grant; ``grant`` is that grant when the caller has
    just read it in the same request (a grant's stored bytes never change); ``blobs``
    the blobs it reads where they are not all stored yet (``promoter.store.evidence``)."""
    if grant is None:
        grant = load_grant(services, bundle.grant_id)
    repository = services.registry.by_identity(grant.repository_identity)
    cache = services.base_trees.setdefault(repository.identity, {})
    chained = implicit_states(services, grant) if grant.base_operation else None
    merged = merged_states(services, bundle) if bundle.merge is not None else None
    base = GitBaseTree(repository.layout, cache, services.tree_links)
    reader = services.blobs if blobs is None else blobs
    return verify(document, bundle, grant, reader, base, chained, merged)


def admit_bundle(
    services: Provenance, data: Any, *, run_id: str | None, host_made: bool = False
) -> tuple[PatchBundleV1, GrantV1]:
    """The bundle and its grant, if ``run_id`` (None: trusted) may submit it; nothing stored.

    A document carrying ``derived_from`` is refused whoever sends it: only the host
    derives a bundle, from a stored one, on an operator's decision
    (``promoter.engine.review.partial``), so no bundle can claim a review it never had.
    A merged bundle (``merge`` set) is made by the host only (``host_made``): from anyone
    else it is ``forbidden``, since its old states are the person's bytes, not the grant's.
    An executor submits bundles of its own run under its own run's grant only.
    """
    services.host.refuse_writes()  # a fenced host could never promote it
    if isinstance(data, dict) and "derived_from" in data:
        raise DerivedBundleRefused(
            "a bundle that names derived_from is made by the host at review, never submitted"
        )
    bundle = parse_model(PatchBundleV1, data)
    if bundle.merge is not None and not host_made:
        raise Forbidden("a merged bundle is made by the host (promoter merge), never submitted")
    if run_id is not None and bundle.executor_run_id != run_id:
        raise Forbidden("an executor may submit bundles of its own run only")
    grant = load_grant(services, bundle.grant_id)
    if run_id is not None and grant.executor_run_id != run_id:
        raise Forbidden("the bundle names a grant of another run", grant_id=grant.grant_id)
    return bundle, grant


@dataclass(frozen=True)
class Checked:
    """A bundle that passed verification, with what storing it takes."""

    bundle: PatchBundleV1
    receipt: PatchVerificationReceiptV1
    receipt_bytes: bytes
    document: bytes  # the bundle's canonical bytes
    sealed: StoredEnvelope
    stored: bytes | None  # the passed receipt already stored (identical), if any

    def documents(self) -> list[tuple[str, str, bytes, type[PromoterError]]]:
        """The two documents to store, as ``AuditStore.put_all`` takes them."""
        bundle_id = self.bundle.bundle_id
        return [
            ("bundle", bundle_id, self.document, BundleConflict),
            ("verification", bundle_id, self.receipt_bytes, ReceiptConflict),
        ]


def submit_bundle(
    services: Reconciling,
    data: Any,
    *,
    run_id: str | None,
    host_made: bool = False,
) -> Submitted:
    """Verify and store a bundle; ``run_id`` is the executor's own run (None: trusted).

    Who may submit what is ``admit_bundle``'s.
    """
    admitted = admit_bundle(services, data, run_id=run_id, host_made=host_made)
    checked = check_submission(services, data, admitted)
    created, _ = services.audit.put_all(checked.documents())  # flushed together
    return record_submission(services, checked, created)


def check_submission(
    services: Reconciling,
    data: Any,
    admitted: tuple[PatchBundleV1, GrantV1],
    blobs: BlobSizes | None = None,
) -> Checked:
    """Verify the admitted bundle (``blobs``: see ``verify_bundle``) and sign its receipt;
    nothing stored but a failed receipt's row, which raises the failure's code, and a
    passed one that differs from the stored passed receipt is ``receipt_conflict``."""
    bundle, grant = admitted
    outcome = verify_bundle(services, data, bundle, grant, blobs)
    receipt_wire = outcome.receipt.wire()
    receipt_bytes = outcome.receipt_bytes  # canonical(outcome.receipt)
    # signed by this host, the one that made the receipt, before its transaction opens
    sealed = make_envelope(receipt_signer(services), VERIFICATION, bundle.bundle_id, receipt_bytes)
    if not outcome.passed:
        with journal.unit_of_work(services.db) as session:
            repo.add_verification(session, bundle.bundle_id, receipt_wire)
            record_envelope(session, sealed)
        raise error_class(outcome.code)(
            "the bundle did not pass verification: "
            + "; ".join(f"{c.name}: {c.detail}" for c in outcome.receipt.checks if c.detail),
            verification_receipt=receipt_wire,
            failed_checks=[c.name for c in outcome.receipt.checks if c.status == "failed"],
        )
    stored = services.audit.get("verification", bundle.bundle_id)
    if stored is not None and stored != receipt_bytes:
        earlier = services.audit.parsed(
            "verification", bundle.bundle_id, stored, PatchVerificationReceiptV1
        )
        raise ReceiptConflict(
            "re-verification differs from the stored passed receipt",
            stored_receipt_sha256=earlier.receipt_sha256,
            receipt_sha256=outcome.receipt.receipt_sha256,
        )
    # the submitted document's canonical bytes, which are canonical(bundle): verification
    # encoded them for manifest_integrity, and a passed check says they hash as claimed
    document = outcome.document.canonical
    return Checked(bundle, outcome.receipt, receipt_bytes, document, sealed, stored)


def record_submission(services: Reconciling, checked: Checked, created: bool) -> Submitted:
    """The rows of a submission whose documents are stored (``created``: the bundle's new)."""
    bundle = checked.bundle
    # not flushed: the bundle and its receipt are durable documents already, and a row
    # lost with a power failure is recorded again when the same bundle is submitted again
    with journal.unit_of_work(services.db, durable=False) as session:
        created = repo.add_bundle(session, bundle, services.owner.host or None) or created
        if checked.stored is None:
            repo.add_verification(session, bundle.bundle_id, checked.receipt.wire())
        record_envelope(session, checked.sealed)
    return Submitted(bundle, checked.receipt, created and checked.stored is None)


def load_bundle(services: Loading, bundle_id: str) -> PatchBundleV1:
    """The stored bundle; one the ledger records on another host is ``owned_by_other_host``."""
    if not bundle_id.startswith("bnd_") or "/" in bundle_id:
        raise BundleUnknown(f"no bundle {bundle_id!r} is stored", bundle_id=bundle_id)
    bundle = services.audit.load("bundle", bundle_id, PatchBundleV1)
    if bundle is None:
        with journal.unit_of_work(services.db) as session:
            recorded, host = repo.bundle_owner_host(session, bundle_id)
        if recorded and host is not None and host != services.owner.host:
            raise OwnedByOtherHost(
                f"bundle {bundle_id} is stored on host {host}, not on this one",
                bundle_id=bundle_id,
                owner_host=host,
            )
        raise BundleUnknown(f"no bundle {bundle_id!r} is stored", bundle_id=bundle_id)
    return bundle


# a stored receipt, or the latest failed one's JSON from its row, as served
def load_verification(services: Records, bundle_id: str) -> dict[str, Any]:
    """The stored passed receipt, else the latest failed one on record."""
    if bundle_id.startswith("bnd_") and "/" not in bundle_id:
        stored = services.audit.load("verification", bundle_id, PatchVerificationReceiptV1)
        if stored is not None:
            return dict(stored.wire())
        with journal.unit_of_work(services.db) as session:
            record = repo.latest_verification(session, bundle_id)
        if record is not None:
            return record
    raise NotFound(f"no verification of bundle {bundle_id!r} is on record", bundle_id=bundle_id)


def bundle_owner(db: Database, bundle_id: str) -> str | None:
    """The run whose executor submitted the bundle (``None``: not on record)."""
    with journal.unit_of_work(db) as session:
        return repo.verification_run(session, bundle_id)
