"""The published OpenAPI document, as ``schemas/openapi.json`` holds it.

``python -m promoter.api.openapi_export DIR`` builds the application (``create_app``) and
writes its document to ``DIR/openapi.json`` (``make schemas``). It lives apart from
``promoter.api.openapi`` because the routes import that module for their contracts and the
application imports the routes: the module that builds the application sits above both.
Deliberately not here: what the document says (``promoter.api.openapi``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from promoter.api.app import create_app
from promoter.config import Settings


def render() -> str:
    """The document as ``schemas/openapi.json`` holds it."""
    app = create_app(Settings())
    return json.dumps(app.openapi(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else "schemas")
    target.mkdir(parents=True, exist_ok=True)
    (target / "openapi.json").write_text(render(), encoding="utf-8")
    print(f"wrote {target / 'openapi.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
