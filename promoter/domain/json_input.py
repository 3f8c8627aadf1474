"""Untrusted JSON bytes into Python values, refusing what JSON does not allow.

``load_json`` refuses duplicate object keys and the non-finite constants Python's
decoder accepts (``NaN``, ``Infinity``). It validates no document: that is the models'
job (``promoter.domain.parsing``) or the validator's (``promoter.domain.wirecheck``).
No pydantic here, so the command line can read a document without loading it.
"""

from __future__ import annotations

import json
from typing import Any

from promoter.errors import BadRequest


def load_json(raw: bytes) -> Any:
    """Decode a JSON request body; duplicate keys and non-finite numbers are refused."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(pairs)  # a repeated key leaves fewer members than pairs
        if len(found) != len(pairs):
            raise ValueError("duplicate object key")
        return found

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(raw, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from exc
