"""Check a wire document without pydantic: the same verdict as its strict model.

``problem(name, document)`` answers ``None`` for a document that ``WIRE_MODELS[name]``
accepts and the first reason otherwise (``"loc: what"``), reading the JSON Schema the
models give (``promoter.domain.wire_schemas``, generated) and running the model rules a
schema cannot say where the generator marked them (``x-check``): the timestamp format
(``promoter.domain.wire_formats.check_timestamp``, the models' own function) and the
consistency of a ``FileState`` and a ``StateSpec``. Types are as strict as the models':
an integer is never a bool or a float, a string pattern matches the whole string (no
final newline, as pydantic's regex engine reads ``$``), and a string with a length or a
pattern holds no lone surrogate (pydantic refuses one there, not in a plain ``str``). An
unknown keyword or check is a refusal, never a pass. Differential tests hold the verdicts
equal to the models'.

It only decides; it parses no bytes, builds no objects, gives no pydantic-shaped errors
(a caller wanting the model's words asks the model after a refusal).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from promoter.domain.wire_formats import blob_path, check_timestamp
from promoter.domain.wire_schemas import SCHEMAS

_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "array": list,
    "object": dict,
    "boolean": bool,
    "null": type(None),
}


def problem(name: str, document: Any) -> str | None:
    """The first reason ``document`` is not a valid ``name``, or ``None`` when it is one."""
    schema = SCHEMAS[name]
    return _problem(schema, document, schema.get("$defs", {}), "")


def _at(loc: str, key: str | int) -> str:
    return f"{loc}.{key}" if loc else str(key)


def _where(loc: str) -> str:
    return loc or "document"


@cache
def _pattern(text: str) -> re.Pattern[str]:
    # JSON Schema's (and pydantic's regex engine's) ``$`` is the end of the string;
    # Python's also matches before a final newline, so an ending ``$`` becomes ``\Z``.
    if not (text.startswith("^") and text.endswith("$") and not text.endswith("\\$")):
        raise ValueError(f"an unanchored pattern {text!r}")
    return re.compile(text[:-1] + r"\Z")


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    expected = _TYPES.get(kind)
    return expected is not None and isinstance(value, expected)


def _same(value: Any, constant: Any) -> bool:
    return type(value) is type(constant) and value == constant


def _one_of(value: Any, choices: list[Any]) -> bool:
    """``value`` is one of ``choices``, of the same type (``True`` is not ``1``)."""
    return value in choices and any(type(value) is type(c) and value == c for c in choices)


def _problem(schema: dict[str, Any], value: Any, defs: dict[str, Any], loc: str) -> str | None:
    if not KEYWORDS.issuperset(schema):
        unknown = sorted(set(schema) - KEYWORDS)
        return f"{_where(loc)}: the validator does not know {unknown[0]!r}"
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/") or ref[8:] not in defs:
            return f"{_where(loc)}: unresolved reference {ref!r}"
        return _problem(defs[ref[8:]], value, defs, loc)
    if "anyOf" in schema:
        if all(_problem(sub, value, defs, loc) is not None for sub in schema["anyOf"]):
            return f"{_where(loc)}: matches none of the allowed forms"
        return None
    if "type" in schema and not _is_type(value, schema["type"]):
        return f"{_where(loc)}: not of type {schema['type']}"
    if "const" in schema and not _same(value, schema["const"]):
        return f"{_where(loc)}: must be {schema['const']!r}"
    if "enum" in schema and not _one_of(value, schema["enum"]):
        return f"{_where(loc)}: not one of {schema['enum']!r}"
    if isinstance(value, str):
        found = _string_problem(schema, value)
    elif isinstance(value, int) and not isinstance(value, bool):
        found = _integer_problem(schema, value)
    elif isinstance(value, list):
        return _array_problem(schema, value, defs, loc)
    elif isinstance(value, dict):
        return _object_problem(schema, value, defs, loc)
    else:
        found = None
    return None if found is None else f"{_where(loc)}: {found}"


def _string_problem(schema: dict[str, Any], value: str) -> str | None:
    if _CONSTRAINED.intersection(schema) and not _is_unicode(value):
        return "a lone surrogate in a constrained string"  # pydantic's string_unicode
    if "minLength" in schema and len(value) < schema["minLength"]:
        return f"shorter than {schema['minLength']} characters"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"longer than {schema['maxLength']} characters"
    if "pattern" in schema:
        try:
            matched = _pattern(schema["pattern"]).search(value) is not None
        except (ValueError, re.error) as exc:
            return f"an unusable pattern: {exc}"
        if not matched:
            return f"does not match {schema['pattern']!r}"
    check = schema.get("x-check")
    if check is not None:
        if check != "timestamp":
            return f"unknown check {check!r}"
        try:
            check_timestamp(value)
        except ValueError as exc:
            return str(exc)
    return None


_CONSTRAINED = frozenset(("minLength", "maxLength", "pattern"))


def _is_unicode(value: str) -> bool:
    """No lone surrogate: a string pydantic can hand to its constraints (it refuses one
    there, and passes it through an unconstrained ``str``)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _integer_problem(schema: dict[str, Any], value: int) -> str | None:
    if "minimum" in schema and value < schema["minimum"]:
        return f"less than {schema['minimum']}"
    if "maximum" in schema and value > schema["maximum"]:
        return f"greater than {schema['maximum']}"
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        return f"not less than {schema['exclusiveMaximum']}"
    return None


