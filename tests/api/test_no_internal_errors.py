"""No bad input answers 500 (protocol: api#http-errors): odd ids in every path and odd bodies on
every POST."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.daemon import Daemon

ODD_IDS = [
    "bnd_%00",
    "bnd_..",
    "..%2F..%2Fetc",
    "op_" + "z" * 40,
    "%00",
    "a" * 5000,
    "bnd_" + "0" * 32 + "%2Fx",
    ".hidden",
    "grt%0A",
    "%E2%80%AE",
    "op_%ff",
]
ROUTES = [
    ("GET", "/v1/grants/{}"),
    ("GET", "/v1/bundles/{}"),
    ("GET", "/v1/bundles/{}/verification"),
    ("GET", "/v1/bundles/{}/verification.dsse"),
    ("POST", "/v1/bundles/{}/preflight"),
    ("GET", "/v1/operations/{}"),
    ("GET", "/v1/operations/{}/receipt"),
    ("GET", "/v1/operations/{}/receipt.dsse"),
    ("POST", "/v1/operations/{}/recover"),
    ("POST", "/v1/operations/{}/rollback"),
    ("POST", "/v1/operations/{}/reconcile"),
    ("GET", "/v1/repositories/{}/snapshots"),
    ("PUT", "/v1/leases/{}/x"),
    ("GET", "/v1/blobs/sha256/{}"),
    ("POST", "/v1/repositories/work/snapshots/{}/restore"),
]
ODD_BODIES = [
    b"",
    b"null",
    b"[]",
    b'"x"',
    b"1e999",
    b'{"fence": -1}',
    b'{"fence": 1e3}',
    b'{"fence": true}',
    b"{" * 5000,
    b'{"\\ud800": 1}',
]
POSTS = [
    ("POST", "/v1/promotions"),
    ("POST", "/v1/grants"),
    ("POST", "/v1/executor-tokens"),
    ("PUT", "/v1/leases/a/b"),
    ("POST", "/v1/operations/op_1/recover"),
    ("POST", "/v1/operations/op_1/reconcile"),
    ("POST", "/v1/repositories/work/snapshots"),
]


@pytest.mark.parametrize(("method", "template"), ROUTES)
def test_odd_ids_never_answer_500(daemon: Daemon, method: str, template: str) -> None:
    body = {"fence": 1, "decision": "abandon", "expected_current_tree": "0" * 40}
    with daemon.operator() as client:
        for odd in ODD_IDS:
            answer = client.request(
                method, template.format(odd), json=None if method == "GET" else body
            )
            assert answer.status_code < 500, (odd, answer.text)
            assert answer.json()["code"]


@pytest.mark.parametrize(("method", "path"), POSTS)
def test_odd_bodies_never_answer_500(daemon: Daemon, method: str, path: str, repo: Path) -> None:
    del repo
    with daemon.operator() as client:
        for body in ODD_BODIES:
            answer = client.request(
                method, path, content=body, headers={"content-type": "application/json"}
            )
            assert answer.status_code < 500, (body[:20], answer.text)
            if answer.status_code >= 400:
                assert answer.json()["code"]
