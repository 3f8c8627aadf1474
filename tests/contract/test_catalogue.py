"""docs/tests.md names only tests that exist: the catalogue cannot drift from the suite."""

from __future__ import annotations

import re
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def test_every_test_the_catalogue_names_exists() -> None:
    text = (TOP / "docs" / "tests.md").read_text(encoding="utf-8")
    named = NAMED.findall(text)
    assert len(named) > 30
    missing = [
        f"{path}::{name}"
        for path, name in named
        if not (TOP / path).is_file()
        or not re.search(rf"^def {name}\(", (TOP / path).read_text(encoding="utf-8"), re.M)
    ]
    assert missing == []


def test_every_catalogue_row_has_a_test() -> None:
    text = (TOP / "docs" / "tests.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (W\d) \|.*$", text, re.M)
    assert rows == [f"W{i}" for i in range(1, 10)]
    for line in text.splitlines():
        if re.match(r"^\| W\d \|", line):
            assert NAMED.search(line), line
