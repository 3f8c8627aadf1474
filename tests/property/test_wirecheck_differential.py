"""The pydantic-free validator gives every document the verdict of its strict model.

``promoter.domain.wirecheck.problem`` decides what ``receipt verify`` accepts without
pydantic, so it must never accept a document the model refuses, nor refuse one it
accepts. Fed the same documents, both must agree: valid seeds of every kind the command
line checks (receipts of the three kinds with their optional parts, a bundle, derived
and merged, a grant, a DSSE envelope), the same documents after hypothesis's edits with
hostile values at every place (wrong types, bools and floats for integers, limits and
one past them, a final newline after a pattern, lone surrogates, impossible dates, a
FileState or StateSpec that contradicts itself, unknown and missing fields), arbitrary
JSON, and the garbage of the offline verifier's own tests.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from promoter.domain.models import WIRE_MODELS
from promoter.domain.wirecheck import problem
from promoter.domain.wirecheck_gen import NAMES
from tests.support.flows import state
from tests.unit.test_signing import bundle, grant, promotion, rollback, verification


def model_accepts(name: str, document: Any) -> bool:
    try:
        WIRE_MODELS[name].model_validate(document)
    except ValidationError:
        return False
    return True


def agree(name: str, document: Any) -> None:
    found = problem(name, document)
    accepted = model_accepts(name, document)
    assert (found is None) == accepted, (name, found, json.dumps(document, default=repr)[:2000])


def _hex(c: str, n: int) -> str:
    return c * n


def _rich_rollback() -> dict[str, Any]:
    document = rollback()
    document["targets"] += [
        {
            "path": "gone.txt",
            "result": "failed",
            "reason": "io_error",
            "error": {"code": "io_error", "errno": 5, "detail": "EIO"},
            "actual": None,
        },
        {
            "path": "dir",
            "result": "conflict",
            "reason": "conflict",
            "error": None,
            "actual": {
                "kind": "directory",
                "exists": True,
                "sha256": None,
                "mode": None,
                "bytes": None,
            },
        },
    ]
    document["removed_directories"] = ["a/b"]
    return document


def _rich_promotion() -> dict[str, Any]:
    document = promotion()
    document["targets"].append({"path": "old.txt", "exists": False, "sha256": None, "mode": None})
    composed = [{"path": "src/app.py", "hunks": [1, 3], "by": "operator"}]
    return {
        **document,
        "base_operation": "op_" + "9" * 32,
        "parent_bundle_id": "bnd_" + "8" * 32,
        "declined_paths": ["x.txt"],
        "composed": composed,
    }


def _rich_bundle() -> dict[str, Any]:
    document = bundle()
    document["changes"].append(
        {"path": "new.sh", "operation": "create", "old": state(None), "new": state(b"x", "100755")}
    )
    derived = {
        "parent_bundle_id": "bnd_" + _hex("7", 32),
        "parent_bundle_sha256": _hex("7", 64),
        "declined_paths": ["z"],
        "composed": [{"path": "src/app.py", "hunks": [2], "by": "op"}],
    }
    merge = {
        "bundle_id": "bnd_" + _hex("6", 32),
        "bundle_sha256": _hex("6", 64),
        "paths": [
            {
                "path": "src/app.py",
                "old_sha256": _hex("1", 64),
                "current_sha256": _hex("2", 64),
                "new_sha256": _hex("3", 64),
            }
        ],
    }
    return {**document, "derived_from": derived, "merge": merge}


def _rich_grant() -> dict[str, Any]:
    precondition = {
        "path": "src/app.py",
        "old": {"exists": True, "sha256": _hex("a", 64), "mode": "100644"},
        "index": {"mode": "160000", "oid": _hex("b", 40), "stage": 0},
    }
    absent = {"path": "new", "old": {"exists": False, "sha256": None, "mode": None}, "index": None}
    return {
        **grant(),
        "target_preconditions": [precondition, absent],
        "symlinks": "inside",
        "approval": "required",
        "base_operation": "op_" + _hex("c", 32),
    }


def _envelope() -> dict[str, Any]:
    return {
        "payloadType": "application/vnd.in-toto+json",
        "payload": "e30=",
        "signatures": [{"keyid": _hex("d", 64), "sig": "AAAA"}],
    }


SEEDS: dict[str, list[dict[str, Any]]] = {
    "PatchVerificationReceiptV1": [verification()],
    "PatchPromotionReceiptV1": [promotion(), _rich_promotion()],
    "RollbackReceiptV1": [rollback(), _rich_rollback()],
    "PatchBundleV1": [bundle(), _rich_bundle()],
    "GrantV1": [grant(), _rich_grant()],
    "DsseEnvelope": [_envelope(), {**_envelope(), "signatures": []}],
}


def test_every_seed_is_valid_and_every_checked_document_has_seeds() -> None:
    assert set(SEEDS) == set(NAMES)
    for name, seeds in SEEDS.items():
        for seed in seeds:
            assert problem(name, seed) is None
            assert model_accepts(name, seed)


LIMITS = (0, 1, 3, 4, 59, 60, 61, 199, 200, 201, 499, 500, 501, 4096, 4097, 16384, 16385)
HOSTILE: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    3,
    4,
    2**31 - 1,
    2**31,
    2**53 - 1,
    2**53,
    2**64,
    0.0,
    1.0,
    0.5,
    "",
    "0",
    "1",
    "\ud800",
    "\udcff" * 2,
    "a\x00b",
    "none",
    "required",
    "passed",
    "create",
    "100644",
    "160000",
    "directory",
    "rolled_back",
    "refs/heads/main",
    "refs/heads/a b",
    "refs/heads/ma\u00efn",
    "2026-11-30T21:06:00Z",
    "2026-02-30T21:06:00Z",
    "2026-11-30T21:06:00Z\n",
    "2026-11-30T21:06:00+00:00",
    "2026-11-30T21:06:00.5Z",
    "\uff12026-11-30T21:06:00Z",
    "2026-11-30T24:00:00Z",
    "blobs/sha256/aa/" + "a" * 64,
    "a" * 64,
    "a" * 64 + "\n",
    "A" * 64,
    "a" * 40,
    "a" * 40 + "\n",
    "bnd_" + "a" * 32,
    "bnd_" + "a" * 32 + "\n",
    "op_" + "a" * 32,
    "evt_" + "a" * 32,
    "repo_" + "a" * 32,
    "name.with:colon-1",
    "application/vnd.in-toto+json",
    [],
    [None],
    ["create"],
    [1],
    {},
    {"exists": False, "sha256": None, "mode": None, "bytes": None, "blob_ref": None},
    {"exists": False, "sha256": None, "mode": None},
    {"keyid": "k", "sig": "s"},
]


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, sub in value.items():
            found += _places(sub, (*path, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            found += _places(sub, (*path, index))
    return found


def _get(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


def _neighbours(value: Any) -> list[Any]:
    """Values next to ``value``: its edits and its kind at the limits."""
    if isinstance(value, bool):
        return [not value, int(value)]
    if isinstance(value, int):
        return [value - 1, value + 1, float(value), str(value)]
    if isinstance(value, str):
        edits = [
            value + "\n",
            "\n" + value,
            value.upper(),
            value[:-1],
            value + "0",
            value + "\ud800",
        ]
        return [*edits, *("x" * n for n in LIMITS)]
    return []


@st.composite
def mutated(draw: st.DrawFn, name: str) -> dict[str, Any]:
    document = copy.deepcopy(draw(st.sampled_from(SEEDS[name])))
    for _ in range(draw(st.integers(1, 3))):
        places = _places(document)
        path = draw(st.sampled_from(places))
        target = _get(document, path)
        action = draw(st.sampled_from(["replace", "replace", "neighbour", "drop", "add", "dup"]))
        if action == "neighbour" and _neighbours(target):
            new: Any = draw(st.sampled_from(_neighbours(target)))
        elif action in ("drop", "add") and isinstance(target, dict) and target:
            key = draw(st.sampled_from(sorted(target)))
            if action == "drop":
                del target[key]
                continue
            new = {**target, draw(st.sampled_from([key + "x", "x", "schema", "Exists"])): 0}
        elif action == "dup" and isinstance(target, list) and target:
            new = [*target, copy.deepcopy(target[0])]
        else:
            new = copy.deepcopy(draw(st.sampled_from(HOSTILE)))
        if not path:
            return new if isinstance(new, dict) else document
        _get(document, path[:-1])[path[-1]] = new
    return document


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_edited_documents_get_the_models_verdict(name: str, data: st.DataObject) -> None:
    agree(name, data.draw(mutated(name)))


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(), max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=100, deadline=None)
@given(value=JSON)
def test_arbitrary_json_gets_the_models_verdict(name: str, value: Any) -> None:
    agree(name, value)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_seed_with_an_arbitrary_value_somewhere_gets_the_models_verdict(
    name: str, data: st.DataObject
) -> None:
    document = copy.deepcopy(data.draw(st.sampled_from(SEEDS[name])))
    path = data.draw(st.sampled_from(_places(document)[1:]))
    _get(document, path[:-1])[path[-1]] = data.draw(JSON)
    agree(name, document)


def test_the_verifiers_garbage_gets_the_models_verdict() -> None:
    for text in ("[]", '{"hello":"world"}', '{"schema":"PatchBundleV2"}'):
        for name in NAMES:
            agree(name, json.loads(text))
    agree("DsseEnvelope", {"payload": "", "payloadType": "x"})
    agree("DsseEnvelope", {"payload": "%%%", "payloadType": "x", "signatures": []})


def test_the_schema_field_by_its_python_name_is_refused_where_the_model_takes_it() -> None:
    """The one known difference, and on the refusing side: a top-level document may name
    its ``schema`` field ``schema_`` for the model (``populate_by_name``); the validator
    reads only the wire name. ``check_document`` refuses a document without ``schema``
    before either is asked, so the verifier's verdict is the same."""
    document = verification()
    document["schema_"] = document.pop("schema")
    assert model_accepts("PatchVerificationReceiptV1", document)
    assert problem("PatchVerificationReceiptV1", document) == "schema_: an unknown field"
