"""Sphinx configuration of promoter's documentation site (``make docs``).

Owns: the site's settings (Furo theme, MyST Markdown, Graphviz diagrams drawn as SVG
files at build time by Debian's ``graphviz``) and the one hook
that fills the generated parts of pages at build time (``scripts.docs_pages``: the API
reference from ``schemas/openapi.json``, the state diagrams from
``promoter.domain.status``, the layer picture from the package's imports, the decision
records under their index). The navigation is the toctrees of ``index.md``.

Not here: the generators themselves (``scripts/docs_pages.py``), the pages' text. The
build reads only files of this repository: nothing is fetched.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts import docs_pages  # noqa: E402

project = "promoter"
author = "the promoter authors"
copyright = "the promoter authors"  # noqa: A001
root_doc = "index"
extensions = ["myst_parser", "sphinx.ext.graphviz"]
source_suffix = {".md": "markdown"}
exclude_patterns = docs_pages.excluded(ROOT / "docs")
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
graphviz_output_format = "svg"
html_theme = "furo"
html_title = "promoter"
html_last_updated_fmt = None
html_copy_source = False
html_show_sourcelink = False
nitpicky = True


def _expand(app: Any, docname: str, source: list[str]) -> None:
    source[0] = docs_pages.expand(docname, source[0], ROOT)


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _expand)
    return {"parallel_read_safe": True}