def _array_problem(
    schema: dict[str, Any], value: list[Any], defs: dict[str, Any], loc: str
) -> str | None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        return f"{_where(loc)}: fewer than {schema['minItems']} items"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return f"{_where(loc)}: more than {schema['maxItems']} items"
    items = schema.get("items")
    if items is not None:
        for index, item in enumerate(value):
            found = _problem(items, item, defs, _at(loc, index))
            if found is not None:
                return found
    return None


def _object_problem(
    schema: dict[str, Any], value: dict[str, Any], defs: dict[str, Any], loc: str
) -> str | None:
    properties: dict[str, Any] = schema.get("properties", {})
    if schema.get("additionalProperties") is not False:
        return f"{_where(loc)}: a schema that allows unknown fields"
    for key in value:
        if key not in properties:
            return f"{_at(loc, key)}: an unknown field"
    for key in schema.get("required", ()):
        if key not in value:
            return f"{_at(loc, key)}: a required field is missing"
    for key, sub in properties.items():
        if key in value:
            found = _problem(sub, value[key], defs, _at(loc, key))
            if found is not None:
                return found
    check = schema.get("x-check")
    if check is None:
        return None
    rule = _MODEL_CHECKS.get(check)
    found = f"unknown check {check!r}" if rule is None else rule(value)
    return None if found is None else f"{_where(loc)}: {found}"


def _file_state(state: dict[str, Any]) -> str | None:
    """``FileState``'s model validator, on a state whose fields are valid."""
    ref = state["blob_ref"]
    sha256, mode, size = state["sha256"], state["mode"], state["bytes"]
    if state["exists"]:
        if ref is None or sha256 is None or mode is None or size is None:
            return "an existing FileState needs sha256, mode, bytes and blob_ref"
        if ref["sha256"] != sha256:
            return "blob_ref.sha256 must equal sha256"
        if ref["path"] != blob_path(ref["sha256"]):
            return "blob_ref.path must be blobs/sha256/<hex[0:2]>/<hex>"
        return None
    if ref is not None or sha256 is not None or mode is not None or size is not None:
        return "a missing FileState has null sha256, mode, bytes and blob_ref"
    return None


def _state_spec(spec: dict[str, Any]) -> str | None:
    """``StateSpec``'s model validator, on a spec whose fields are valid."""
    exists = spec["exists"]
    if exists != (spec["sha256"] is not None) or exists != (spec["mode"] is not None):
        return "exists=true needs sha256 and mode; exists=false needs neither"
    return None


_MODEL_CHECKS = {"file_state": _file_state, "state_spec": _state_spec}
# the JSON Schema keywords checked here, and ``x-check`` (``wirecheck_gen`` keeps only these)
KEYWORDS = frozenset(
    (
        "$defs",
        "$ref",
        "additionalProperties",
        "anyOf",
        "const",
        "enum",
        "exclusiveMaximum",
        "items",
        "maxItems",
        "maxLength",
        "maximum",
        "minItems",
        "minLength",
        "minimum",
        "pattern",
        "properties",
        "required",
        "type",
        "x-check",
    )
)
