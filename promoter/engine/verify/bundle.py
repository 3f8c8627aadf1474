"""Verification of a bundle against its grant (protocol: bundles#verification-receipt).

Seven checks, always all of them, always in this order, each evaluated on its own so a
failed receipt tells the executor everything that is wrong at once. Each check returns
the evidence it compared; the receipt carries the evidence's sha256. The result holds no
wall-clock time, so the same bundle, grant and blobs always give the same bytes.

Reading blobs and the base tree are ports (``BlobSizes``, ``BaseTree``, with what the
checks share, in ``promoter.engine.verify.shared``); this module does no I/O of its own
and stores nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from promoter.domain import allowlist, jcs_rows, links
from promoter.domain.canonical import sha256_hex
from promoter.domain.documents import (
    UNSEALED,
    BundleBytes,
    bundle_bytes,
    bundle_id_for,
    sealed_canonical,
)
from promoter.domain.models import (
    CHECK_ORDER,
    Change,
    Check,
    CheckName,
    GrantV1,
    PatchBundleV1,
    PatchVerificationReceiptV1,
)
from promoter.domain.path_state import SYMLINK_MODE, StateWire
from promoter.domain.paths import check_path_set, sort_key
from promoter.engine.verify import link_resolution
from promoter.engine.verify.shared import (
    BaseTree,
    BlobSizes,
    Facts,
    Outcome,
    state_dict,
    summarize,
)
from promoter.errors import PathInvalid, PromoterError

# (1) manifest_integrity: hash, id, counts, order and operation/state agreement


def _operation_problem(change: Change) -> str | None:
    old, new = change.old, change.new
    if change.operation == "create" and (old.exists or not new.exists):
        return f"{change.path}: create needs a missing old and an existing new state"
    if change.operation == "delete" and (not old.exists or new.exists):
        return f"{change.path}: delete needs an existing old and a missing new state"
    if change.operation == "modify":
        if not (old.exists and new.exists):
            return f"{change.path}: modify needs existing old and new states"
        if (old.sha256, old.mode) == (new.sha256, new.mode):
            return f"{change.path}: modify must change the content or the mode"
    return None


def check_manifest_integrity(digest: str, bundle: PatchBundleV1, facts: Facts) -> Outcome:
    """``digest``: the ``bundle_sha256`` of the document as submitted."""
    total = facts.total
    problems: list[str] = []
    code = "verification_failed"
    if digest != bundle.bundle_sha256 or bundle_id_for(digest) != bundle.bundle_id:
        problems.append("bundle_sha256 or bundle_id does not match the bundle's content")
        code = "bundle_hash_mismatch"
    if bundle.change_count != len(bundle.changes):
        problems.append(
            f"change_count is {bundle.change_count}, changes list {len(bundle.changes)}"
        )
    if bundle.total_bytes != total:
        problems.append(f"total_bytes is {bundle.total_bytes}, the new states add up to {total}")
    if not facts.in_order:
        problems.append("changes are not sorted by the bytes of path, or repeat a path")
    problems.extend(p for c in bundle.changes if (p := _operation_problem(c)) is not None)
    evidence = {
        "bundle_sha256": digest,
        "bundle_id": bundle_id_for(digest),
        "change_count": len(bundle.changes),
        "total_bytes": total,
    }
    if problems and code != "bundle_hash_mismatch":
        code = "validation_failed"
    return Outcome(not problems, evidence, summarize(problems), code)


class BlobRow(TypedDict):
    """Evidence of ``blob_integrity``: a blob's measured size (None: missing or corrupt)."""

    sha256: str
    bytes: int | None


class LinkRow(TypedDict):
    """Evidence of ``path_policy``: a link's target text as shown, under the grant's policy."""

    path: str
    target: str | None
    policy: str


class AllowRow(TypedDict):
    """Evidence of ``allowlist``: the pattern that allowed a change (None: none did)."""

    path: str
    operation: str
    pattern: str | None


class PreconditionRow(TypedDict):
    """Evidence of ``preconditions``: the old state expected and where it came from."""

    path: str
    source: str
    expected: StateWire | None


# (2) blob_integrity: every referenced blob present and hashing correctly, sizes agree


