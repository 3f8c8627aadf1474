"""One ``git diff --no-index`` over many pairs prints each pair's hunks byte for byte as
a process of its own would (protocol: api#what-a-review-shows).

``promoter.engine.review.batch.run`` over pairs of real files is compared with
``diff._GitDiff`` of each pair alone: for every kind of content (no final newline, CRLF,
empty or missing sides, identical sides, NUL bytes, stray bytes, a long line) between
other pairs, for random line edits (hypothesis), and for content a hostile bundle could
hold to make the split ambiguous: lines that read as git's file headers, hunk headers or
``\\ No newline`` markers. Output that does not follow git's grammar is refused (None:
the caller goes file by file); nothing is left in the private directory, and the stored
blobs keep their single link. A timer that fires at the deadline once git ended by itself
stops nothing (fault points order the two).
"""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter import faults
from promoter.engine.review import batch as batches
from promoter.engine.review.diff import GIT_DIFF, _GitDiff

LONG = b"".join(b"line %d of the module\n" % i for i in range(2500))
EDIT = LONG.replace(b"line 1200 of", b"line twelve hundred of") + b"# appended\n"
FORGED = (
    b"diff --git a/o/000002 b/n/000002\n"
    b"index 0000000..1111111 100644\n"
    b"--- a/o/000002\n+++ b/n/000002\n"
    b"@@ -1,3 +1,3 @@\n"
    b"\\ No newline at end of file\n"
)
KINDS: dict[str, tuple[bytes | None, bytes | None]] = {
    "edit_and_append": (LONG, EDIT),
    "no_final_newline_old": (LONG.rstrip(b"\n"), EDIT),
    "no_final_newline_new": (LONG, EDIT.rstrip(b"\n")),
    "no_final_newline_both": (LONG + b"x", LONG + b"y"),
    "crlf": (LONG.replace(b"\n", b"\r\n"), EDIT.replace(b"\n", b"\r\n")),
    "crlf_to_lf": (LONG.replace(b"\n", b"\r\n"), LONG),
    "empty_old": (b"", LONG),
    "empty_new": (LONG, b""),
    "missing_old": (None, LONG),
    "missing_new": (LONG, None),
    "identical": (LONG, LONG),
    "nul_bytes": (LONG + b"\0\0\n", LONG + b"\0x\n"),
    "stray_bytes": (LONG + b"\xa9\xff\n", LONG + b"\xc3\n"),
    "lone_carriage_returns": (LONG.replace(b"\n", b"\r"), EDIT.replace(b"\n", b"\r")),
    "long_line": (LONG + b"y" * 300_000 + b"\n", LONG + b"z" * 300_000 + b"\n"),
}


def _files(root: Path, contents: list[tuple[bytes | None, bytes | None]]) -> list[batches.Pair]:
    pairs: list[batches.Pair] = []
    for k, (old, new) in enumerate(contents):
        paths: list[str | None] = []
        for side, data in (("old", old), ("new", new)):
            if data is None:
                paths.append(None)
                continue
            path = root / f"{side}-{k}"
            path.write_bytes(data)
            path.chmod(0o444)  # as the blob store keeps them
            paths.append(os.fspath(path))
        pairs.append((paths[0], paths[1]))
    return pairs


def _alone(pairs: list[batches.Pair]) -> list[list[str]]:
    return [list(_GitDiff(old, new, 30).lines()) for old, new in pairs]


def _together(tmp: Path, pairs: list[batches.Pair]) -> list[list[str]]:
    batch = batches.run(os.fspath(tmp), pairs, GIT_DIFF, 30)
    assert batch is not None
    try:
        assert batch.done == ["whole"] * len(pairs)
        return [list(batch.lines(k)) for k in range(len(pairs))]
    finally:
        batch.close()
        assert os.listdir(tmp) == []  # every name made is gone


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_between_others_prints_as_its_own_process(tmp_path: Path, kind: str) -> None:
    (tmp_path / "blobs").mkdir()
    contents = [(LONG, EDIT), KINDS[kind], (EDIT, LONG)]
    pairs = _files(tmp_path / "blobs", contents)
    together = _together(tmp_path / "tmp", pairs)
    assert together == _alone(pairs)
    assert together[0] and together[2]


def test_every_kind_in_one_process_prints_as_one_process_each(tmp_path: Path) -> None:
    (tmp_path / "blobs").mkdir()
    pairs = _files(tmp_path / "blobs", [KINDS[kind] for kind in sorted(KINDS)])
    assert _together(tmp_path / "tmp", pairs) == _alone(pairs)
    assert all(os.stat(p).st_nlink == 1 for pair in pairs for p in pair if p)


