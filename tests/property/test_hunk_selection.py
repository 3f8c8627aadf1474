"""Hunk selection against ``git apply``: the bytes a partial approval composes.

For any old and new text and any subset of the hunks the review diff shows, the bytes
``promoter.domain.hunks.compose`` builds equal what ``git apply`` writes when given a
patch holding only those hunks, cut from the review diff's own text. The hunks are
numbered exactly as the review diff prints its ``@@`` lines. Lines come from a small
alphabet (so diffs have several hunks), with carriage returns, bytes that are not UTF-8
and a last line without a line feed among them.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.domain.hunks import compose, hunks
from promoter.engine.review.diff import _difflib_lines
from tests.gitutil import git_env

LINES = [b"a\n", b"b\n", b"c\n", b"d\n", b"e\n", b"x\r\n", b"\xff\xfe\n", b"\n"]
texts = st.builds(
    lambda lines, tail: b"".join(lines) + tail,
    st.lists(st.sampled_from(LINES), max_size=40),
    st.sampled_from([b"", b"end", b"\xa9"]),
)


def _review_hunks(old: bytes, new: bytes) -> list[list[str]]:
    """The review diff's hunks of one file, each its ``@@`` line and body."""
    found: list[list[str]] = []
    for line in _difflib_lines(old, new):
        if line.startswith("@@"):
            found.append([line])
        else:
            found[-1].append(line)
    return found


def _git_apply(tmp: Path, old: bytes, chosen: list[list[str]]) -> bytes:
    target = tmp / "f"
    target.write_bytes(old)
    body = "".join(line for hunk in chosen for line in hunk)
    patch = ("--- a/f\n+++ b/f\n" + body).encode("utf-8", "surrogateescape")
    subprocess.run(
        ["git", "apply", "--unsafe-paths", "-"],
        input=patch,
        cwd=tmp,
        env=git_env(),
        check=True,
        capture_output=True,
    )
    return target.read_bytes()


@settings(max_examples=200, deadline=None)
@given(old=texts, new=texts, data=st.data())
def test_any_subset_of_hunks_gives_the_bytes_git_apply_gives(
    old: bytes, new: bytes, data: st.DataObject
) -> None:
    shown = _review_hunks(old, new)
    numbered = hunks(old, new)
    assert len(numbered) == len(shown)  # numbered as the review diff prints them
    chosen: set[int] = data.draw(st.sets(st.integers(1, len(shown))) if shown else st.just(set()))
    composed = compose(old, new, chosen)
    if not chosen:
        assert composed == old
        return
    if len(chosen) == len(shown):
        assert composed == new
    with tempfile.TemporaryDirectory() as tmp:
        applied = _git_apply(Path(tmp), old, [shown[n - 1] for n in sorted(chosen)])
    assert composed == applied
