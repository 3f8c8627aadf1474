"""What ``promoter run`` does when the grant's symlink policy refuses a link the agent made.

A run's grant says which symbolic links a bundle may carry (``symlinks``: ``none``, the
default; ``inside``: links whose target stays in the worktree and out of ``.git``;
``any``), set by ``promoter run --symlinks``. When the sandbox holds a link the policy
refuses, ``build`` names each refused link with the grant's policy and the setting that
allows it, and offers the rest: on a terminal it asks "Promote the rest, without
PATH?"; yes builds the bundle without the refused links (the rest then goes through
the review and the question as any bundle), records them on the step (``left_out``)
and keeps the sandbox after the promotion, so the links stay where the agent made them
(``promoter run --continue RUN --symlinks inside -- true`` hands them in later). No, no
terminal, or ``--yes`` (a part is never promoted unasked): the refusal, every link named,
with the next commands, raised; nothing is submitted (``flow.py`` ends the step
``refused``, the sandbox and its links kept, as for any refused bundle).

Deliberately not here: the policy itself (``promoter.domain.links``, checked again by
the host's verification), any other refusal of the builder, which is raised as it
came, and the step's state (``flow.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from promoter.domain.hidden import one_line
from promoter.errors import ConfigError, PathUnsafe, PromoterError, VerificationFailed
from promoter.executor.run.person import Person, escape

if TYPE_CHECKING:
    from collections.abc import Mapping

    from promoter.domain.bundle_records import Grant, StateLike
    from promoter.executor import sandbox as sandboxes
    from promoter.executor.builder import BuiltBundle
    from promoter.executor.run.state import Run

__all__ = ["POLICIES", "build", "keep_sandbox", "policy"]

POLICIES = ("none", "inside", "any")
_WIDER = {"none": "inside", "inside": "any"}


def policy(value: str) -> str:
    """The ``--symlinks`` value, checked."""
    if value not in POLICIES:
        raise ConfigError(f"--symlinks must be one of {', '.join(POLICIES)}, not {value!r}")
    return value


def _refused_links(exc: PromoterError) -> list[dict[str, Any]] | None:
    """The refused links of a builder refusal, or None when anything else is refused too."""
    paths = list(exc.context.get("paths") or [])
    if not paths:
        return None
    if isinstance(exc, PathUnsafe):
        links = [p for p in paths if "symbolic link" in str(p.get("reason"))]
    elif isinstance(exc, VerificationFailed) and "symlink policy" in exc.detail:
        links = [p for p in paths if "target" in p]
    else:
        return None
    return links if len(links) == len(paths) else None


def _explain(links: list[dict[str, Any]], grant: Grant, run: Run, person: Person) -> str:
    wider = _WIDER.get(grant.symlinks, "any")
    for item in links:
        target = f" -> {item['target']!r}" if item.get("target") is not None else ""
        person.say(
            f"refused link: {escape(one_line(str(item['path'])))}{escape(one_line(target))}: "
            f"{escape(str(item.get('reason')))}"
        )
    again = run.options(but="--symlinks")  # the step's others, as it was given them
    allow = f"promoter run --continue {run.run_id}{again} --symlinks {wider} -- true"
    person.say(
        f"the grant's policy is symlinks: {grant.symlinks}; --symlinks {wider} on promoter "
        f"run allows {'links that stay inside the worktree' if wider == 'inside' else 'any link'}"
        f" ({escape(allow)})"
    )
    return allow


def build(
    run: Run,
    step: sandboxes.Step,
    grant: Grant,
    since: Mapping[str, StateLike] | None,
    person: Person,
) -> BuiltBundle:
    """The sandbox's bundle; with refused links, the rest when the person says so (else
    the refusal raised, with the next commands)."""
    from promoter.executor import layered  # the builder: loaded by a run, not by --list

    record = run.record
    try:
        return layered.build(record, grant, since=since)
    except (PathUnsafe, VerificationFailed) as exc:
        links = _refused_links(exc)
        if links is None:
            raise
        allow = _explain(links, grant, run, person)
        paths = [str(item["path"]) for item in links]
        if not person.agree_to_part(f"Promote the rest, without {', '.join(paths)}?"):
            exc.detail = (
                f"{exc.detail}; the grant's policy is symlinks: {grant.symlinks}; next: allow "
                f"them with {allow}, or promote the rest without them at a terminal: "
                f"promoter run --continue {record.run_id}{run.options()} -- true"
            )
            raise
    step.left_out = paths  # saved with the step's next move (submitted or no_changes)
    built = layered.build(record, grant, since=since, leave_out=frozenset(paths))
    person.say(
        f"the rest, without {escape(', '.join(paths))} (kept in the sandbox {record.clone}):"
    )
    return built


def keep_sandbox(record: sandboxes.RunRecord) -> bool:
    """Whether the last step left paths out (refused links, or files whose merge conflicted:
    ``rest.py``): its sandbox stays, the agent's versions in it."""
    return bool(record.steps and record.steps[-1].left_out)
