"""The streaming scan cannot be fooled by where its chunks end.

A hidden character, a lone carriage return or a stray byte split across two reads, and a
long line spread over many, must be found exactly as in one piece; ``visible`` must show
every hidden character and keep every byte.
"""

from __future__ import annotations

import hashlib

import pytest

from promoter.engine.review.scan import (
    BINARY_PROBE,
    _Scanner,
    count_bytes,
    path_flags,
    scan_bytes,
    visible,
)

SAMPLE = (
    "\ufeffok\n"  # a BOM first: not a flag
    + "ab\u202ec\n"
    + "z" * 3000
    + "\nq\u200bq\nend\rx\n\xa9"
).encode() + b"\xff\xfe tail"


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("step", [1, 2, 3, 7, 1001, 4096])
def test_a_hidden_character_split_across_reads_is_still_found(step: int, exact: bool) -> None:
    scanner = _Scanner(exact)
    for start in range(0, len(SAMPLE), step):
        scanner.feed(SAMPLE[start : start + step])
    scan = scanner.finish()
    whole = scan_bytes(SAMPLE)
    assert (
        scan.flags
        == whole.flags
        == {
            "bidi_control",
            "invisible_character",
            "control_character",
            "not_utf8",
            "long_line",
        }
    )
    assert (scan.lines, scan.longest_line, scan.size) == (6, 3000, len(SAMPLE))
    assert scan.sha256 == whole.sha256


def test_a_crlf_file_is_not_flagged_but_a_lone_carriage_return_is() -> None:
    assert scan_bytes(b"a\r\nb\r\n").flags == set()
    assert scan_bytes(b"a\r\nb\rc\n").flags == {"control_character"}


def test_visible_shows_every_hidden_character_and_keeps_every_byte() -> None:
    line = b"x\xa9\xe2\x80\xae\x1b[2J\xe2\x80\x8b\xf3\xa0\x80\x81\r".decode(
        "utf-8", "surrogateescape"
    )
    assert visible(line) == "x\\xa9<U+202E><U+001B>[2J<U+200B><U+E0001>\r"


def test_react_hooks_are_not_git_hooks() -> None:
    assert path_flags("src/hooks/useThing.ts") == []
    assert path_flags("hooks/pre-commit") == ["hook_path"]
    assert path_flags(".github/workflows/ci.yml") == ["ci_config"]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\n",
        b"no line feed",
        b"two\nlines\n",
        b"last\nwithout",
        b"\r\n\r\n",
        SAMPLE,
        b"x" * (BINARY_PROBE - 1) + b"\x00",
        b"x" * BINARY_PROBE + b"\x00",
        b"\x00" + b"z" * 5000,
    ],
)
def test_an_old_side_counted_has_the_counts_of_its_full_scan(data: bytes) -> None:
    digest = hashlib.sha256(data).hexdigest()
    full, counted = scan_bytes(data), count_bytes(data, digest)
    assert scan_bytes(data, digest) == full
    assert (counted.size, counted.lines, counted.binary, counted.head, counted.sha256) == (
        full.size,
        full.lines,
        full.binary,
        full.head,
        full.sha256,
    )
    assert counted.flags == set()
