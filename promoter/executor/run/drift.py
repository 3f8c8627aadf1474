"""What ``promoter run`` does when a file the agent changed moved under the person.

``offer`` asks, after a drifted preflight a merge can mend, whether to merge; ``merged``
asks the host to merge a promotion refused ``target_drift`` (``promoter.engine.operation.merge``)
and then shows a clean merge and approves it when the person answered at the terminal,
writes a conflict into the run's directory (the rest then offered: ``rest.py``), or
shows the three sides of a file that is not text (protocol: runs#merges-are-new-bundles,
runs#merge-in-a-run). The merge and the approval go out under the ``person`` credential.

Not here: which promotion a refused step became (``promoter.executor.run.merged``),
the merge itself and its rules, the approval gate, and the promotion protocol,
which never merges (drift refuses).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from promoter.client.sync import PromoterClient
from promoter.domain.hidden import one_line, visible
from promoter.errors import (
    ConfigError,
    MergeConflict,
    MergeUnsupported,
    PromoterError,
    error_class,
)
from promoter.executor import sandbox as sandboxes
from promoter.executor.run import answers
from promoter.executor.run.merged import ROUNDS
from promoter.executor.run.person import Consent, Person, escape
from promoter.executor.run.state import Run, RunStatus

__all__ = ["CONFLICTS", "conflict_file", "merged", "offer", "person"]

CONFLICTS = "conflicts"  # under the run's directory: the marked files of a conflicted merge


def person(
    orch: PromoterClient,
    state_dir: Path,
    caller: Callable[[], Mapping[str, Any]] | None = None,
) -> PromoterClient:
    """The credential a person's merge and approval go out under (the one place it is read):
    the run's own when it is the person's operator credential
    (docs/decisions/persons-cli-credential.md), else the state directory's operator token.
    ``caller``: who the run's credential is, when the run asked already (else asked)."""
    if (caller or orch.whoami)().get("role") == "operator":
        return orch.with_token(orch.token)  # a client of its own: the caller closes it
    try:
        token = (state_dir / "credentials" / "operator.token").read_text("utf-8").strip()
    except OSError:
        token = ""
    if not token:
        raise ConfigError(
            f"no operator credential in {state_dir}/credentials: the merge needs one "
            "(promoter merge OP with --token-file)"
        )
    return orch.with_token(token)


def _mendable(report: Mapping[str, Any]) -> list[str]:
    """The drifted paths a merge could mend: none when HEAD, branch or tree moved."""
    if not all(fact.get("ok", True) for fact in (report.get("repository") or {}).values()):
        return []
    paths = report.get("paths") or []
    drifted = [p for p in paths if p.get("verdict") in ("drift", "unsafe")]
    if any(
        p.get("verdict") == "unsafe"
        or p.get("operation") != "modify"  # only a text edit merges
        or p.get("index_actual") != p.get("index_expected")  # staged: the index is the person's
        for p in drifted
    ):
        return []
    return [str(p["path"]) for p in drifted]


Gate = Callable[[], str]
"""What a yes does under the approval gate (``flow._gate``), read only for a question asked."""


def _no_gate() -> str:
    return ""


def _question(paths: list[str], gate: Gate) -> str:
    """The merge's question, with what a yes does under the approval gate said first, as
    the plain question says it."""
    named = ", ".join(map(visible, paths[:3]))
    named += f" and {len(paths) - 3} more" if len(paths) > 3 else ""
    asked = f"{named} changed since the run began: merge your edit and the agent's?"
    said = gate()
    return f"{said}. {asked}" if said else asked


_NO_TERMINAL = "not a terminal: pass --yes to merge and promote without asking"


def offer(
    preflight: Mapping[str, Any],
    record: sandboxes.RunRecord,
    bundle_id: str,
    person: Person,
    *,
    gate: Gate = _no_gate,
) -> Consent:
    """The consent to request a drifted promotion so that it can be merged, or the refusal
    (``gate``: what a yes does under the approval gate, said with the question)."""
    paths = _mendable(preflight) if preflight.get("code") == "target_drift" else []
    if not paths or record.start_tree is None:  # --from-head: the file was yours before
        raise answers.refusal(preflight, record, bundle_id, person)
    answers.drift_report(preflight, person)
    consent = person.agree(_question(paths, gate), no_terminal=_NO_TERMINAL)
    if consent is None:  # the drift was shown above the question: not told twice
        raise answers.refusal(preflight, record, bundle_id, person, told=True)
    return consent


