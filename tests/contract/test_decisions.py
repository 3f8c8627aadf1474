"""docs/decisions/ holds the decision records: each is short, whole, indexed and linked.

Owns the shape of the records (a title, a status, then exactly the sections context,
decision and consequences, at most ``MAX_LINES`` lines), the index's completeness (one
row a record, under an area, with its kind and the record's own status), that a
superseded record and its successor name each other, that no record cites an issue
number, and that every relative link in the records, their index and the benchmarks
pages resolves. Does not judge what a record says; the anchors of links are the site
build's to check (``test_docs_site.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
DOCS = TOP / "docs"
RECORDS = DOCS / "decisions"
INDEX = RECORDS / "index.md"
BENCHMARKS = [DOCS / "benchmarks.md", *sorted((DOCS / "benchmarks").glob("*.md"))]
MAX_LINES = 60
LONGER: dict[
    str, int
] = {}  # record name -> its allowed length, with the reason beside it (none so far)
STATUS = re.compile(
    r"^Status: (?:accepted \(\d{4}-\d{2}-\d{2}\)"
    r"|superseded by \[[^\]]+\]\((?P<later>[\w.-]+\.md)\)(?: \(\d{4}-\d{2}-\d{2}\))?"
    r"|retired \(\d{4}-\d{2}-\d{2}\): \S.*)$",
    re.M,
)
SECTIONS = ["## Context", "## Decision", "## Consequences"]
KINDS = ("architecture", "rule", "measured")
ROW = re.compile(
    r"^\| \[(?P<title>[^\]]+)\]\((?P<name>[\w.-]+\.md)\) \| (?P<kind>[a-z]+) \| (?P<status>[^|]+) \|",
    re.M,
)
ISSUE = re.compile(r"\bissues? ?(?:no\.? ?)?#?\d+|(?<![\w&/])#\d{2,}\b", re.I)
LINK = re.compile(r"\]\((?!https?:|mailto:|#)(?P<target>[^)#\s]+)(?:#[^)]*)?\)")
LOG = re.compile(r"(?<![\w/.-])(?:docs/)?decisions\.md")


def _records() -> list[Path]:
    return sorted(p for p in RECORDS.glob("*.md") if p.name != "index.md")


def _status(path: Path) -> re.Match[str]:
    found = STATUS.search(path.read_text(encoding="utf-8"))
    assert found is not None, path.name
    return found


def test_every_record_has_a_title_a_status_and_exactly_its_three_sections() -> None:
    records = _records()
    assert len(records) > 100
    broken = []
    for path in records:
        text = path.read_text(encoding="utf-8")
        headings = re.findall(r"^##? .*$", text, re.M)
        status = STATUS.search(text)
        if not text.startswith("# ") or status is None or headings[1:] != SECTIONS:
            broken.append(path.name)
        elif status.start() > text.find("\n## Context\n"):
            broken.append(f"{path.name}: status after the context")
    assert broken == []


def test_every_record_is_at_most_sixty_lines() -> None:
    long = {
        path.name: lines
        for path in _records()
        if (lines := len(path.read_text(encoding="utf-8").splitlines()))
        > LONGER.get(path.name, MAX_LINES)
    }
    assert long == {}, "move the measurements into docs/benchmarks/ and link them"


def test_a_superseded_record_names_a_later_one_that_says_it_supersedes_it() -> None:
    unlinked = []
    for path in _records():
        later = _status(path).group("later")
        if later is None:
            continue
        target = RECORDS / later
        back = re.compile(rf"^Supersedes .*\]\({re.escape(path.name)}\)", re.M)
        if not target.is_file() or not back.search(target.read_text(encoding="utf-8")):
            unlinked.append(f"{path.name} -> {later}")
    assert unlinked == []


def test_the_index_lists_every_record_once_with_its_kind_and_status() -> None:
    text = INDEX.read_text(encoding="utf-8")
    rows = list(ROW.finditer(text))
    assert sorted(row["name"] for row in rows) == [p.name for p in _records()]
    wrong = []
    for row in rows:
        path = RECORDS / row["name"]
        status = _status(path)
        expected = "accepted" if status.group(0).startswith("Status: accepted") else None
        if status.group("later") is not None:
            expected = (
                f"superseded by [{Path(status.group('later')).stem}]({status.group('later')})"
            )
        elif expected is None:
            expected = "retired"
        title = path.read_text(encoding="utf-8").splitlines()[0][2:]
        if row["kind"] not in KINDS or row["status"].strip() != expected or row["title"] != title:
            wrong.append(row["name"])
    assert wrong == []


def test_the_index_groups_the_records_by_area_architecture_first() -> None:
    text = INDEX.read_text(encoding="utf-8")
    areas = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(areas) >= 5
    for area in areas:
        kinds = [KINDS.index(row["kind"]) for row in ROW.finditer(area)]
        assert kinds and kinds == sorted(kinds), area.splitlines()[0]
    assert sum(1 for row in ROW.finditer(text) if row["kind"] == "architecture") >= 15


def test_no_record_cites_an_issue_number() -> None:
    citing = [
        f"{path.name}: {found.group(0)}"
        for path in [*_records(), INDEX, *BENCHMARKS]
        for found in ISSUE.finditer(path.read_text(encoding="utf-8"))
    ]
    assert citing == []


def test_every_relative_link_in_the_records_and_benchmarks_resolves() -> None:
    missing = [
        f"{path.relative_to(DOCS)}: {match.group('target')}"
        for path in [*_records(), INDEX, *BENCHMARKS]
        for match in LINK.finditer(path.read_text(encoding="utf-8"))
        if not (path.parent / match.group("target")).exists()
    ]
    assert missing == []


def test_every_benchmarks_page_is_reached_from_the_benchmarks_index() -> None:
    index = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert [p for p in BENCHMARKS[1:] if f"(benchmarks/{p.name})" not in index] == []


def test_the_old_single_log_is_gone_and_nothing_points_at_it() -> None:
    assert not (TOP / "docs" / "decisions.md").exists()
    files = [TOP / "README.md", *sorted((TOP / "docs").rglob("*.md"))]
    files += sorted((TOP / "promoter").rglob("*.py"))
    pointing = [
        str(path.relative_to(TOP)) for path in files if LOG.search(path.read_text(encoding="utf-8"))
    ]
    assert pointing == []


def test_every_record_path_named_in_code_and_docs_exists() -> None:
    named = re.compile(r"docs/decisions/([\w.-]+\.md)")
    files = [TOP / "README.md", *sorted(DOCS.rglob("*.md"))]
    for tree in ("promoter", "tests", "bench", "scripts"):
        files += sorted((TOP / tree).rglob("*.py"))
    missing = [
        f"{path.relative_to(TOP)}: {name}"
        for path in files
        for name in named.findall(path.read_text(encoding="utf-8"))
        if not (RECORDS / name).is_file()
    ]
    assert missing == []
