"""A run's record and the one way its steps change state: one save per move.

``Run`` holds a run's record (``promoter.executor.sandbox.RunRecord``) and its state
directory. ``begin`` records a new step, ``move`` moves one: the move is checked against
``status.TRANSITIONS`` (``check_move``), the step's fields are set, and ``run.json`` is
written once (``sandbox.save``); a move that changes nothing writes nothing. A run made
in this process also holds what its start looked up (``Known``: the repository as the
daemon listed it, the worktree's layout), which its first step uses instead of looking
them up again; it is never saved. ``promoting`` names the bundle whose promotion was
asked of the host and not yet answered (never saved): a Ctrl-C then cannot say nothing
was promoted.

Deliberately not here: the statuses and their table (``status.py``), what makes a step
move (``flow.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from promoter.executor import sandbox
from promoter.executor.run.status import FINAL, PROMOTABLE, TRANSITIONS, RunStatus, check_move
from promoter.executor.sandbox import RunRecord, Step

if TYPE_CHECKING:
    from promoter.domain.answers import RepositoryInfo
    from promoter.git.layout import RepoLayout

__all__ = ["FINAL", "PROMOTABLE", "TRANSITIONS", "Known", "Run", "RunStatus", "check_move"]


class Known(NamedTuple):
    """What a new run's start looked up, moments before its first step: the repository
    as the daemon listed it (``flow.locate``) and the worktree's layout (None: it could
    not be discovered)."""

    repository: RepositoryInfo
    layout: RepoLayout | None


class Run:
    """A run's record and where it is kept; every change of a step's state goes through
    ``begin`` (a new step) or ``move``, each one write of ``run.json``."""

    __slots__ = ("again", "known", "merged", "promoting", "record", "state_dir")

    def __init__(self, state_dir: Path, record: RunRecord, known: Known | None = None) -> None:
        self.state_dir = state_dir
        self.record = record
        self.known = known
        """Set by ``flow.start`` for its first step (``take_known``); never saved."""
        self.again: tuple[str, ...] = ()
        """The options this step was given that the record does not hold (``--keep``,
        ``--unconfined``, the limits, ...: ``promoter.cli.run_args.REPEATED``): a next
        command it names repeats them, so that step runs as this one did; never saved."""
        self.merged = False
        """This step's bundle was merged with the person's edit (``drift.py``): the sandbox
        does not hold what is promoted, so no step goes on in it; never saved."""
        self.promoting: str | None = None
        """The bundle whose promotion request is out, unanswered (``flow.promote``)."""

    def options(self, *, but: str = "") -> str:
        """``again`` as the words a named ``promoter run --continue RUN`` carries (each
        quoted for a shell, each after a space), without the valued option ``but`` (one
        the remedy itself gives)."""
        import shlex  # the words of a remedy only

        words, given = [], iter(self.again)
        for word in given:
            if word == but:  # a valued option: its value goes with it
                next(given, None)
                continue
            words.append(f" {shlex.quote(word)}")
        return "".join(words)

    def take_known(self) -> Known | None:
        """What the start looked up, once: a later step of the run looks up again."""
        known, self.known = self.known, None
        return known

    @property
    def run_id(self) -> str:
        return str(self.record.run_id)

    @property
    def last(self) -> Step | None:
        return self.record.steps[-1] if self.record.steps else None

    def begin(self, step: Step) -> None:
        """Record a new step, ``started``."""
        step.status = check_move(None, RunStatus.STARTED)
        self.record.steps.append(step)
        self._save()

    def move(self, step: Step, status: str, **fields: Any) -> None:
        """Move ``step`` to ``status`` with ``fields`` set; saved once, or not at all when
        neither the status nor a field changed. A move to another status clears the code
        of the last one unless ``fields`` names one."""
        new = check_move(step.status, status)
        if new != step.status and "code" not in fields:
            fields["code"] = None  # a code says why the step ended where it was, no further
        changed = new != step.status or any(getattr(step, k) != v for k, v in fields.items())
        step.status = new
        for key, value in fields.items():
            setattr(step, key, value)
        if changed:
            self._save()

    def _save(self) -> None:
        sandbox.save(self.state_dir, self.record)
