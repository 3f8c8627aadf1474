"""Recovery's settle decision, exhaustively: every step kind x target x temp content.

For each combination a real directory is laid out (the target in some state, the step's
journaled temp name holding nothing, promoter's new bytes, the exact old bytes, or
someone else's bytes), ``settle`` runs, and the test checks the one property that
matters: no byte that is not promoter's own (or the authorized old state, displaced from
a target that holds the new one) ever disappears, and the action is the documented one.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import pytest

from promoter.domain.paths import temp_name
from promoter.fs.aside import settle
from promoter.fs.chain import ExpectedState
from promoter.fs.root import Root

TMP = temp_name("op_table", 1, 0)
KEPT = ".promoter-kept-op_table-1-0"
OLD, NEW, OTHER, SOMEONE = b"old\n", b"new\n", b"the user's\n", b"someone else's\n"


def _state(data: bytes | None) -> ExpectedState:
    if data is None:
        return ExpectedState(False, None, None)
    return ExpectedState(True, hashlib.sha256(data).hexdigest(), "100644")


KINDS = {"create": (None, NEW), "modify": (OLD, NEW), "delete": (OLD, None)}
TARGETS = {"missing": None, "old": OLD, "new": NEW, "other": OTHER}
TEMPS = {"absent": None, "new": NEW, "old": OLD, "other": SOMEONE}


def _expected_action(kind: str, target: str, temp: str) -> str:
    old, new = KINDS[kind]
    temp_bytes = TEMPS[temp]
    if temp_bytes is None:
        return "absent"
    if new is not None and temp_bytes == new:
        return "removed"
    target_is_new = TARGETS[target] == new if new is not None else target == "missing"
    if old is not None and target_is_new and temp_bytes == old:
        return "removed"
    if old is not None and target == "missing":
        return "put_back"
    return "kept"


CASES = list(itertools.product(KINDS, TARGETS, TEMPS))


@pytest.mark.parametrize(("kind", "target", "temp"), CASES, ids=["-".join(c) for c in CASES])
def test_settle_never_loses_bytes_that_are_not_promoters(
    tmp_path: Path, kind: str, target: str, temp: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if TARGETS[target] is not None:
        (work / "f.txt").write_bytes(TARGETS[target])  # type: ignore[arg-type]
    if TEMPS[temp] is not None:
        (work / TMP).write_bytes(TEMPS[temp])  # type: ignore[arg-type]
    old, new = KINDS[kind]
    with Root.open(work) as root, root.open_parent("f.txt", create=False) as parent:
        result = settle(parent, TMP, old=_state(old), new=_state(new))
    want = _expected_action(kind, target, temp)
    assert result.action == want
    names = sorted(p.name for p in work.iterdir())
    assert TMP not in names  # a journaled temp name is always settled
    if want == "kept":
        assert result.kept is not None and result.kept.kept_as == KEPT
        assert (work / KEPT).read_bytes() == TEMPS[temp]
    if want == "put_back":
        assert (work / "f.txt").read_bytes() == TEMPS[temp]
    elif TARGETS[target] is not None:
        assert (work / "f.txt").read_bytes() == TARGETS[target]  # the target is never touched
    # every byte that was there and is not promoter's own is still somewhere
    present = {p.read_bytes() for p in work.iterdir()}
    for data in (TARGETS[target], TEMPS[temp]):
        if data in (OTHER, SOMEONE):
            assert data in present
