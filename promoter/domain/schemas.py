"""Generate the JSON Schemas of the wire models into ``schemas/``.

``python -m promoter.domain.schemas DIR`` writes one ``<Name>.schema.json`` per model;
a contract test fails when the committed files differ from what this produces.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from promoter.domain.intoto import STATEMENT_MODELS
from promoter.domain.models import WIRE_MODELS

MODELS = {**WIRE_MODELS, **STATEMENT_MODELS}


def render() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, model in MODELS.items():
        schema = model.model_json_schema(by_alias=True, mode="validation")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"urn:promoter:schema:{name}"
        out[f"{name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else "schemas")
    target.mkdir(parents=True, exist_ok=True)
    for filename, text in render().items():
        (target / filename).write_text(text, encoding="utf-8")
    print(f"wrote {len(MODELS)} schemas to {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
