"""The one state type every step is about, and the one classifier of what a path holds.

``State`` is ``{exists, sha256, mode}``: missing, or a regular file with this content
hash and git mode, or (mode ``120000``) a symbolic link whose target text hashes to
``sha256``. Bundles (``FileState``), preconditions (``StateSpec``), journaled steps
(their JSON), rollbacks and restores all speak it; ``State.of`` converts each of them,
``State.wire`` is the JSON form the journal and the reports carry.

``classify`` says what an observed leaf is relative to a step: exactly ``new``, exactly
``old``, or ``neither``, with the reason in words (``Reading``). New wins over old when a
step's old and new states are equal. Preflight, the read-back under the lock, recovery,
rollback, restore and the operation report all classify through it, so "what counts as
old" is decided here and nowhere else.

Deliberately not here: reading a leaf from disk (``promoter.fs``; anything with ``kind``,
``sha256`` and ``mode`` can be classified), and what to do about a verdict (the planners
of ``promoter.domain.plan``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Protocol, TypedDict

from promoter.domain.links import SYMLINK_MODE
from promoter.domain.record_type import record

__all__ = [
    "MISSING",
    "SYMLINK_MODE",
    "Observed",
    "ObservedWire",
    "Reading",
    "State",
    "StateLike",
    "StateWire",
    "Verdict",
    "classify",
    "holds",
    "leaf_kind",
    "observed",
]


class _Triple(Protocol):
    @property
    def exists(self) -> bool: ...
    @property
    def sha256(self) -> str | None: ...
    @property
    def mode(self) -> str | None: ...


class StateWire(TypedDict):
    """``State.wire``: the JSON form of a state in the journal and the reports."""

    exists: bool
    sha256: str | None
    mode: str | None


class ObservedWire(TypedDict):
    """``observed``: what a path reads as, with its kind (a receipt's ``ActualState``)."""

    exists: bool
    kind: str
    sha256: str | None
    mode: str | None
    bytes: int | None


@record(frozen=True)
class State:
    """The state a target must be in: missing, or a file (or a link) with this sha256 and mode."""

    exists: bool
    sha256: str | None
    mode: str | None

    @classmethod
    def of(cls, value: StateLike) -> State:
        """The state of a bundle ``FileState``, a ``StateSpec``, a journaled dict or a State."""
        if isinstance(value, State):
            return value
        if isinstance(value, Mapping):
            return cls(bool(value["exists"]), value.get("sha256"), value.get("mode"))
        return cls(bool(value.exists), value.sha256, value.mode)

    def wire(self) -> StateWire:
        return {"exists": self.exists, "sha256": self.sha256, "mode": self.mode}

    # the fs layer's name for the same report
    to_dict = wire


MISSING = State(False, None, None)


def leaf_kind(mode: str | None) -> str:
    """The kind of leaf a state's git mode names: ``symlink`` for 120000, else ``file``."""
    return "symlink" if mode == SYMLINK_MODE else "file"


StateLike = State | _Triple | Mapping[str, Any]


class Observed(Protocol):
    """What a path holds now, as the fs layer reads it (``promoter.fs.leaf.LeafState``)."""

    @property
    def kind(self) -> str: ...
    @property
    def sha256(self) -> str | None: ...
    @property
    def mode(self) -> str | None: ...


class Verdict(StrEnum):
    OLD = "old"
    NEW = "new"
    NEITHER = "neither"


class Finding(StrEnum):
    """What the read-back before a promotion finds at a target: its ``Verdict``, or why it
    may not be written (``drift``: something else differs; ``unsafe``: never touched)."""

    OLD = "old"
    NEW = "new"
    NEITHER = "neither"
    DRIFT = "drift"
    UNSAFE = "unsafe"


@record(frozen=True)
class Reading:
    """What ``classify`` found at a path: its verdict and why, in words."""

    verdict: Verdict
    reason: str  # in words: why it is neither, or which state it is exactly


def holds(found: Observed, state: State) -> bool:
    """True when ``found`` is exactly ``state``."""
    if not state.exists:
        return found.kind == "missing"
    kind = leaf_kind(state.mode)
    return found.kind == kind and found.sha256 == state.sha256 and found.mode == state.mode


def classify(found: Observed, old: StateLike, new: StateLike) -> Reading:
    """``new``, ``old`` or ``neither`` for ``found``, with the reason."""
    old, new = State.of(old), State.of(new)
    if holds(found, new):
        return Reading(Verdict.NEW, "exactly the new state")
    if holds(found, old):
        return Reading(Verdict.OLD, "exactly the old state")
    return Reading(Verdict.NEITHER, _why_neither(found, old, new))


def observed(found: Observed, size: int | None) -> ObservedWire:
    """What a path reads as, for reports: its kind, and content and mode for a file or link."""
    is_file = found.kind in ("file", "symlink")
    return {
        "exists": found.kind != "missing",
        "kind": found.kind,
        "sha256": found.sha256 if is_file else None,
        "mode": found.mode if is_file else None,
        "bytes": size if is_file else None,
    }


def _why_neither(found: Observed, old: State, new: State) -> str:
    if found.kind == "missing":
        return "the path is missing"
    wanted = [s for s in (old, new) if s.exists]
    if not wanted:
        if found.kind in ("file", "symlink"):
            return f"a {_word(found.kind)} is there"
        return f"the path is a {found.kind}, not a regular file"
    kinds = sorted({leaf_kind(s.mode) for s in wanted})
    if found.kind not in kinds:
        return f"the path is a {_word(found.kind)}, not a {' or a '.join(map(_word, kinds))}"
    if found.kind == "symlink" and not any(found.sha256 == s.sha256 for s in wanted):
        return "the link's target differs from both"
    if any(found.sha256 == s.sha256 for s in wanted):
        return f"the content matches but the mode is {found.mode}"
    return "the content differs from both"


def _word(kind: str) -> str:
    return {"file": "regular file", "symlink": "symbolic link"}.get(kind, kind)