def check_blob_integrity(bundle: PatchBundleV1, blobs: BlobSizes) -> Outcome:
    claimed: dict[str, set[int]] = {}
    for change in bundle.changes:
        for state in (change.old, change.new):
            if state.exists and state.sha256 is not None and state.bytes is not None:
                claimed.setdefault(state.sha256, set()).add(state.bytes)
    evidence: list[BlobRow] = []
    missing: list[str] = []
    wrong_size: list[str] = []
    digests = sorted(claimed)
    for sha256, size in zip(digests, blobs.measure_all(digests), strict=True):
        evidence.append({"sha256": sha256, "bytes": size})
        if size is None:
            missing.append(sha256)
        elif claimed[sha256] != {size}:
            wrong_size.append(sha256)
    problems = [f"blob {s} is missing or does not hash correctly" for s in missing]
    problems += [f"blob {s} has {sorted(claimed[s])} bytes claimed" for s in wrong_size]
    code = "blob_missing" if missing else "blob_hash_mismatch"
    return Outcome(not problems, evidence, summarize(problems), code, jcs_rows.blob_rows)


# (3) grant_binding: the bundle names this grant and agrees with it


BINDING_FIELDS = (
    "grant_id",
    "grant_sha256",
    "executor_run_id",
    "repository_identity",
    "base_commit",
    "base_tree",
)


def check_grant_binding(bundle: PatchBundleV1, grant: GrantV1) -> Outcome:
    evidence = {name: getattr(grant, name) for name in BINDING_FIELDS}
    problems = [
        f"{name} is {getattr(bundle, name)!r}, the grant says {evidence[name]!r}"
        for name in BINDING_FIELDS
        if getattr(bundle, name) != evidence[name]
    ]
    return Outcome(not problems, evidence, summarize(problems))


# (4) path_policy: the lexical path rules (protocol: documents#path-rules) and the grant's
# symlink policy, links also by resolution against the base tree's links
# (protocol: bundles#symlinks-by-resolution)


def _link_problems(
    bundle: PatchBundleV1, grant: GrantV1, blobs: BlobSizes
) -> tuple[list[LinkRow], list[str]]:
    """Every change with a link side, checked against ``grant.symlinks`` (target text shown)."""
    evidence: list[LinkRow] = []
    problems: list[str] = []
    for change in bundle.changes:
        if change.old.mode != SYMLINK_MODE and change.new.mode != SYMLINK_MODE:
            continue  # neither side a link (``links.is_link``)
        target: bytes | None = None
        if links.is_link(change.new.mode) and change.new.sha256 is not None:
            try:
                target = blobs.read(change.new.sha256)
            except PromoterError:
                target = None
        why: str | None
        if grant.symlinks == "none":
            why = links.target_problem(change.path, b"", "none")
        elif not links.is_link(change.new.mode):
            why = None  # a link deleted or turned into a file: no new target
        elif target is None:
            why = "the link target blob cannot be read"
        else:
            why = links.target_problem(change.path, target, grant.symlinks)
        shown = None if target is None else links.shown(target)
        evidence.append({"path": change.path, "target": shown, "policy": grant.symlinks})
        if why is not None:
            brief = shown if shown is None or len(shown) <= 200 else shown[:200] + "..."
            problems.append(f"{change.path} -> {brief!r}: {why}")
    return evidence, problems


def _resolution_problems(
    bundle: PatchBundleV1, grant: GrantV1, blobs: BlobSizes, base: BaseTree
) -> list[tuple[str, str]]:
    """Under ``inside``, the bundle's links resolved over the base tree's (``domain.resolve``).
    Run only once every link passed the lexical rule (so every target blob was read)."""
    if grant.symlinks != "inside":
        return []
    changes = link_resolution.bundle_changes(bundle, blobs.read)
    if changes is None:
        return []
    return link_resolution.resolution_problems(changes, base.links(grant.base_tree))


