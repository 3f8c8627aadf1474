"""What ``promoter run`` does when the merge of the person's edit and the agent's conflicts.

The conflicted files are named and their marked text written into the run's directory
(``drift.py``); the agent's other changes do not conflict. ``offer`` asks, at a terminal,
"Promote the rest, without PATH?"; yes answers the paths to leave out, and ``build``
builds the rest from the sandbox against the step's grant as any bundle
(``layered.build`` with ``leave_out``: the host verifies it as any bundle, and it goes
through the review, the question and the approval gate as any bundle). The step records
the paths it left out (``left_out``) and the sandbox is kept after the promotion
(``links.keep_sandbox``), the agent's versions in it. No, ``--yes`` or no terminal (a
part is never promoted unasked): the conflict's refusal, which names the rest and how to
promote it later at a terminal (``promoter run --continue RUN -- true``: a new step builds
the whole change again, and its conflict offers the rest). Nothing is asked when no
other change is left (docs/decisions/the-rest-of-a-conflicted-merge.md).

Deliberately not here: the merge and its marked files (``drift.py``), the step's
states and the promotion of the rest (``flow.py``), a refused link (``links.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from promoter.domain.hidden import one_line
from promoter.errors import MergeConflict, PathUnsafe
from promoter.executor.run.person import Person, escape

if TYPE_CHECKING:
    from promoter.domain.bundle_records import Grant, StateLike
    from promoter.executor import sandbox as sandboxes
    from promoter.executor.builder import BuiltBundle
    from promoter.executor.run.state import Run

__all__ = ["build", "conflicted", "offer"]


def conflicted(exc: MergeConflict) -> list[str]:
    """The paths a conflicted merge could not merge, as its answer names them."""
    return [
        str(item["path"])
        for item in exc.context.get("paths") or []
        if item.get("result") == "conflict"
    ]


def _listed(paths: Sequence[str]) -> str:
    """``paths`` as words: the first three (their hidden characters and line breaks
    shown), then how many more."""
    named = ", ".join(map(one_line, paths[:3]))
    return named + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def _named(paths: Sequence[str]) -> str:
    return escape(_listed(paths))


def offer(
    exc: MergeConflict,
    run: Run,
    step: sandboxes.Step,
    bundle: Mapping[str, Any],
    person: Person,
    *,
    ask: bool = True,
) -> list[str] | None:
    """The paths to leave out of the rest of ``bundle`` (the step's own left out too) when
    the person says yes to it; else None, and ``exc``'s next step names the rest and how
    to promote it later (``ask``: whether the rest can be built here; a step that holds
    no executor credential, ``--continue RUN`` without CMD, only says so). None, with
    nothing said, when no change but the conflicted ones is left."""
    paths = conflicted(exc)
    out = set(paths) | set(step.left_out)
    rest = [str(c["path"]) for c in bundle.get("changes") or [] if str(c["path"]) not in out]
    if not paths or not rest:
        return None
    if ask and person.agree_to_part(f"Promote the rest, without {_named(paths)}?"):
        return [*step.left_out, *paths]
    later = f"promoter run --continue {run.run_id}{run.options()} -- true"
    exc.detail = (
        f"{exc.detail}; the agent's other changes ({_listed(rest)}) stay in the sandbox: "
        f"promote them without {_listed(paths)} at a terminal: {later}"
    )
    return None


def build(
    run: Run,
    step: sandboxes.Step,
    grant: Grant,
    since: Mapping[str, StateLike] | None,
    leave_out: list[str],
    person: Person,
) -> BuiltBundle:
    """The rest: the sandbox's bundle against ``grant`` without ``leave_out``, refused
    (``path_unsafe``) if it holds one of them after all; recorded on the step
    (``left_out``, saved with its next move). The caller closes it."""
    from promoter.executor import layered  # the builder: loaded by a run, not by --list

    record = run.record
    built = layered.build(record, grant, since=since, leave_out=frozenset(leave_out))
    held = [str(c["path"]) for c in built.bundle["changes"] if str(c["path"]) in leave_out]
    if held:  # a path the builder names otherwise than the host: never promoted unasked
        built.close()
        raise PathUnsafe(
            f"the rest still holds {', '.join(held)}, which it leaves out; nothing was "
            f"submitted; the sandbox is kept: {record.clone}",
            paths=[{"path": p, "reason": "left out of the rest"} for p in held],
        )
    step.left_out = list(leave_out)
    person.say(
        f"the rest, without {_named(leave_out)} (yours stays as it is; the agent's is kept "
        f"in the sandbox {escape(record.clone)}):"
    )
    return built
