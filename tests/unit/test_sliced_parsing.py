"""Long lists parsed and encoded in slices give exactly the whole-document results.

``parse_model`` validates a bundle's changes a slice at a time and
``canonical_bytes`` encodes them a slice at a time (so a worker thread does not hold the
GIL for long); both must equal the single-call results, errors included.
"""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from pydantic import ValidationError

from promoter.domain import canonical, parsing
from promoter.domain.models import PatchBundleV1
from promoter.errors import ValidationFailed
from tests.support.flows import sealed_document, state


def _bundle(changes: int) -> dict[str, Any]:
    wire = [
        {
            "path": f"d{i // 100}/f\u00e9{i:05d}\t.txt",
            "operation": "create",
            "old": state(None),
            "new": state(b"%d\n\x00\x1f" % i),
        }
        for i in range(changes)
    ]
    return sealed_document(wire, total_bytes=0)


@pytest.mark.parametrize("changes", [0, 1, canonical.SLICE, canonical.SLICE + 1, 1000])
def test_sliced_canonical_bytes_equal_rfc8785(changes: int) -> None:
    document = _bundle(changes)
    assert canonical.canonical_bytes(document) == rfc8785.dumps(document)


@pytest.mark.parametrize("changes", [parsing.SLICE - 1, parsing.SLICE + 1, 1000])
def test_sliced_validation_equals_one_call(changes: int) -> None:
    document = _bundle(changes)
    assert parsing.parse_model(PatchBundleV1, document) == PatchBundleV1.model_validate(document)


def test_invalid_change_deep_in_a_long_list_is_reported_where_it_is() -> None:
    document = _bundle(1000)
    document["changes"][700]["operation"] = "rename"
    with pytest.raises(ValidationError) as whole:
        PatchBundleV1.model_validate(document)
    with pytest.raises(ValidationFailed) as sliced:
        parsing.parse_model(PatchBundleV1, document)
    assert str(sliced.value).startswith("PatchBundleV1: changes.700.operation: ")
    assert sliced.value.context["errors"][0]["loc"] == [
        str(p) for p in whole.value.errors()[0]["loc"]
    ]
