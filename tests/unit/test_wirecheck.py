"""The pydantic-free validator and its generator fail closed.

What the generator does not know (a keyword, a model validator, a field validator) stops
generation; what the validator meets that it does not know refuses the document; a
document the validator refuses is refused by the offline verifier even when the model
would take it. The verdicts themselves are compared with the models' in
``tests/property/test_wirecheck_differential.py``.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import AfterValidator, BaseModel, field_validator, model_validator

from promoter.domain import wirecheck, wirecheck_gen
from promoter.domain.wire_schemas import SCHEMAS
from promoter.engine.receipts import signing
from promoter.errors import ReceiptInvalid
from tests.unit.test_signing import jcs, verification


class _Checked(BaseModel):
    value: int

    @model_validator(mode="after")
    def _extra_rule(self) -> _Checked:
        return self


class _FieldChecked(BaseModel):
    value: int

    @field_validator("value")
    @classmethod
    def _positive(cls, value: int) -> int:
        return value


class _Transformed(BaseModel):
    value: Annotated[str, AfterValidator(str.strip)]


@pytest.mark.parametrize("model", [_Checked, _FieldChecked, _Transformed])
def test_the_generator_refuses_a_rule_the_validator_does_not_reproduce(
    model: type[BaseModel],
) -> None:
    node: dict[str, Any] = {"properties": {"value": {}}}
    with pytest.raises(ValueError, match="validator"):
        wirecheck_gen._mark(model, node)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "format": "date-time"},
        {"type": "string", "pattern": "[0-9]+"},
        {"type": "object", "patternProperties": {}},
    ],
)
def test_the_generator_refuses_what_the_validator_cannot_read(schema: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="validator"):
        wirecheck_gen._strip(schema)


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "string", "format": "date-time"}, "x"),
        ({"type": "string", "x-check": "uuid"}, "x"),
        ({"type": "object", "properties": {}, "additionalProperties": False, "x-check": "y"}, {}),
        ({"type": "object", "properties": {}}, {}),
        ({"type": "number"}, 1),
        ({"$ref": "#/$defs/Absent"}, {}),
    ],
)
def test_the_validator_refuses_what_it_does_not_know(schema: dict[str, Any], value: Any) -> None:
    assert wirecheck._problem(schema, value, {}, "") is not None


def test_every_pattern_matches_the_whole_string_only() -> None:
    sha = SCHEMAS["PatchVerificationReceiptV1"]["properties"]["receipt_sha256"]["pattern"]
    assert wirecheck._pattern(sha).search("a" * 64)
    assert wirecheck._pattern(sha).search("a" * 64 + "\n") is None


def test_the_verifier_refuses_what_the_validator_refuses_even_if_the_model_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = jcs(verification())
    assert signing.verify_document(data, None).schema == "PatchVerificationReceiptV1"
    monkeypatch.setattr(signing, "problem", lambda name, document: "checks: made up")
    with pytest.raises(
        ReceiptInvalid, match="not a valid PatchVerificationReceiptV1: checks: made up"
    ):
        signing.verify_document(data, None)


def test_a_refusal_reads_as_the_models_error() -> None:
    document = {**verification(), "status": "maybe"}
    with pytest.raises(
        ReceiptInvalid, match="not a valid PatchVerificationReceiptV1: status: Input should be"
    ):
        signing.check_document(jcs(document))


def test_timestamps_are_refused_exactly_where_strptime_refuses_them() -> None:
    """``check_timestamp`` reads the fields itself (no ``datetime`` or ``_strptime``
    loaded): the dates and times it accepts are those ``datetime.strptime`` accepts, leap
    days and second 60 included, and a refusal says what ``datetime`` says."""
    from datetime import datetime

    from promoter.domain.wire_formats import check_timestamp

    def accepted(check: Any, value: str) -> bool:
        try:
            check(value)
        except ValueError:
            return False
        return True

    def refusal(value: str) -> str:
        with pytest.raises(ValueError) as ours:
            check_timestamp(value)
        fields = (value[0:4], value[5:7], value[8:10], value[11:13], value[14:16], value[17:19])
        with pytest.raises(ValueError) as theirs:
            datetime(*(int(field) for field in fields))
        assert (
            str(ours.value) == f"timestamp is not a date and time of the calendar: {theirs.value}"
        )
        return str(ours.value)

    def strptime(value: str) -> None:
        datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")

    seen = 0
    for year in ("0000", "0001", "1900", "2000", "2023", "2024", "9999"):
        for month in ("00", "01", "02", "04", "12", "13"):
            for day in ("00", "01", "28", "29", "30", "31", "32"):
                for time in ("00:00:00", "23:59:59", "24:00:00", "12:60:00", "12:00:60"):
                    value = f"{year}-{month}-{day}T{time}Z"
                    assert accepted(check_timestamp, value) == accepted(strptime, value), value
                    seen += accepted(strptime, value)
                    if not accepted(strptime, value):
                        refusal(value)
    assert seen > 100
