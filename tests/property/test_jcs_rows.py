"""Property: the row writers of ``jcs_rows`` answer exactly what the general encoder does.

Rows are drawn near the expected shapes and off them (another key, a missing key, a
float, a bool or a ``str`` subclass where a string or integer belongs, integers beyond
+-2^53, lone surrogates, text that needs escaping): whatever the row, a writer gives the
bytes of ``canonical_bytes`` (equal to ``rfc8785``'s where that accepts the value) or
raises what it raises. A bundle's changes written row by row give its canonical bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.domain import jcs_rows
from promoter.domain.canonical import _dumps_list, canonical_bytes
from promoter.domain.documents import bundle_bytes
from promoter.domain.documents import canonical as model_bytes
from promoter.domain.models import PatchBundleV1
from promoter.domain.parsing import load_json, parse_model
from tests.support.flows import sealed_document, state


class Text(str):
    """A ``str`` subclass: the general encoder's business, never a row writer's."""


plain_text = st.text(max_size=12)  # controls, quotes, backslashes and non-ASCII included
surrogates = st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF))
odd = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.integers(min_value=2**53 - 2, max_value=2**60),
    st.integers(min_value=-(2**60), max_value=-(2**53) + 2),
    plain_text.map(Text),
    surrogates,
    st.lists(st.integers(), max_size=2),
)
ints = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)


def strings(rare: float = 0.1) -> st.SearchStrategy[Any]:
    return st.one_of(plain_text, odd) if rare else plain_text


def maybe(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), values)


def reshaped(rows: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """A row as drawn, or with a key added or dropped, or not a dict at all."""
    return st.one_of(
        rows,
        rows.map(lambda row: {**row, "extra": 1}),
        rows.map(lambda row: dict(list(row.items())[1:])),
        st.just(None),
        st.just(["not", "a", "row"]),
    )


blob_rows = st.fixed_dictionaries({"sha256": strings(), "bytes": st.one_of(maybe(ints), odd)})
allow_rows = st.fixed_dictionaries(
    {"path": strings(), "operation": strings(), "pattern": maybe(strings())}
)
states = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "exists": st.one_of(st.booleans(), odd),
            "sha256": maybe(strings()),
            "mode": maybe(strings()),
        }
    ),
    st.just({"exists": True}),
)
precondition_rows = st.fixed_dictionaries(
    {"path": strings(), "source": strings(), "expected": states}
)
refs = maybe(st.fixed_dictionaries({"path": strings(), "sha256": strings()}))
file_states = st.fixed_dictionaries(
    {
        "exists": st.one_of(st.booleans(), odd),
        "sha256": maybe(strings()),
        "mode": maybe(strings()),
        "bytes": st.one_of(maybe(ints), odd),
        "blob_ref": st.one_of(refs, st.just({"path": "p"})),
    }
)
changes = st.fixed_dictionaries(
    {"path": strings(), "operation": strings(), "old": file_states, "new": reshaped(file_states)}
)


def outcome(encode: Callable[[Any], bytes], value: Any) -> bytes | type[BaseException]:
    try:
        return encode(value)
    except Exception as exc:  # the same class of error, whoever raised it
        return type(exc)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("writer", "rows"),
    [
        (jcs_rows.blob_rows, blob_rows),
        (jcs_rows.allowlist_rows, allow_rows),
        (jcs_rows.precondition_rows, precondition_rows),
    ],
    ids=["blob", "allowlist", "preconditions"],
)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_evidence_rows_are_written_as_the_general_encoder_writes_them(
    writer: Callable[[Any], bytes], rows: st.SearchStrategy[dict[str, Any]], data: st.DataObject
) -> None:
    drawn = data.draw(st.lists(reshaped(rows), max_size=6))
    expected = outcome(canonical_bytes, drawn)
    assert outcome(writer, drawn) == expected
    if isinstance(expected, bytes):
        assert expected == rfc8785.dumps(drawn)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(changes, max_size=5))
def test_changes_are_written_as_the_general_encoder_writes_them(drawn: list[Any]) -> None:
    written = jcs_rows.changes_text(drawn)
    if written is not None:
        assert written == _dumps_list(drawn)


def test_a_row_the_writer_refuses_sends_the_whole_list_to_the_general_encoder() -> None:
    rows: list[Any] = [{"sha256": "a" * 64, "bytes": 1}, {"sha256": "b", "bytes": 1.5}]
    with pytest.raises(ValueError, match="floats"):
        jcs_rows.blob_rows(rows)  # the general encoder's own refusal
    rows[1] = {"sha256": "\ud800", "bytes": 2}
    assert outcome(jcs_rows.blob_rows, rows) == outcome(canonical_bytes, rows)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=10),  # quotes, backslashes, controls, non-ASCII
            st.sampled_from([None, b"", b"x", b"text\n"]),
            st.sampled_from([b"new", b"", b"other\x00bytes"]),
            st.sampled_from(["100644", "100755"]),
        ),
        max_size=5,
        unique_by=lambda item: item[0],
    )
)
def test_a_parsed_bundle_written_row_by_row_has_its_canonical_bytes(
    items: list[tuple[str, bytes | None, bytes, str]],
) -> None:
    wire = [
        {
            "path": path,
            "operation": "create" if old is None else "modify",
            "old": state(old),
            "new": state(new, mode),
        }
        for path, old, new, mode in sorted(items, key=lambda item: item[0].encode())
        if old != new
    ]
    document = sealed_document(wire)
    data = load_json(rfc8785.dumps(document))
    bundle = parse_model(PatchBundleV1, data)
    written = bundle_bytes(data, parsed=True).canonical
    assert written == model_bytes(bundle) == rfc8785.dumps(document)
    assert jcs_rows.changes_text(data["changes"]) is not None  # written row by row
