"""Parsing untrusted JSON into wire models with promoter's error codes."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from promoter.errors import BadRequest, ValidationFailed

M = TypeVar("M", bound=BaseModel)


def load_json(raw: bytes) -> Any:
    """Decode a JSON request body; duplicate keys and non-finite numbers are refused."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError("duplicate object key")
        return dict(pairs)

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(raw, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from exc


def parse_model(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"loc": [str(part) for part in err["loc"]], "msg": err["msg"], "type": err["type"]}
            for err in exc.errors(include_url=False, include_context=False, include_input=False)
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid"}
        where = ".".join(first["loc"]) or "document"
        raise ValidationFailed(
            f"{model.__name__}: {where}: {first['msg']}", errors=errors[:50]
        ) from exc