def conflict_file(record: sandboxes.RunRecord, operation_id: str, path: str) -> Path:
    """Where the marked text of ``path`` goes: the run's directory, never the worktree."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ConfigError(f"not a bundle path: {path!r}")
    return Path(record.clone).parent / CONFLICTS / operation_id / Path(*parts)


def _write_marked(target: Path, text: str) -> None:
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(target, flags, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(text.encode("utf-8", errors="surrogateescape"))


def _conflict(
    exc: MergeConflict, record: sandboxes.RunRecord, operation_id: str, person: Person
) -> None:
    written: list[str] = []
    for item in exc.context.get("paths") or []:
        if item.get("result") != "conflict" or item.get("merged_text") is None:
            continue
        target = conflict_file(record, operation_id, str(item["path"]))
        _write_marked(target, str(item["merged_text"]))
        cut = " (cut: the text is longer)" if item.get("truncated") else ""
        person.say(
            f"conflict: {escape(one_line(str(item['path'])))}: {item.get('conflicts')} conflicting "
            f"hunk(s); both edits with markers in {escape(str(target))}{cut}"
        )
        written.append(str(item["path"]))
    person.say("nothing in your worktree changed")
    nxt = (
        f"resolve the markers and save the result as {', '.join(written)} yourself, then "
        f"start again from your files as they are: promoter run --repo {record.repository} "
        f"-- CMD (the conflict again: promoter merge {operation_id})"
    )
    exc.detail = f"{exc.detail}; next: {nxt}"  # said once, as the error's last words


def _unsupported(exc: MergeUnsupported, person: Person) -> None:
    for item in exc.context.get("paths") or []:
        sides = ", ".join(
            f"{name} {str(item[name].get('sha256') or '-')[:12]} {item[name].get('bytes')} bytes"
            for name in ("old", "current", "new")
        )
        person.say(
            f"not merged: {escape(one_line(str(item['path'])))}: {escape(item.get('reason') or '')}"
        )
        person.say(f"  {escape(sides)}")


def _drift_report(orch: PromoterClient, operation_id: str) -> dict[str, Any]:
    view = orch.get_operation(operation_id)
    report: dict[str, Any] = (view.get("report") or {}).get("drift_report") or {}
    return report


def _refused(
    report: Mapping[str, Any],
    view: Mapping[str, Any],
    run: Run,
    step: sandboxes.Step,
    person: Person,
    *,
    told: bool = False,
) -> PromoterError:
    """The refused promotion as the preflight's refusal: every drifted path (unless
    ``told`` above the question the person declined), the next step."""
    base = answers.moved(report)
    run.move(step, RunStatus.REFUSED, code="target_drift" if base is None else "base_moved")
    operation_id = str(view["operation_id"])
    later = "" if base else f" (the merge later: promoter merge {escape(operation_id)})"
    person.warn(f"operation {escape(operation_id)} was refused: nothing was written{later}")
    preflight = {**report, "code": "target_drift", "detail": view.get("detail")}
    return answers.refusal(preflight, run.record, str(step.bundle_id), person, told=told)


def merged(
    orch: PromoterClient,
    run: Run,
    step: sandboxes.Step,
    view: Mapping[str, Any],
    person: Person,
    *,
    consent: Consent,
    agreed: bool,
    note: str,
    gate: Gate = _no_gate,
    caller: Callable[[], Mapping[str, Any]] | None = None,
) -> Mapping[str, Any] | None:
    """``view`` unless it is a promotion refused ``target_drift``: then the merge's outcome
    (the approved merged promotion's view, or None when it waits for an approval);
    ``gate``: what a yes does under the approval gate, said with the question; ``caller``:
    who the run's credential is, as the run asked it (``person``)."""
    for _ in range(ROUNDS):
        if (view.get("status"), view.get("code")) != ("refused", "target_drift"):
            return view
        operation_id = str(view["operation_id"])
        report = _drift_report(orch, operation_id)
        paths = _mendable(report)
        if not paths or run.record.start_tree is None:  # --from-head: the file was yours
            raise _refused(report, view, run, step, person)
        if not agreed:
            answers.drift_report(report, person)
            if person.agree(_question(paths, gate), no_terminal=_NO_TERMINAL) is None:
                raise _refused(report, view, run, step, person, told=True)
        agreed = False  # a new save after this merge is asked about again
        outcome = _merge_once(orch, run, step, operation_id, person, consent, note, caller)
        if outcome is None:
            return None
        view = outcome
    return view


def _merge_once(
    orch: PromoterClient,
    run: Run,
    step: sandboxes.Step,
    operation_id: str,
    who: Person,
    consent: Consent,
    note: str,
    caller: Callable[[], Mapping[str, Any]] | None,
) -> Mapping[str, Any] | None:
    record = run.record
    with person(orch, run.state_dir, caller) as merger:
        try:
            result = merger.merge(operation_id)
        except MergeConflict as exc:
            run.move(step, RunStatus.MERGE_CONFLICT)
            _conflict(exc, record, operation_id, who)
            raise
        except MergeUnsupported as exc:
            run.move(step, RunStatus.MERGE_UNSUPPORTED)
            _unsupported(exc, who)
            raise
        who.say(
            f"merged your edit and the agent's into bundle [bold]{result['bundle_id']}[/] "
            f"(from {result['merged_from']}); nothing in your worktree changed yet"
        )
        step.bundle_id = str(result["bundle_id"])  # saved with the move below
        run.merged = True  # the sandbox holds the agent's file, not the merged one
        who.review(None, orch.bundle_diff(step.bundle_id), None, hint=None)
        held = result["promotion"]
        if held["operation_id"] is None:
            run.move(step, RunStatus.MERGE_NOT_HELD)
            raise error_class(str(held["code"]))(
                f"the merged bundle {step.bundle_id} is not held for approval: {held['detail']}"
            )
        held_id = str(held["operation_id"])
        if held["status"] != "awaiting_approval" or consent != "asked":
            run.move(step, str(held["status"]), operation_id=held_id)
            who.say(
                f"the merge waits for approval: promoter review {held_id}, then "
                f"promoter approve {held_id}"
            )
            return None
        run.move(step, step.status, operation_id=held_id)  # the held operation, named
        return merger.approve(held_id, note, wait=True)
