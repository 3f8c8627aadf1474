"""Known answers for canonical bytes and hashes (RFC 8785, protocol: documents#canonical-json)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone

import pytest

from promoter.domain.canonical import (
    canonical_bytes,
    content_id,
    now_rfc3339,
    projection_sha256,
    rfc3339,
    sha256_hex,
    utcnow,
)


def test_rfc8785_property_sorting_example() -> None:
    # RFC 8785 §3.2.3: keys sorted by UTF-16 code units, non-ASCII emitted as UTF-8.
    document = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
        '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    ).encode()
    assert canonical_bytes(document) == expected


def test_rfc8785_string_escaping_example() -> None:
    # RFC 8785 §3.2.2.2: only the mandatory escapes, lowercase \u00xx for controls.
    value = "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/"
    assert canonical_bytes({"string": value}) == (
        '{"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'.encode()
    )


def test_literals_and_integers_are_canonical() -> None:
    assert canonical_bytes({"b": [True, False, None], "a": -0, "c": 9007199254740991}) == (
        b'{"a":0,"b":[true,false,null],"c":9007199254740991}'
    )


@pytest.mark.parametrize("bad", [1.5, 2**53, -(2**53), {"x": float("nan")}, {1: "a"}, b"x"])
def test_non_canonical_values_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        canonical_bytes({"v": bad})


def test_projection_hash_drops_only_identity_fields() -> None:
    doc = {"id": "x", "digest": "y", "a": 1}
    expected = hashlib.sha256(b'{"a":1}').hexdigest()
    assert projection_sha256(doc, ("id", "digest")) == expected
    assert sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert content_id("bnd", expected) == "bnd_" + expected[:32]


def test_timestamps_are_utc_whole_seconds_with_z() -> None:
    moment = datetime(2026, 11, 30, 22, 5, 9, 999_999, tzinfo=timezone(timedelta(hours=1)))
    assert rfc3339(moment) == "2026-11-30T21:05:09Z"
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05Z"
    with pytest.raises(ValueError):
        rfc3339(datetime(2026, 1, 1))


def test_the_current_second_read_without_datetime_is_rfc3339_of_utcnow() -> None:
    """``now_rfc3339`` (a bundle's ``created_at``, no ``datetime`` loaded) is the text
    ``rfc3339(utcnow())`` gives for the same second."""
    for _ in range(3):  # a second may turn between the two readings, not three times
        before = rfc3339(utcnow())
        text = now_rfc3339()
        if rfc3339(utcnow()) == before:
            assert text == before
            return
    raise AssertionError("the clock turned a second on each of three readings")
