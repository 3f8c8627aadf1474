"""The documentation site builds in strict mode, and its generated parts follow the code.

The build (``make docs``'s command, into a scratch directory) fails on any warning: a
broken link, a missing anchor, a page outside the navigation. It needs the ``docs``
extra and Debian's ``graphviz`` (``dot`` draws the diagrams); without either the build
test skips in one line (``.ci/run`` installs both). The generator tests need nothing beyond promoter itself.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from promoter.domain.status import TRANSITIONS
from scripts import docs_bench, docs_pages

pytestmark = pytest.mark.database_free  # the site is built once, in the SQLite pass

ROOT = Path(__file__).resolve().parents[2]
DOCS_EXTRA = ("sphinx", "myst_parser", "furo")


def _docs_extra_missing() -> str | None:
    for name in DOCS_EXTRA:
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            found = None
        if found is None:
            return name
    return None


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    missing = _docs_extra_missing()
    if missing is not None:
        pytest.skip(f"the docs extra is not installed ({missing}): pip install '.[docs]'")
    if shutil.which("dot") is None:
        pytest.skip("no dot to draw the diagrams: apt-get install graphviz")
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-n", "-W", "--keep-going"]
    command += ["-q", "-E", "-d", str(tmp_path / "doctrees"), "docs", str(tmp_path / "site")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    api = (tmp_path / "site" / "reference" / "api.html").read_text(encoding="utf-8")
    assert "/v1/promotions" in api and "model-problem" in api
    protocol = (tmp_path / "site" / "protocol.html").read_text(encoding="utf-8")
    assert protocol.count('<object data="_images/graphviz-') == len(TRANSITIONS)


def test_every_endpoint_of_the_openapi_document_is_in_the_reference() -> None:
    doc = json.loads((ROOT / "schemas" / "openapi.json").read_text(encoding="utf-8"))
    text = docs_pages.openapi_markdown(doc)
    for path, item in doc["paths"].items():
        for method in item:
            assert f"#### {method.upper()} `{path}`" in text
    for name in doc["components"]["schemas"]:
        assert f"({docs_pages._model_anchor(name)[1:]})=\n### {name}\n" in text
    assert "<state>" not in text  # a bare tag would vanish in the browser


def test_every_move_of_the_transition_table_is_drawn() -> None:
    text = docs_pages.states_markdown()
    for moves in TRANSITIONS.values():
        for source, targets in moves.items():
            for target in targets:
                assert f"    {'new' if source is None else source} -> {target};\n" in text


def test_the_layer_picture_reads_the_imports() -> None:
    edges = docs_pages.floor_imports(ROOT / "promoter")
    assert edges[("engine", "domain")] > 0
    assert not any(source == "domain" and target != docs_pages.SHARED for source, target in edges)
    assert "    engine -> domain [label=" in docs_pages.layers_markdown(ROOT / "promoter")


def test_a_marker_without_a_generator_is_refused() -> None:
    with pytest.raises(ValueError, match="nothing"):
        docs_pages.expand("x", "<!-- generated: nothing -->\n", ROOT)


def test_the_benchmark_page_holds_one_table_between_its_markers() -> None:
    result = {
        "rounds": 3,
        "cpus": 2,
        "filesystem": "ext4",
        "load_average_before": [0.5],
        "load_average_after": [1.0],
        "rows": {
            "cli_help": {
                "median": 0.08,
                "samples": [0.08, 0.09, 0.07],
                "goal": 0.3,
                "unit": "s",
                "met": True,
            },
            "promote_115": {
                "median": 1.6,
                "samples": [1.6, 1.7, 1.5],
                "goal": 1.2,
                "unit": "x",
                "met": False,
            },
        },
    }
    table = docs_bench.table_markdown(result, {"promote_115": "promotion", "cli_help": "start"})
    assert table.splitlines()[2:] == [
        "| measure | median | goal | verdict | rounds |",
        "|---|---|---|---|---|",
        "| promotion | 1.6× | ≤ 1.2× | missed | 1.6×, 1.7×, 1.5× |",
        "| start | 0.08 s | ≤ 0.3 s | met | 0.08 s, 0.09 s, 0.07 s |",
    ]
    page = f"# B\n\n{docs_bench.BEGIN}\nold\n{docs_bench.END}\n\nrest\n"
    assert docs_bench.replace_table(docs_bench.replace_table(page, "new"), "new") == (
        f"# B\n\n{docs_bench.BEGIN}\nnew\n{docs_bench.END}\n\nrest\n"
    )
    current = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert current.count(docs_bench.BEGIN) == 1 and current.count(docs_bench.END) == 1
