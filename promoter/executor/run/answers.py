"""What ``promoter run`` tells a person and asks the host between its steps.

This module owns four small answers of the run's workflow (``flow.py``): the grant
preconditions of a step (the person's captured state, ``start_state``, with the states a
chain's completed promotions left at the paths they wrote), the environment an agent in
the sandbox gets to build against that state and to leave word of its own submission,
the adoption of the bundle the agent submitted (``agent_bundle``: promoted instead of a
new one only when the sandbox, rebuilt with the same creation time, gives the very same
``bundle_sha256``), and a refusal a person can act on (every drifted path with what it
reads now and what was expected, or how HEAD moved: ``base_moved``, and the next command
to try).

Deliberately not here: registering grants, promoting, or deciding anything the host
decides; the pointer file an agent writes is never trusted for content.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promoter.client.sync import PromoterClient
from promoter.domain.hidden import one_line, visible
from promoter.errors import BaseMoved, PromoterError, error_class
from promoter.executor import layers
from promoter.executor.run.person import Person, escape

if TYPE_CHECKING:
    from promoter.domain.bundle_records import Grant, StateLike
    from promoter.domain.models import PatchVerificationReceiptV1
    from promoter.executor import sandbox as sandboxes

__all__ = [
    "agent_bundle",
    "agent_env",
    "chained_preconditions",
    "drift_report",
    "refusal",
    "started",
]

SUBMITTED = "promoter-submitted.json"
_POINTER_BYTES = 4096


def started(record: sandboxes.RunRecord) -> str:
    """The line that says where the sandbox is and what it started from."""
    line = f"sandbox {record.run_id}: {record.clone} at {record.base_commit[:12]} ({record.layout})"
    if record.start_tree is None:
        return line + " (HEAD only)"
    count = len(record.preconditions)
    line += (
        f", with your {count} uncommitted path(s)"
        if count
        else ", with no uncommitted change of yours"
    )
    for item in record.skipped:
        line += f"\n  {escape(one_line(item['path']))}: {escape(one_line(item['reason']))}"
    return line


def chained_preconditions(orch: PromoterClient, record: sandboxes.RunRecord) -> list[Any]:
    """The next step's preconditions: a path a completed step wrote has that step's state.

    The person's index entry stays what was captured (a promotion never writes the
    index); the old state of a path the chain wrote is the chain's newest read-back.
    """
    if not record.preconditions:
        return []
    written: dict[str, dict[str, Any]] = {}
    for step in record.steps:
        if step.status == "completed" and step.operation_id:
            receipt = json.loads(orch.get_receipt(step.operation_id))
            for target in receipt["targets"]:
                written[str(target["path"])] = {
                    "exists": bool(target["exists"]),
                    "sha256": target.get("sha256") if target["exists"] else None,
                    "mode": target.get("mode") if target["exists"] else None,
                }
    return [
        {**item, "old": written[item["path"]]} if item["path"] in written else item
        for item in record.preconditions
    ]


def _pointer(record: sandboxes.RunRecord) -> Path:
    return Path(record.clone) / ".git" / SUBMITTED


def agent_env(record: sandboxes.RunRecord) -> dict[str, str]:
    """Variables for the command: the start tree, and where a submission is recorded."""
    env = {"PROMOTER_SUBMITTED_FILE": str(_pointer(record))}
    if record.start_tree is not None:
        env["PROMOTER_START_TREE"] = record.start_tree
    return env


def _host_pointer(record: sandboxes.RunRecord) -> Path | None:
    """Where the host reads the pointer: in the clone, or through an overlay's layers."""
    if record.layout != "overlay":
        return _pointer(record)
    from promoter.executor import upper  # the bundle models: loaded by a run only

    box, _ = upper.run_layers(record.clone, record.base_tree)
    found = layers.resolve(box.all(), f".git/{SUBMITTED}")
    return None if found is None else Path(os.fsdecode(found[0]))


def _read_pointer(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, _POINTER_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        loaded = json.loads(data)
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) else None