def test_content_forging_git_headers_stays_in_its_own_file(tmp_path: Path) -> None:
    """A file whose lines read as the next file's header, a hunk header and a no-newline
    marker: every such line is a hunk line of its own file (prefixed), never a split."""
    (tmp_path / "blobs").mkdir()
    hostile = LONG + FORGED * 50
    contents = [(LONG, hostile), (hostile, LONG + FORGED), (None, FORGED * 700), (LONG, EDIT)]
    pairs = _files(tmp_path / "blobs", contents)
    together = _together(tmp_path / "tmp", pairs)
    assert together == _alone(pairs)
    assert "+diff --git a/o/000002 b/n/000002\n" in together[0]
    assert together[3] and together[3][0].startswith("@@ ")


line = st.sampled_from(["a\n", "b\n", "c\r\n", "diff --git a/o/000001 b/n/000001\n", "@@ x\n", ""])
text = st.lists(line, max_size=40).map(lambda lines: "".join(lines).encode())


@settings(max_examples=40, deadline=None)
@given(contents=st.lists(st.tuples(st.none() | text, st.none() | text), min_size=1, max_size=4))
def test_random_line_edits_print_as_one_process_each(
    tmp_path_factory: pytest.TempPathFactory, contents: list[tuple[bytes | None, bytes | None]]
) -> None:
    root = tmp_path_factory.mktemp("edits")
    (root / "blobs").mkdir()
    contents = [(old, b"" if old is None and new is None else new) for old, new in contents]
    pairs = _files(root / "blobs", contents)
    assert _together(root / "tmp", pairs) == _alone(pairs)


@pytest.mark.parametrize(
    "output",
    [
        b"diff --git a/o/000001 b/n/000001\n@@ -1 +1 @@\n-a\n+b\n"
        b"diff --git a/o/000000 b/n/000000\n@@ -1 +1 @@\n-a\n+b\n",  # out of order
        b"diff --git a/o/000003 b/n/000003\n@@ -1 +1 @@\n-a\n+b\n",  # not one of the pairs
        b"diff --git a/o/000000 b/n/000001\n@@ -1 +1 @@\n-a\n+b\n",  # two names
        b"diff --git a/n/000000 b/o/000000\n@@ -1 +1 @@\n-a\n+b\n",  # sides swapped
        b"diff --git a/o/000000 b/n/000000\n@@ -1,2 +1 @@\n-a\n+b\n",  # a line short
        b"diff --git a/o/000000 b/n/000000\n@@ -1 +1 @@\n-a\n+b\n+c\n",  # a line over
        b"diff --git a/o/000000 b/n/000000\n@@ -1 +1 @@\n-a\n+b",  # cut, not killed
        b"diff --git a/o/000000 b/n/000000\nBinary files differ\n",  # not a hunk
        b"@@ -1 +1 @@\n-a\n+b\n",  # a hunk before any file
        b"diff --git a/o/000000 b/n/000000\n@@ -1 +1 @@\n-a\n+b\nindex 1..2\n",
        b"diff --git a/o/000001 b/o/000001\n@@ -1 +0,0 @@\n-a\n",  # a side that is there
    ],
)
def test_output_off_git_grammar_is_refused(output: bytes) -> None:
    assert batches._index(io.BytesIO(output), [b"on", b"on"], killed=False) is None


def test_a_killed_run_keeps_what_came_before_the_section_being_written() -> None:
    output = (
        b"diff --git a/o/000000 b/n/000000\n@@ -1 +1 @@\n-a\n+b\n"
        b"diff --git a/o/000002 b/n/000002\n@@ -1,2 +1,2 @@\n-a\n+b\n c"
    )
    found = batches._index(io.BytesIO(output), [b"on"] * 4, killed=True)
    assert found is not None
    ranges, last = found
    assert last == 2 and batches._done(4, last, True) == [
        "whole",
        "whole",
        "stopped",
        "not_reached",
    ]
    assert output[slice(*ranges[0])] == b"@@ -1 +1 @@\n-a\n+b\n"
    assert output[slice(*ranges[2])] == b"@@ -1,2 +1,2 @@\n-a\n+b\n c"
    assert batches._done(3, -1, True) == ["stopped", "not_reached", "not_reached"]


def test_a_blob_that_cannot_be_linked_falls_back_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "blobs").mkdir()
    pairs = _files(tmp_path / "blobs", [(LONG, EDIT), (LONG, EDIT)])
    gone = os.fspath(tmp_path / "blobs" / "gone")
    assert batches.run(os.fspath(tmp_path / "tmp"), [*pairs, (gone, None)], GIT_DIFF, 30) is None
    assert os.listdir(tmp_path / "tmp") == []
    assert all(os.stat(p).st_nlink == 1 for pair in pairs for p in pair if p)


