"""Small request bodies, validated by the strict models, answer exactly as before.

Each case is one malformed body a client (or an attacker probing for coercion) might
send; each must be refused with ``validation_failed`` (422) and change nothing, as the
hand-written checks the models replaced did: no ``null`` for a field, no ``true`` for a
number, no ``1.0`` for a fence, no unknown field, nothing but an object.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.daemon import Daemon

OP = "/v1/operations/op_" + "0" * 32
BUNDLE = "/v1/bundles/bnd_" + "0" * 32
GOOD_PROMOTION = {"bundle_id": "bnd_x", "verification_receipt_sha256": "0" * 64, "fence": 1}
CASES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/executor-tokens", {"executor_run_id": None}),
    ("POST", "/v1/executor-tokens", {"executor_run_id": "run 1"}),
    ("POST", "/v1/executor-tokens", {"executor_run_id": "r" * 201}),
    ("POST", "/v1/executor-tokens", {"executor_run_id": "run_1", "ttl_seconds": True}),
    ("POST", "/v1/executor-tokens", {"executor_run_id": "run_1", "ttl_seconds": 60.0}),
    ("POST", "/v1/executor-tokens", {"executor_run_id": "run_1", "ttl_seconds": 0}),
    ("POST", "/v1/executor-tokens", {"executor_run_id": "run_1", "ttl_seconds": 10**9}),
    ("POST", "/v1/executor-tokens", {"executor_run_id": "run_1", "ttl_seconds": None}),
    ("POST", "/v1/executor-tokens", {"executor_run_id": "run_1", "role": "operator"}),
    ("POST", "/v1/executor-tokens", ["run_1"]),
    ("POST", "/v1/promotions", {**GOOD_PROMOTION, "fence": True}),
    ("POST", "/v1/promotions", {**GOOD_PROMOTION, "fence": 1.0}),
    ("POST", "/v1/promotions", {**GOOD_PROMOTION, "fence": -1}),
    ("POST", "/v1/promotions", {**GOOD_PROMOTION, "fence": 2**53}),
    ("POST", "/v1/promotions", {**GOOD_PROMOTION, "fence": "1"}),
    ("POST", "/v1/promotions", {**GOOD_PROMOTION, "wait": 1}),
    ("POST", "/v1/promotions", {**GOOD_PROMOTION, "wait": None}),
    ("POST", "/v1/promotions", {**GOOD_PROMOTION, "bundle_id": 7}),
    ("POST", "/v1/promotions", {**GOOD_PROMOTION, "force": True}),
    ("POST", "/v1/promotions", {"bundle_id": "bnd_x", "fence": 1}),
    ("POST", f"{BUNDLE}/preflight", {"fence": None}),
    ("POST", f"{BUNDLE}/preflight", {"fence": False}),
    ("POST", f"{BUNDLE}/preflight", {"fence": 1, "dry": True}),
    ("POST", f"{BUNDLE}/preflight", "fence"),
    ("POST", f"{OP}/recover", {}),
    ("POST", f"{OP}/recover", {"fence": None}),
    ("POST", f"{OP}/recover", {"fence": 1e3}),
    ("POST", f"{OP}/reconcile", {"note": "no decision"}),
    ("POST", f"{OP}/reconcile", {"decision": ["abandon"]}),
    ("POST", f"{OP}/reconcile", {"decision": "abandon", "note": None}),
    ("POST", f"{OP}/rollback", {"note": 1}),
    ("POST", f"{OP}/rollback", {"reason": "x"}),
    ("POST", "/v1/repositories/work/snapshots", {"label": None}),
    ("POST", "/v1/repositories/work/snapshots", {"label": ["x"]}),
    ("POST", "/v1/repositories/work/snapshots", {"tree": "0" * 40}),
    ("POST", "/v1/repositories/work/snapshots/" + "0" * 40 + "/restore", {}),
    ("POST", "/v1/repositories/work/snapshots/" + "0" * 40 + "/restore", None),
    (
        "POST",
        "/v1/repositories/work/snapshots/" + "0" * 40 + "/restore",
        {"expected_current_tree": 40},
    ),
]


@pytest.mark.parametrize(("method", "path", "body"), CASES)
def test_coerced_or_unknown_fields_are_refused_as_before(
    daemon: Daemon, method: str, path: str, body: Any
) -> None:
    with daemon.operator() as client:
        answer = client.request(method, path, json=body)
        assert (answer.status_code, answer.json()["code"]) == (
            422,
            "validation_failed",
        ), answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["type"] == "/problems/validation_failed"
    with daemon.operator() as client:
        assert client.get("/v1/operations").json() == {"operations": []}


def test_an_empty_body_still_means_no_fields_where_the_body_is_optional(daemon: Daemon) -> None:
    with daemon.operator() as client:
        answer = client.post(f"{BUNDLE}/preflight", content=b"")
        assert (answer.status_code, answer.json()["code"]) == (404, "not_found")
        snapshot = client.post("/v1/repositories/work/snapshots", content=b"  ")
        assert snapshot.status_code == 201, snapshot.text
        assert snapshot.json()["label"] == ""
