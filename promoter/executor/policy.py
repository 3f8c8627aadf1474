"""The executor's own look at a candidate bundle before anything leaves the sandbox.

This module owns the local refusals of ``bundle build``: the path rules
(protocol: documents#path-rules) and the grant's allowlist, explicit preconditions and limits
(protocol: grants#grant), each applied to every change so that one refusal names every offending
path at once. It mirrors the host's verification checks (4) to (7) so that an honest executor learns
about a problem before uploading a single blob; the host still verifies everything itself.

Pure: no I/O, no pydantic (a grant is a model or a ``GrantRecord``). It deliberately does
not compute changes (``builder.py`` does) and does not decide whether a path is safe on
disk (symlinks, gitlinks and nested repositories are refused by the builder from what git
reports).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from promoter.domain import allowlist
from promoter.domain.paths import check_path, check_path_set, wire_path
from promoter.errors import PathInvalid, PromoterError, VerificationFailed

if TYPE_CHECKING:
    from promoter.domain.bundle_records import ChangeRecord, Grant, StateLike

__all__ = ["check_changes", "check_paths", "describe_state", "printable"]

_SHOWN = 10


def _listing(items: Sequence[str]) -> str:
    more = len(items) - _SHOWN
    return "; ".join(items[:_SHOWN]) + (f"; and {more} more" if more > 0 else "")


def describe_state(state: StateLike) -> str:
    """A short human form of a state: ``missing`` or ``100644 sha256:1a2b3c4d…``."""
    if not state.exists:
        return "missing"
    return f"{state.mode} sha256:{(state.sha256 or '')[:12]}"


def printable(path: str) -> str:
    """The wire form (protocol: documents#byte-paths) of a disk-form path, as bundles and reports
    name it."""
    return wire_path(path)


def check_paths(paths: Sequence[str]) -> None:
    """``PathInvalid`` naming every path that breaks the path rules
    (protocol: documents#path-rules)."""
    offending: list[dict[str, str]] = []
    for path in paths:
        try:
            check_path(path)
        except PathInvalid as exc:
            offending.append({"path": path, "reason": exc.detail})
    if not offending:
        try:
            check_path_set(paths)
        except PathInvalid as exc:
            offending.append(
                {
                    "path": str(exc.context.get("path")),
                    "reason": f"{exc.detail}: {exc.context.get('other')!r}",
                }
            )
    if offending:
        raise PathInvalid(
            "paths in the worktree break the path rules: "
            + _listing([f"{item['path']!r}: {item['reason']}" for item in offending]),
            paths=offending,
        )


def _allowed(change: ChangeRecord, grant: Grant) -> bool:
    for entry in grant.write_allowlist:
        try:
            hit = allowlist.matches(entry.pattern, change.path)
        except PromoterError:
            hit = False
        if hit and change.operation in entry.operations:
            return True
    return False


def check_changes(changes: Sequence[ChangeRecord], grant: Grant) -> None:
    """``VerificationFailed`` listing every change the grant does not authorize.

    Allowlist: some entry matches the path and lists the operation. Preconditions: a
    changed path with an explicit precondition must have exactly that old state (the
    executor's old states come from ``base_tree``, so a precondition naming another
    state cannot be met from this worktree). Limits: the change count and the new
    states' bytes.
    """
    explicit = {p.path: p.old for p in grant.target_preconditions}
    violations: list[dict[str, Any]] = []
    for change in changes:
        if not _allowed(change, grant):
            violations.append(
                {
                    "path": change.path,
                    "check": "allowlist",
                    "reason": f"{change.operation} is not allowed by the grant's allowlist",
                }
            )
        spec = explicit.get(change.path)
        if spec is not None and not change.old.same_content(spec):
            violations.append(
                {
                    "path": change.path,
                    "check": "preconditions",
                    "reason": f"the grant's precondition names old state "
                    f"{describe_state(spec)}, the base tree has {describe_state(change.old)}",
                }
            )
    count = len(changes)
    total = sum(c.new.bytes or 0 for c in changes if c.new.exists)
    if count > grant.limits.max_changes:
        violations.append(
            {
                "path": None,
                "check": "limits",
                "reason": f"{count} changes exceed the grant's limit of {grant.limits.max_changes}",
            }
        )
    if total > grant.limits.max_total_bytes:
        violations.append(
            {
                "path": None,
                "check": "limits",
                "reason": f"{total} bytes exceed the grant's limit of "
                f"{grant.limits.max_total_bytes}",
            }
        )
    if violations:
        lines = [
            f"{item['path']}: {item['reason']}" if item["path"] else item["reason"]
            for item in violations
        ]
        raise VerificationFailed(
            "the grant does not authorize these changes: " + _listing(lines),
            violations=violations,
        )
