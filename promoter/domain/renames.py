"""Which deletes and creates of a bundle are renames, for review.

A bundle never carries a rename: the protocol has a delete of the old path and a create
of the new one, and so do the plan, the journal and the receipt. A reviewer, though,
should see a moved file as a move, with only the lines it changed. ``pairs`` finds them:

1. exact: a deleted path and a created path with the same content (sha256) and the same
   kind (a link pairs only with a link); such a pair is also what partial approval keeps
   together (``exact_groups``, ``promoter.engine.review.partial``);
2. similar (git's rule, ``diff -M``, 50 % by default): of the rest, a deleted and a
   created text file whose similarity is at least ``THRESHOLD`` percent, the best
   pairs first. The similarity is the bytes of the lines the two share, in order (a
   longest matching of lines, ``difflib``), over the larger side's bytes, rounded down:
   100 only for equal content. Only files of at most ``max_bytes`` on both sides and at
   most ``MAX_CANDIDATES`` deletes and creates are compared (bounded work); past that,
   exact pairs only.

Each path is in one pair at most; ties go to the lexically smaller paths, so the same
bundle always gives the same pairs.

Deliberately not here: reading blobs (``content`` is passed in) or rendering a diff.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from promoter.domain.models import Change

__all__ = ["MAX_CANDIDATES", "THRESHOLD", "Rename", "exact_groups", "pairs", "similarity"]

THRESHOLD = 50  # percent, as git's default
MAX_CANDIDATES = 64  # deletes and creates each compared for similarity (else: exact only)


@dataclass(frozen=True)
class Rename:
    source: str  # the deleted path
    target: str  # the created path
    similarity: int  # percent, 100 for the same content


def _link(mode: str | None) -> bool:
    return mode == "120000"


def exact_groups(changes: Iterable[Change]) -> list[list[str]]:
    """Paths that are a rename by content: for each content both deleted and created (not
    empty), its deleted and created paths, sorted."""
    deleted: dict[str, list[str]] = {}
    created: dict[str, list[str]] = {}
    for change in changes:
        if change.operation == "delete" and change.old.bytes:
            deleted.setdefault(str(change.old.sha256), []).append(change.path)
        elif change.operation == "create" and change.new.bytes:
            created.setdefault(str(change.new.sha256), []).append(change.path)
    return [
        sorted(sources + created[digest])
        for digest, sources in sorted(deleted.items())
        if created.get(digest)
    ]


def similarity(old: bytes, new: bytes) -> int:
    """Percent of the larger side's bytes that are lines both share, in order."""
    if old == new:
        return 100
    larger = max(len(old), len(new))
    if larger == 0:
        return 100
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    shared = sum(
        len(line)
        for block in matcher.get_matching_blocks()
        for line in a[block.a : block.a + block.size]
    )
    return min(99, shared * 100 // larger)


def pairs(
    changes: list[Change],
    content: Callable[[str], bytes | None],
    *,
    max_bytes: int,
) -> list[Rename]:
    """The renames of ``changes`` (``content(sha256)``: a blob's bytes, None when unread)."""
    deletes = sorted(
        (c for c in changes if c.operation == "delete" and c.old.bytes), key=lambda c: c.path
    )
    creates = sorted(
        (c for c in changes if c.operation == "create" and c.new.bytes), key=lambda c: c.path
    )
    found: list[Rename] = []
    used: set[str] = set()
    for source in deletes:  # 1. the same content
        for target in creates:
            if target.path in used or source.path in used:
                continue
            same_kind = _link(source.old.mode) == _link(target.new.mode)
            if same_kind and source.old.sha256 == target.new.sha256:
                found.append(Rename(source.path, target.path, 100))
                used |= {source.path, target.path}
    left = [c for c in deletes if c.path not in used]
    right = [c for c in creates if c.path not in used]
    if not left or not right or len(left) > MAX_CANDIDATES or len(right) > MAX_CANDIDATES:
        return found
    scored: list[tuple[int, str, str]] = []
    texts: dict[str, bytes | None] = {}

    def text(sha256: str | None, size: int | None) -> bytes | None:
        if sha256 is None or (size or 0) > max_bytes:
            return None
        if sha256 not in texts:
            data = content(sha256)
            texts[sha256] = None if data is None or b"\0" in data[:8000] else data
        return texts[sha256]

    for source in left:  # 2. similar text, the best first
        old = None if _link(source.old.mode) else text(source.old.sha256, source.old.bytes)
        if old is None:
            continue
        for target in right:
            if _link(target.new.mode):
                continue
            new = text(target.new.sha256, target.new.bytes)
            if new is None:
                continue
            score = similarity(old, new)
            if score >= THRESHOLD:
                scored.append((-score, source.path, target.path))
    for negative, source_path, target_path in sorted(scored):
        if source_path in used or target_path in used:
            continue
        found.append(Rename(source_path, target_path, -negative))
        used |= {source_path, target_path}
    return sorted(found, key=lambda r: r.target)
