"""Every citation of the protocol resolves, and nothing cites a document outside the repository.

Code, tests, benchmarks, scripts and migrations cite a rule as ``protocol: PAGE#ANCHOR``
(docs/protocol.md, "How code cites the protocol"): ``PAGE`` a file of ``docs/protocol/``,
``ANCHOR`` an explicit target ``(ANCHOR)=`` on that page. These tests read the pages'
targets and every citation in the sources and fail on one that does not resolve, on a
target that names no heading, and on any reference left to the old specification by
section number. They read the tracked files only; the links of the documentation pages are
checked by the strict site build (``tests/contract/test_docs_site.py``).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

pytestmark = pytest.mark.database_free

THIS = Path(__file__).resolve()
ROOT = THIS.parents[2]
PAGES = ROOT / "docs" / "protocol"

_REF = r"[a-z][a-z0-9-]*#[a-z0-9][a-z0-9-]*"
# "protocol: a#x" or a list "protocol: a#x, b#y" (a list may go on after a line break,
# in a comment too); a citation is never split between "protocol:" and its first anchor
CITATION = re.compile(rf"protocol: ({_REF}(?:,\s+(?:#\s+)?{_REF})*)")
REF = re.compile(_REF)
TARGET = re.compile(r"^\(([a-z0-9][a-z0-9-]*)\)=$", re.MULTILINE)
OLD_NAME = "SPEC " + "\N{SECTION SIGN}"  # spelt apart so this file does not match itself
OLD_NAME_ESCAPED = "SPEC " + "\\u00a7"  # as JSON files escape it


def anchors(pages: Path = PAGES) -> dict[str, set[str]]:
    """Each protocol page (file stem) and the explicit targets it defines."""
    return {
        page.stem: set(TARGET.findall(page.read_text(encoding="utf-8")))
        for page in pages.glob("*.md")
    }


def citations(text: str) -> list[str]:
    """Every ``PAGE#ANCHOR`` that ``text`` cites in the fixed form, in order."""
    return [ref for match in CITATION.finditer(text) for ref in REF.findall(match.group(1))]


def unresolved(cited: Iterable[tuple[str, str]], known: Mapping[str, set[str]]) -> list[str]:
    """``where: PAGE#ANCHOR`` for each citation whose page or anchor does not exist."""
    problems = []
    for where, ref in cited:
        page, anchor = ref.split("#", 1)
        if page not in known:
            problems.append(f"{where}: {ref} (no page docs/protocol/{page}.md)")
        elif anchor not in known[page]:
            problems.append(f"{where}: {ref} (no anchor ({anchor})= on docs/protocol/{page}.md)")
    return problems


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout
    paths = [ROOT / name for name in listed.decode("utf-8", "surrogateescape").split("\0") if name]
    return [path for path in paths if path.is_file() and path != THIS]


def _texts() -> list[tuple[str, str]]:
    texts = []
    for path in _tracked_text_files():
        try:
            texts.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue  # images and other binary files
    return texts


def _cited_in_sources() -> list[tuple[str, str]]:
    cited = [(name, ref) for name, text in _texts() for ref in citations(text)]
    sources = {name.split("/", 1)[0] for name, _ in cited}
    assert {"promoter", "tests", "bench", "docs"} <= sources  # a parser that finds none is broken
    return cited


def test_every_citation_in_the_sources_resolves_to_a_page_and_an_anchor() -> None:
    cited = _cited_in_sources()
    assert len(cited) >= 250  # the sources cite the protocol; a parser that finds none is broken
    assert unresolved(cited, anchors()) == []


def test_a_made_up_anchor_or_page_is_reported() -> None:
    known = anchors()
    text = (
        "x  # protocol: storage#receipt-in-outcome-commit\n"
        '"""Made up (protocol: storage#no-such-rule, promotion#step-lock).\n'
        "# (protocol: nowhere#step-lock)\n"
    )
    cited = [("example.py", ref) for ref in citations(text)]
    assert [ref for _, ref in cited] == [
        "storage#receipt-in-outcome-commit",
        "storage#no-such-rule",
        "promotion#step-lock",
        "nowhere#step-lock",
    ]
    assert unresolved(cited, known) == [
        "example.py: storage#no-such-rule (no anchor (no-such-rule)= on docs/protocol/storage.md)",
        "example.py: nowhere#step-lock (no page docs/protocol/nowhere.md)",
    ]


def test_a_list_of_citations_broken_over_lines_is_read_whole() -> None:
    text = "(protocol: recovery#recovery,\nrecovery#rollback) and\n# (protocol: api#hostile-input,\n#   hosts#fencing)"
    assert citations(text) == [
        "recovery#recovery",
        "recovery#rollback",
        "api#hostile-input",
        "hosts#fencing",
    ]


def test_no_citation_is_split_after_its_marker() -> None:
    split = re.compile(r"protocol:[ \t]*\n")
    left = [f"{name}: {match.start()}" for name, text in _texts() for match in split.finditer(text)]
    assert left == []  # "protocol:" and its first anchor stay on one line, or it is not read


def test_every_anchor_names_a_heading_and_is_unique_across_the_pages() -> None:
    seen: dict[str, str] = {}
    for page in sorted(PAGES.glob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            match = TARGET.match(line)
            if match is None:
                continue
            anchor = match.group(1)
            following = lines[number + 1] if number + 1 < len(lines) else ""
            assert following.startswith(
                "#"
            ), f"{page.name}:{number + 1}: ({anchor})= is not above a heading"
            assert anchor not in seen, f"({anchor})= on both {seen[anchor]} and {page.name}"
            seen[anchor] = page.name
    assert len(seen) >= 60


def test_nothing_in_the_repository_cites_the_old_specification_by_section() -> None:
    left = []
    for name, text in _texts():
        for number, line in enumerate(text.splitlines(), 1):
            if OLD_NAME in line or OLD_NAME_ESCAPED in line:
                left.append(f"{name}:{number}: {line.strip()[:80]}")
    assert left == []


def test_the_index_documents_the_citation_form() -> None:
    index = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    assert "(how-code-cites-the-protocol)=" in index
    assert "`protocol: PAGE#ANCHOR`" in index
    for page in anchors():
        assert f"(protocol/{page}.md)" in index, f"docs/protocol.md does not list {page}"