def test_a_stored_blob_that_is_a_symlink_falls_back(tmp_path: Path) -> None:
    """git diffs a link's target text, not the bytes it points to: never batched."""
    (tmp_path / "blobs").mkdir()
    pairs = _files(tmp_path / "blobs", [(LONG, EDIT), (LONG, EDIT)])
    link = tmp_path / "blobs" / "link"
    link.symlink_to(str(pairs[0][1]))
    assert (
        batches.run(os.fspath(tmp_path / "tmp"), [*pairs, (os.fspath(link), None)], GIT_DIFF, 30)
        is None
    )
    assert os.listdir(tmp_path / "tmp") == []


def test_a_run_out_of_time_stops_the_first_pair_and_reaches_no_other(tmp_path: Path) -> None:
    (tmp_path / "blobs").mkdir()
    pairs = _files(tmp_path / "blobs", [(LONG * 40, EDIT * 40)] * 3)
    batch = batches.run(os.fspath(tmp_path / "tmp"), pairs, GIT_DIFF, 0)
    assert batch is not None
    try:
        assert batch.done == ["stopped", "not_reached", "not_reached"]
        assert list(batch.lines(1)) == list(batch.lines(2)) == []
    finally:
        batch.close()
    assert os.listdir(tmp_path / "tmp") == []


def test_a_git_that_ended_when_the_timer_fired_reports_its_last_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timer reaches its deadline (``review_diff_deadline``: marked expired, git not
    yet killed) and is held there while git writes every section and exits by itself;
    the run is held after git's exit, its timer not stopped (``review_diff_waited``),
    until then. Its kill comes after git ended: every file is whole, the last one too,
    and read whole."""
    (tmp_path / "blobs").mkdir()
    pairs = _files(tmp_path / "blobs", [(LONG, EDIT), (EDIT, LONG), (LONG, EDIT)])
    deadline, waited = tmp_path / "deadline", tmp_path / "waited"
    monkeypatch.setenv(
        faults.ENV, f"review_diff_deadline=pause:{deadline},review_diff_waited=pause:{waited}"
    )
    faults.reset()
    markers = [Path(f"{deadline}.paused"), Path(f"{waited}.paused")]
    for marker in markers:
        os.mkfifo(marker)  # opened by the point when it is reached
    outcome: list[batches.Batch | None] = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            batches.run(os.fspath(tmp_path / "tmp"), pairs, GIT_DIFF, 0.001)
        )
    )
    worker.start()
    try:
        for marker in markers:
            _reached(marker)
    finally:
        deadline.touch()
        waited.touch()
        worker.join(60)
    (batch,) = outcome
    assert batch is not None
    try:
        assert batch.done == ["whole", "whole", "whole"]
        assert [list(batch.lines(k)) for k in range(3)] == _alone(pairs)
    finally:
        batch.close()
    assert os.listdir(tmp_path / "tmp") == []


def _reached(marker: Path) -> None:
    """Until the fault point announced at ``marker`` (a FIFO) is reached."""
    with open(marker, encoding="utf-8") as reader:  # blocks until the point writes it
        assert reader.read().isdigit()


def test_a_file_diffed_alone_that_ended_when_the_timer_fired_is_not_timed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same order for one file's own ``git diff``: its timer held at the deadline
    while git writes every line and exits by itself; its lines are whole, and it is not
    marked timed out (the review would say "Diff stopped" of a whole file)."""
    (tmp_path / "blobs").mkdir()
    ((old, new),) = _files(tmp_path / "blobs", [(LONG, EDIT)])
    deadline, waited = tmp_path / "deadline", tmp_path / "waited"
    monkeypatch.setenv(
        faults.ENV, f"review_diff_deadline=pause:{deadline},review_diff_waited=pause:{waited}"
    )
    faults.reset()
    markers = [Path(f"{deadline}.paused"), Path(f"{waited}.paused")]
    for marker in markers:
        os.mkfifo(marker)
    git = _GitDiff(old, new, 0.001)
    lines: list[str] = []
    worker = threading.Thread(target=lambda: lines.extend(git.lines()))
    worker.start()
    try:
        for marker in markers:
            _reached(marker)
    finally:
        deadline.touch()
        waited.touch()
        worker.join(60)
    assert not worker.is_alive()
    assert git.timed_out is False
    assert lines == _alone([(old, new)])[0]
