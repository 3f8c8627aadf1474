"""Property: any valid bundle's id and hash recompute after a JSON round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.domain.documents import bundle_sha256, seal_bundle
from promoter.domain.models import FileState, PatchBundleV1

component = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x2FF, exclude_characters="/\\"),
    min_size=1,
    max_size=12,
).filter(lambda c: c not in (".", "..") and c.casefold() != ".git")
paths = st.lists(component, min_size=1, max_size=3).map("/".join)
digests = st.binary(min_size=32, max_size=32).map(bytes.hex)
sizes = st.integers(min_value=0, max_value=2**40)


@st.composite
def bundles(draw: st.DrawFn) -> dict[str, object]:
    chosen = draw(st.lists(paths, min_size=0, max_size=6, unique=True))
    changes = []
    for path in sorted(chosen, key=lambda p: p.encode()):
        new = FileState.of(draw(digests), draw(st.sampled_from(["100644", "100755"])), draw(sizes))
        changes.append(
            {
                "path": path,
                "operation": "create",
                "old": FileState.missing().wire(),
                "new": new.wire(),
            }
        )
    document = {
        "schema": "PatchBundleV1",
        "bundle_id": "bnd_" + "0" * 32,
        "bundle_sha256": "0" * 64,
        "grant_id": draw(st.from_regex(r"grt_[a-z0-9]{1,10}", fullmatch=True)),
        "grant_sha256": draw(digests),
        "executor_run_id": "run_1",
        "repository_identity": "repo_" + "a" * 32,
        "base_commit": "b" * 40,
        "base_tree": "c" * 40,
        "changes": changes,
        "change_count": len(changes),
        "total_bytes": sum(int(c["new"]["bytes"]) for c in changes),  # type: ignore[index]
        "created_at": "2026-11-30T21:05:09Z",
    }
    return seal_bundle(document)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(bundles())
def test_bundle_id_recomputes_after_json_round_trip(document: dict[str, object]) -> None:
    wire = json.loads(json.dumps(document, ensure_ascii=False))
    parsed = PatchBundleV1.model_validate(wire)
    again = parsed.wire()
    assert again == wire
    assert bundle_sha256(again) == parsed.bundle_sha256
    assert parsed.bundle_id == "bnd_" + parsed.bundle_sha256[:32]
