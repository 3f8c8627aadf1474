"""docs/decisions/ holds the decision records: each is whole, indexed and linked.

Owns the shape of the records (title, status, context, decision, consequences), the
index's completeness, and that every relative link in them resolves. Does not judge
what a record says.
"""

from __future__ import annotations

import re
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
RECORDS = TOP / "docs" / "decisions"
INDEX = RECORDS / "index.md"
STATUS = re.compile(
    r"^Status: (?:accepted \(\d{4}-\d{2}-\d{2}\)"
    r"|superseded by \[[^\]]+\]\((?P<later>[\w.-]+\.md)\))$",
    re.M,
)
LINK = re.compile(r"\]\((?!https?:|mailto:|#)(?P<target>[^)#\s]+)(?:#[^)]*)?\)")
SECTIONS = ("## Context", "## Decision", "## Consequences")
LOG = re.compile(r"(?<![\w/.-])(?:docs/)?decisions\.md")


def _records() -> list[Path]:
    return sorted(p for p in RECORDS.glob("*.md") if p.name != "index.md")


def test_every_record_has_a_title_a_status_and_its_three_sections() -> None:
    records = _records()
    assert len(records) > 60
    broken = []
    for path in records:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        positions = [text.find(f"\n{heading}\n") for heading in SECTIONS]
        if (
            not lines[0].startswith("# ")
            or not STATUS.search(text)
            or -1 in positions
            or positions != sorted(positions)
        ):
            broken.append(path.name)
    assert broken == []


def test_a_superseded_record_names_a_later_one_that_links_back() -> None:
    unlinked = []
    for path in _records():
        found = STATUS.search(path.read_text(encoding="utf-8"))
        assert found is not None, path.name
        later = found.group("later")
        if later is None:
            continue
        target = RECORDS / later
        if not target.is_file() or f"]({path.name})" not in target.read_text(encoding="utf-8"):
            unlinked.append(f"{path.name} -> {later}")
    assert unlinked == []


def test_the_index_lists_every_record_once() -> None:
    text = INDEX.read_text(encoding="utf-8")
    listed = re.findall(r"^\| \[[^\]]+\]\(([\w.-]+\.md)\) \|", text, re.M)
    assert sorted(listed) == [p.name for p in _records()]


def test_every_relative_link_in_the_records_resolves() -> None:
    missing = [
        f"{path.name}: {match.group('target')}"
        for path in [*_records(), INDEX]
        for match in LINK.finditer(path.read_text(encoding="utf-8"))
        if not (path.parent / match.group("target")).exists()
    ]
    assert missing == []


def test_the_old_single_log_is_gone_and_nothing_points_at_it() -> None:
    assert not (TOP / "docs" / "decisions.md").exists()
    files = [TOP / "README.md", *sorted((TOP / "docs").rglob("*.md"))]
    files += sorted((TOP / "promoter").rglob("*.py"))
    pointing = [
        str(path.relative_to(TOP)) for path in files if LOG.search(path.read_text(encoding="utf-8"))
    ]
    assert pointing == []
