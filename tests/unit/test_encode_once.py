"""A bundle is encoded once: the joined encodings equal the separate ones, byte for byte.

``canonical_with_projection`` builds a document's canonical bytes and those of its
projection from one encoding of each member; ``canonical_sealed`` a receipt's bytes with
its hash from the encoding the hash was made of; ``bundle_bytes`` gives what the audit store
keeps for a submitted bundle, which must be ``canonical(bundle)`` of the parsed model.
``_plain`` is the quick pass of the canonical scan; whenever it says yes the full scan
must too. ``load_json`` refuses a repeated key at any depth.
"""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.domain import canonical
from promoter.domain.canonical import (
    canonical_bytes,
    canonical_sealed,
    canonical_with_projection,
    projection,
    projection_sha256,
)
from promoter.domain.documents import (
    BUNDLE_IDENTITY,
    UNSEALED,
    bundle_bytes,
    bundle_sha256,
    sealed_canonical,
)
from promoter.domain.documents import canonical as model_bytes
from promoter.domain.models import CHECK_ORDER, Check, PatchBundleV1, PatchVerificationReceiptV1
from promoter.domain.parsing import load_json, parse_model
from promoter.errors import BadRequest
from tests.support.flows import sealed_document, state

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
keys = st.one_of(st.sampled_from(["bundle_id", "bundle_sha256", "changes", "a"]), texts)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1), texts
)
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=25,
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(keys, values, max_size=6))
def test_joined_forms_equal_separate_encodings(document: dict[str, Any]) -> None:
    whole, kept = canonical_with_projection(document, BUNDLE_IDENTITY)
    assert whole == canonical_bytes(document) == rfc8785.dumps(document)
    assert kept == canonical_bytes(projection(document, BUNDLE_IDENTITY))


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.one_of(st.sampled_from(["a", "receipt_sha256", "z"]), texts), values))
def test_sealed_bytes_equal_the_sealed_documents_encoding(document: dict[str, Any]) -> None:
    data, digest = canonical_sealed(document, "receipt_sha256")
    assert digest == projection_sha256(document, ("receipt_sha256",))
    sealed = {**document, "receipt_sha256": digest}
    assert data == canonical_bytes(sealed) == rfc8785.dumps(sealed)


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"receipt_sha256": "0" * 64},
        {"a": 1},
        {"z": [1, "é"]},
        {"a": None, "receipt_sha256": "x", "targets": [{"p": i} for i in range(600)]},
        {"\u00e9": 1, "a": True},  # a key past ASCII: encoded apart
    ],
)
def test_a_sealed_receipts_bytes_are_its_canonical_bytes(document: dict[str, Any]) -> None:
    data, digest = canonical_sealed(document, "receipt_sha256")
    assert digest == projection_sha256(document, ("receipt_sha256",))
    assert data == rfc8785.dumps({**document, "receipt_sha256": digest})


def test_a_sealed_models_bytes_are_canonical_of_the_sealed_model() -> None:
    receipt = PatchVerificationReceiptV1(
        schema_="PatchVerificationReceiptV1",
        receipt_sha256=UNSEALED,
        bundle_id="bnd_" + "1" * 32,
        bundle_sha256="a" * 64,
        grant_id="grt_one",
        grant_sha256="b" * 64,
        executor_run_id="run_1",
        repository_identity="repo_" + "2" * 32,
        status="passed",
        checks=[
            Check(name=name, status="passed", evidence_sha256="c" * 64, detail="")
            for name in CHECK_ORDER
        ],
    )
    sealed_receipt, document, data = sealed_canonical(receipt)
    assert data == model_bytes(sealed_receipt) == canonical_bytes(document)
    assert sealed_receipt.receipt_sha256 == document["receipt_sha256"] != UNSEALED


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(values)
def test_quick_scan_never_passes_what_the_full_scan_refuses(value: Any) -> None:
    if canonical._plain(value):
        assert canonical._scan_slowly(value) is True


@pytest.mark.parametrize(
    "value", [1.5, 2**53, {1: "a"}, {"\u00e9": 1}, ["x", [True, {"k": 2**60}]], b"x"]
)
def test_quick_scan_refuses_what_is_not_plain(value: Any) -> None:
    assert not canonical._plain(value)


def test_long_lists_are_sliced_to_the_same_text() -> None:
    items = [{"path": f"p{i}", "n": i, "\u00e9": None} for i in range(canonical.SLICE * 3 + 7)]
    assert canonical_bytes(items) == rfc8785.dumps(items)
    assert canonical_bytes({"x": items, "y": 1}) == rfc8785.dumps({"x": items, "y": 1})


def test_refused_values_still_raise_through_both_forms() -> None:
    with pytest.raises(ValueError):
        canonical_with_projection({"a": [1.5]}, ("b",))
    with pytest.raises(ValueError):
        canonical_with_projection({"a": "\ud800"}, ("b",))


def _bundle(changes: int) -> dict[str, Any]:
    wire: list[dict[str, Any]] = [
        {
            "path": f"d{i // 100}/f\u00e9{i:05d}.txt",
            "operation": "create",
            "old": state(None),
            "new": state(b"%d\n" % i, "100755" if i % 3 else "100644"),
        }
        for i in range(changes)
    ]
    return sealed_document(wire)


@pytest.mark.parametrize("changes", [0, 1, canonical.SLICE + 1, 700])
def test_bundle_bytes_are_those_of_the_parsed_model(changes: int) -> None:
    document = _bundle(changes)
    encoded = bundle_bytes(document)
    bundle = parse_model(PatchBundleV1, document)
    assert encoded.canonical == model_bytes(bundle) == rfc8785.dumps(document)
    assert encoded.sha256 == bundle_sha256(document) == bundle.bundle_sha256
    assert bundle_bytes(document, parsed=True) == encoded  # the walk skipped, the same bytes
    assert bundle_bytes(bundle.wire(), parsed=True) == encoded


def test_a_parsed_bundle_with_non_ascii_paths_encodes_as_rfc8785() -> None:
    document = _bundle(3)
    for index, change in enumerate(document["changes"]):
        change["path"] = f"src/\u00e9t\u00e9-\U0001f600-{index}\u2028.txt"
    bundle = parse_model(PatchBundleV1, document)
    encoded = bundle_bytes(document, parsed=True)
    assert encoded.canonical == rfc8785.dumps(document) == model_bytes(bundle)
    assert encoded.sha256 == bundle_sha256(document)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 1, "a": 2}',
        b'{"changes": [{"path": "x", "path": "y"}]}',
        b'[{"k": {"n": 1, "m": 2, "n": 1}}]',
    ],
)
def test_a_repeated_key_is_refused_at_any_depth(raw: bytes) -> None:
    with pytest.raises(BadRequest, match="duplicate object key"):
        load_json(raw)


def test_distinct_keys_parse_as_dicts() -> None:
    assert load_json(b'{"a": {"b": 1, "c": [{"b": 2}]}, "b": null}') == {
        "a": {"b": 1, "c": [{"b": 2}]},
        "b": None,
    }
