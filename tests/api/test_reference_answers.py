"""Answers as docs/reference/api.md and docs/reference/errors.md state them, through a real
daemon: the headers a problem carries are sent and published in ``/openapi.json``.

A 405 of the HTTP layer keeps the ``Allow`` header that names the methods the path takes
(the problem handler once dropped every header of the HTTP layer); a 401 carries
``WWW-Authenticate: Bearer``; each problem response of the served document names the
headers its codes carry (``WWW-Authenticate``, ``Retry-After``, ``Location``). A
bundle's promotions are asked of a known bundle: an unknown one is ``404 bundle_unknown``
to every role, never an empty list; an unknown ``status`` filter of the operations is
refused (a typo once listed nothing); ``promoter hosts admit`` of a host that is not
fenced says that nothing changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.support.daemon import Daemon
from tests.support.promotion import submit


def test_a_method_the_path_does_not_take_is_405_naming_the_methods_it_takes(
    daemon: Daemon,
) -> None:
    with daemon.orchestrator() as client:
        answer = client.delete("/v1/repositories")
    assert answer.status_code == 405
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["allow"] == "GET"
    assert answer.json() == {
        "code": "method_not_allowed",
        "detail": "Method Not Allowed",
        "instance": "/v1/repositories",
        "status": 405,
        "title": "Method Not Allowed",
        "type": "/problems/method_not_allowed",
    }


def _responses(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (operation["operationId"], status, answer)
        for methods in document["paths"].values()
        for operation in methods.values()
        for status, answer in operation["responses"].items()
    ]


def test_every_problem_response_publishes_the_headers_its_codes_carry(daemon: Daemon) -> None:
    document = httpx.get(f"{daemon.url}/openapi.json", timeout=60).json()
    wanted = {
        "`unauthenticated`": "WWW-Authenticate",
        "`too_many_requests`": "Retry-After",
        "`database_busy`": "Retry-After",
        "`database_unavailable`": "Retry-After",
        "`owned_by_other_host`": "Location",
    }
    missing = [
        (operation, status, header)
        for operation, status, answer in _responses(document)
        for code, header in wanted.items()
        if code in answer["description"] and header not in answer.get("headers", {})
    ]
    assert missing == []
    published = {
        status: answer["headers"]
        for operation, status, answer in _responses(document)
        if operation == "getBlob" and "headers" in answer
    }
    assert sorted(published) == ["401", "429", "503"]
    assert published["429"]["Retry-After"]["schema"] == {"type": "integer", "minimum": 1}
    answer = httpx.get(f"{daemon.url}/v1/repositories", timeout=60)
    assert (answer.status_code, answer.json()["code"]) == (401, "unauthenticated")
    assert answer.headers["www-authenticate"] == "Bearer"


def test_the_promotions_of_an_unknown_bundle_are_404_not_an_empty_list(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    _, bundle, _ = submit(daemon, repo, identity, [("src/new.txt", None, b"new\n")])
    known, unknown = bundle["bundle_id"], "bnd_" + "0" * 32
    for client in (daemon.orchestrator(), daemon.operator()):
        with client:
            answer = client.get(f"/v1/bundles/{known}/operations")
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"bundle_id": known, "operations": []}
            answer = client.get(f"/v1/bundles/{unknown}/operations")
            assert answer.status_code == 404
            assert answer.json()["code"] == "bundle_unknown"
            assert answer.json()["detail"] == f"no bundle {unknown!r} is stored"
    with daemon.executor("run_1") as executor:
        answer = executor.get(f"/v1/bundles/{unknown}/operations")
    assert (answer.status_code, answer.json()["code"]) == (404, "not_found")


def test_an_unknown_status_filter_is_refused_not_a_list_of_nothing(daemon: Daemon) -> None:
    with daemon.operator() as client:
        refused = client.get("/v1/operations", params={"status": "complete"})
        listed = client.get("/v1/operations", params={"status": "completed"})
    assert (refused.status_code, refused.json()["code"]) == (422, "validation_failed")
    assert refused.json()["detail"].endswith("rolled_back; got 'complete'")
    assert (listed.status_code, listed.json()) == (200, {"operations": []})


def test_admitting_a_host_that_is_not_fenced_says_nothing_changed(daemon: Daemon) -> None:
    """``promoter hosts admit`` of an active host once told the operator to restart a daemon
    that "writes nothing" until then, which was never so."""
    host = daemon.services.owner.host
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env.update(PROMOTER_URL=daemon.url, PROMOTER_TOKEN=daemon.operator_token, COLUMNS="200")
    argv = [sys.executable, "-m", "promoter.cli.main", "hosts", "admit", host]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == (
        f"host {host} is not fenced (never, or admitted already): active at epoch 1, "
        "nothing changed\n"
    )


def test_handing_a_live_host_over_to_itself_is_handover_refused_not_host_live(
    daemon: Daemon,
) -> None:
    """``promoter hosts fence H --to H`` of a live host: ``handover_refused``, as a handover
    that can never happen is refused before the leases are looked at (``host_live`` would
    send the operator to wait for leases whose end changes nothing); nothing changed."""
    host = daemon.services.owner.host
    detail = "a host cannot take over its own operations"
    with daemon.operator() as client:
        (entry,) = client.get("/v1/hosts").json()["hosts"]
        assert (entry["host_id"], entry["lease_expired"]) == (host, False)  # live
        answer = client.post(f"/v1/hosts/{host}/fence", json={"to": host})
    assert (answer.status_code, answer.json()["code"]) == (409, "handover_refused")
    assert (answer.json()["detail"], answer.json()["host"]) == (detail, host)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env.update(PROMOTER_URL=daemon.url, PROMOTER_TOKEN=daemon.operator_token, COLUMNS="200")
    argv = [sys.executable, "-m", "promoter.cli.main", "hosts", "fence", host, "--to", host]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (75, "")
    assert done.stderr == f"error [handover_refused] {detail}\n"
    with daemon.operator() as client:
        (after,) = client.get("/v1/hosts").json()["hosts"]
    assert (after["status"], after["epoch"], after["fences"]) == ("active", 1, [])
