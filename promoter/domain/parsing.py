"""Parsing untrusted JSON into wire models with promoter's error codes.

``parse_model`` validates a long list of sub-models (a bundle's 10 000 changes) a slice
at a time: one validator call on the whole document would hold the GIL for hundreds of
milliseconds and stall the event loop (``/healthz``) while a worker thread parses.
Any failure re-validates the whole document, so errors read exactly as before.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from promoter.domain.json_input import load_json
from promoter.errors import ValidationFailed

__all__ = ["load_json", "parse_model"]

M = TypeVar("M", bound=BaseModel)


SLICE = 256  # list items per validator call


@cache
def _list_fields(model: type[BaseModel]) -> tuple[tuple[str, TypeAdapter[Any]], ...]:
    """(wire key, adapter of one item) of each field that is a list of models."""
    found = []
    for name, info in model.model_fields.items():
        args = get_args(info.annotation)
        item = args[0] if get_origin(info.annotation) is list and args else None
        if isinstance(item, type) and issubclass(item, BaseModel):
            found.append((info.alias or name, TypeAdapter(list[item])))  # type: ignore[valid-type]
    return tuple(found)


def _validate(model: type[M], data: Any) -> M:
    if isinstance(data, dict):
        replaced: dict[str, Any] = {}
        for key, adapter in _list_fields(model):
            items = data.get(key)
            if isinstance(items, list) and len(items) > SLICE:
                done: list[Any] = []
                for start in range(0, len(items), SLICE):
                    done += adapter.validate_python(items[start : start + SLICE])
                replaced[key] = done
        if replaced:
            return model.model_validate({**data, **replaced})
    return model.model_validate(data)


def parse_model(model: type[M], data: Any) -> M:
    try:
        try:
            return _validate(model, data)
        except ValidationError:
            return model.model_validate(data)  # the same error, located in the document
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