def check_path_policy(
    bundle: PatchBundleV1,
    facts: Facts,
    grant: GrantV1 | None = None,
    blobs: BlobSizes | None = None,
    base: BaseTree | None = None,
) -> Outcome:
    paths = facts.paths
    problems: list[str] = []
    link_evidence: list[LinkRow] = []
    resolution: list[tuple[str, str]] = []
    if grant is not None and blobs is not None:
        link_evidence, problems = _link_problems(bundle, grant, blobs)
        if not problems and base is not None:
            try:
                resolution = _resolution_problems(bundle, grant, blobs, base)
            except PromoterError as exc:
                problems.append(f"the base tree's links cannot be read: {exc.detail}")
    problems.extend(
        f"{path!r}: {error}"
        for path, error in zip(paths, facts.path_errors, strict=True)
        if error is not None
    )
    try:
        check_path_set(paths)
    except PathInvalid as exc:
        problems.append(
            f"{exc.context.get('path')!r} and {exc.context.get('other')!r}: {exc.detail}"
        )
    code = "symlink_policy" if resolution and not problems else "path_invalid"
    problems.extend(f"{path}: {why} (symlinks: inside)" for path, why in resolution)
    evidence: Any = list(paths) if facts.in_order else sorted(paths, key=sort_key)
    if link_evidence:  # only bundles with links carry it, so earlier receipts keep their bytes
        evidence = {"paths": evidence, "links": link_evidence}
        if resolution:  # only a failed check: a passed one keeps the bytes it had before
            evidence["resolution"] = [{"path": p, "problem": w} for p, w in resolution]
    return Outcome(not problems, evidence, summarize(problems), code)


# (5) limits: the grant's count and size limits


def check_limits(bundle: PatchBundleV1, grant: GrantV1, facts: Facts) -> Outcome:
    count = len(bundle.changes)
    total = facts.total
    evidence = {
        "change_count": count,
        "total_bytes": total,
        "max_changes": grant.limits.max_changes,
        "max_total_bytes": grant.limits.max_total_bytes,
    }
    problems = []
    if count > grant.limits.max_changes:
        problems.append(f"{count} changes exceed the grant's limit of {grant.limits.max_changes}")
    if total > grant.limits.max_total_bytes:
        problems.append(f"{total} bytes exceed the grant's limit of {grant.limits.max_total_bytes}")
    return Outcome(not problems, evidence, summarize(problems), "payload_too_large")


# (6) allowlist: some entry matches the path and lists the operation


def _compiled(pattern: str) -> re.Pattern[str] | None:
    """The pattern's matcher; None for one the grant should not hold (it matches nothing)."""
    try:
        return allowlist.compile_pattern(pattern)
    except PromoterError:
        return None


def check_allowlist(bundle: PatchBundleV1, grant: GrantV1) -> Outcome:
    evidence: list[AllowRow] = []
    problems: list[str] = []
    entries = [(e.pattern, _compiled(e.pattern), e.operations) for e in grant.write_allowlist]
    for change in bundle.changes:
        chosen: str | None = None
        name = allowlist.subject(change.path)
        for pattern, matcher, operations in entries:
            if (
                matcher is not None
                and name is not None
                and change.operation in operations
                and matcher.fullmatch(name) is not None
            ):
                chosen = pattern
                break
        evidence.append({"path": change.path, "operation": change.operation, "pattern": chosen})
        if chosen is None:
            problems.append(f"{change.path}: {change.operation} is not allowed by the grant")
    return Outcome(not problems, evidence, summarize(problems), encode=jcs_rows.allowlist_rows)


# (7) preconditions: every old state equals the explicit or implicit precondition


def check_preconditions(
    bundle: PatchBundleV1,
    grant: GrantV1,
    base: BaseTree,
    facts: Facts,
    chained: Mapping[str, StateWire] | None = None,
    merged: Mapping[str, StateWire] | None = None,
) -> Outcome:
    """For a merged bundle's merged paths, the person's bytes the merge bound (``merged``:
    source ``merge``, protocol: runs#merges-are-new-bundles); then explicit preconditions; then, for
    a chained grant, the states its base operations left (``chained``: source ``base_operation``);
    then the base tree."""
    explicit = {p.path: p for p in grant.target_preconditions}
    chained = chained or {}
    merged = merged or {}
    implicit_paths = [
        path
        for path, error in zip(facts.paths, facts.path_errors, strict=True)
        if path not in explicit and path not in chained and path not in merged and error is None
    ]
    try:
        base_states = base.states(grant.base_tree, implicit_paths) if implicit_paths else {}
    except PromoterError as exc:
        return Outcome(False, {"error": exc.code}, f"cannot read the base tree: {exc.detail}")
    evidence: list[PreconditionRow] = []
    problems: list[str] = []
    for change in bundle.changes:
        expected: StateWire
        if change.path in merged:
            expected, source = merged[change.path].copy(), "merge"
        elif change.path in explicit:
            spec = explicit[change.path].old
            expected, source = state_dict(spec.exists, spec.sha256, spec.mode), "explicit"
        elif change.path in chained:
            expected, source = chained[change.path].copy(), "base_operation"
        elif change.path in base_states:  # a dict of its own per path: read, never changed
            expected, source = base_states[change.path], "base_tree"
        else:
            evidence.append({"path": change.path, "source": "invalid_path", "expected": None})
            problems.append(f"{change.path!r}: no precondition applies to an invalid path")
            continue
        actual = state_dict(change.old.exists, change.old.sha256, change.old.mode)
        evidence.append({"path": change.path, "source": source, "expected": expected})
        if actual != expected:
            problems.append(f"{change.path}: old state differs from the {source} precondition")
    return Outcome(not problems, evidence, summarize(problems), encode=jcs_rows.precondition_rows)