def agent_bundle(
    client: PromoterClient,
    record: sandboxes.RunRecord,
    grant: Grant,
    since: Mapping[str, StateLike] | None,
    person: Person,
) -> tuple[dict[str, Any], PatchVerificationReceiptV1] | None:
    """The bundle the command submitted for ``grant``, when the sandbox still gives it.

    The sandbox is rebuilt with the submitted bundle's ``created_at``; the bundle is
    adopted only when the rebuilt ``bundle_sha256`` is the submitted one and its
    verification passed. Otherwise None (and a new bundle is built and submitted).
    """
    pointer = _read_pointer(_host_pointer(record))
    if pointer is None or pointer.get("grant_id") != grant.grant_id:
        return None
    bundle_id = pointer.get("bundle_id")
    if not isinstance(bundle_id, str):
        return None
    try:
        submitted = client.get_bundle(bundle_id)
        receipt = client.get_verification(bundle_id)
    except PromoterError as exc:
        person.warn(f"the command's bundle {escape(bundle_id)} is not usable: {exc.detail}")
        return None
    if submitted.grant_id != grant.grant_id or receipt.status != "passed":
        return None
    wire = submitted.wire()
    from promoter.executor import layered  # the builder: loaded by a run only

    with layered.build(record, grant, since=since, created_at=str(wire["created_at"])) as built:
        if built.bundle_sha256 != submitted.bundle_sha256:
            person.warn(
                f"the sandbox changed after the command submitted {escape(bundle_id)}: "
                "a new bundle is built from it"
            )
            return None
    return wire, receipt


def _state(value: Any) -> str:
    if not isinstance(value, dict):
        return "unknown"
    if "error" in value:
        return f"unreadable ({value['error']})"
    if not value.get("exists"):
        return "missing"
    sha = str(value.get("sha256") or "")[:12]
    size = value.get("bytes", value.get("size"))
    return f"{value.get('mode')} sha256:{sha}" + (f" ({size} bytes)" if size is not None else "")


def drift_report(
    preflight: Mapping[str, Any], person: Person, *, tell: bool = True
) -> list[dict[str, Any]]:
    """Every drifted path with what it reads now and what was expected, told unless
    ``tell`` is false (the person saw it above the question); the list."""
    drifted = [p for p in preflight.get("paths") or [] if p.get("verdict") in ("drift", "unsafe")]
    report: list[dict[str, Any]] = []
    for item in drifted:
        path = str(item.get("path"))
        now, expected = _state(item.get("actual")), _state(item.get("expected_old"))
        reasons = "; ".join(item.get("reasons") or [])
        line = f"{visible(path)}: reads {now} now, expected {expected} ({reasons})"
        if tell:
            person.warn(f"drifted: {escape(line)}")
        report.append(
            {"path": path, "actual": item.get("actual"), "expected": item.get("expected_old")}
        )
    return report


def moved(report: Mapping[str, Any]) -> str | None:
    """How HEAD moved (``from abc123456789 to def123456789``; its branch or tree when
    those are what differ) when a preflight's or a refused promotion's read-back says the
    repository is not at the grant's base; None when it is (only paths drifted)."""
    facts = report.get("repository") or {}
    for name in ("head", "branch", "tree"):
        fact = facts.get(name) or {}
        if not fact.get("ok", True):
            what = "" if name == "head" else f"(its {name}) "
            cut = None if name == "branch" else 12  # a commit or tree by its prefix
            was, now = fact.get("expected"), fact.get("actual")
            shown = visible(str(now)[:cut]) if now else "nothing"
            return f"{what}from {visible(str(was)[:cut])} to {shown}"
    return None


def refusal(
    preflight: Mapping[str, Any],
    record: sandboxes.RunRecord,
    bundle_id: str,
    person: Person,
    *,
    told: bool = False,
) -> PromoterError:
    """The preflight's refusal as an error naming every drifted path, told as well unless
    ``told`` (the drift was shown above a question the person declined)."""
    nxt = (
        "start again from your files as they are now: "
        f"promoter run --repo {record.repository} -- CMD"
    )
    if (base := moved(preflight)) is not None:
        return BaseMoved(
            f"{record.repository}'s HEAD moved {base} since run {record.run_id} began: its "
            "change was made against a base that no longer is HEAD; nothing was written; "
            f"next: {nxt}",
            bundle_id=bundle_id,
        )
    report = drift_report(preflight, person, tell=not told)
    detail = str(preflight.get("detail") or "the preflight refused the promotion")
    if report:
        named = ", ".join(visible(item["path"]) for item in report)
        detail = f"{named} changed since the run began (shown above); nothing was written"
    code = str(preflight.get("code") or "target_drift")
    return error_class(code)(f"{detail}; next: {nxt}", paths=report, bundle_id=bundle_id)