@dataclass(frozen=True)
class Verification:
    receipt: PatchVerificationReceiptV1
    failure_codes: dict[str, str]
    document: BundleBytes  # the verified document's canonical bytes and its bundle_sha256
    receipt_bytes: bytes  # ``canonical(receipt)``, from the encoding its hash was made of

    @property
    def passed(self) -> bool:
        return self.receipt.status == "passed"

    @property
    def code(self) -> str:
        """The problem code of a failed receipt: that of its first failed check."""
        for check in self.receipt.checks:
            if check.status == "failed":
                return self.failure_codes.get(check.name, "verification_failed")
        return "verification_failed"


def verify(
    document: Mapping[str, Any],
    bundle: PatchBundleV1,
    grant: GrantV1,
    blobs: BlobSizes,
    base: BaseTree,
    chained: Mapping[str, StateWire] | None = None,
    merged: Mapping[str, StateWire] | None = None,
) -> Verification:
    """Run the seven checks and build the deterministic receipt.

    ``chained``: the implicit preconditions a grant's ``base_operation`` gives its paths;
    ``merged``: a merged bundle's bound old states (``promoter.engine.intake.merged``).
    ``document`` is the document ``bundle`` was parsed from (or ``bundle.wire()``). It is
    encoded once: its hash for check (1), its bytes for the caller.
    """
    encoded = bundle_bytes(dict(document), parsed=True)
    facts = Facts.of(bundle)
    checks: dict[CheckName, Callable[[], Outcome]] = {
        "manifest_integrity": lambda: check_manifest_integrity(encoded.sha256, bundle, facts),  # 1
        "blob_integrity": lambda: check_blob_integrity(bundle, blobs),  # (2)
        "grant_binding": lambda: check_grant_binding(bundle, grant),  # (3)
        "path_policy": lambda: check_path_policy(bundle, facts, grant, blobs, base),  # (4)
        "limits": lambda: check_limits(bundle, grant, facts),  # (5)
        "allowlist": lambda: check_allowlist(bundle, grant),  # (6)
        "preconditions": lambda: check_preconditions(
            bundle, grant, base, facts, chained, merged
        ),  # (7)
    }
    results = [(name, checks[name]()) for name in CHECK_ORDER]
    assert grant.grant_sha256 is not None  # a stored grant is sealed
    receipt = PatchVerificationReceiptV1(
        schema_="PatchVerificationReceiptV1",
        receipt_sha256=UNSEALED,
        bundle_id=bundle.bundle_id,
        bundle_sha256=bundle.bundle_sha256,
        grant_id=grant.grant_id,
        grant_sha256=grant.grant_sha256,
        executor_run_id=bundle.executor_run_id,
        repository_identity=bundle.repository_identity,
        status="passed" if all(o.passed for _, o in results) else "failed",
        checks=[
            Check(
                name=name,
                status="passed" if outcome.passed else "failed",
                evidence_sha256=sha256_hex(outcome.encode(outcome.evidence)),
                detail="" if outcome.passed else outcome.detail,
            )
            for name, outcome in results
        ],
    )
    codes: dict[str, str] = {name: outcome.code for name, outcome in results if not outcome.passed}
    sealed_receipt, _, receipt_bytes = sealed_canonical(receipt)
    return Verification(sealed_receipt, codes, encoded, receipt_bytes)
