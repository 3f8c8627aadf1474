"""The published contract, read from the ``/openapi.json`` a real daemon serves.

Every operation has a unique operationId, tags of its actors, a description stating its
role, an example, a request body schema where it takes a body, a response schema, and
its problem responses as ``application/problem+json`` with the enum of their codes; its
security requirement names the roles the route really admits (checked with real tokens).
Every problem code has a served ``/problems/{code}`` page; ``schemas/openapi.json`` is
current; ``/docs`` loads only assets the daemon serves itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs  # schemathesis's validator
import pytest
import schemathesis

from promoter.api.openapi_export import render
from promoter.api.problems import CODES, MEDIA_TYPE
from promoter.errors import all_error_classes
from tests.support.daemon import Daemon
from tests.support.flows import make_bundle, make_grant, sha, upload

ROOT = Path(__file__).resolve().parents[2]
ACTORS = {"executor", "orchestrator", "operator", "public"}
ROLES = {"executor", "orchestrator", "operator"}
METHODS = {"get", "put", "post", "delete", "patch"}
# Routes that take a body: (method, path template).
WITH_BODY = {
    ("post", "/v1/executor-tokens"),
    ("post", "/v1/grants"),
    ("put", "/v1/leases/{workflow_id}/{stage}"),
    ("post", "/v1/runs"),
    ("post", "/v1/blobs:missing"),
    ("put", "/v1/blobs/sha256/{sha256}"),
    ("post", "/v1/blobs:batchUpdate"),
    ("post", "/v1/bundles"),
    ("post", "/v1/bundles/{bundle_id}/preflight"),
    ("post", "/v1/promotions"),
    ("post", "/v1/promotions:withEvidence"),
    ("post", "/v1/operations/{operation_id}/recover"),
    ("post", "/v1/operations/{operation_id}/reconcile"),
    ("post", "/v1/operations/{operation_id}/rollback"),
    ("post", "/v1/operations/{operation_id}/approve"),
    ("post", "/v1/operations/{operation_id}/reject"),
    ("post", "/v1/operations/{operation_id}/reopen"),
    ("post", "/v1/repositories/{name}/snapshots"),
    ("post", "/v1/repositories/{name}/changes"),
    ("post", "/v1/repositories/{name}/snapshots/{tree}/restore"),
    ("post", "/v1/hosts/{host}/fence"),
    ("put", "/v1/repositories/{name}/approval"),
}


@pytest.fixture
def served(daemon: Daemon) -> dict[str, Any]:
    answer = httpx.get(f"{daemon.url}/openapi.json", timeout=60)
    assert answer.status_code == 200
    doc: dict[str, Any] = answer.json()
    return doc


def _operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in METHODS:
                yield method, path, op


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    assert ref.startswith("#/components/schemas/"), ref
    resolved: dict[str, Any] = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return resolved


def _refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref":
                yield item
            else:
                yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def test_document_is_openapi_3_1_with_a_bearer_scheme(served: dict[str, Any]) -> None:
    assert served["openapi"].startswith("3.1.")
    scheme = served["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert {tag["name"] for tag in served["tags"]} == ACTORS
    dangling = [
        ref for ref in _refs(served) if ref.rsplit("/", 1)[1] not in served["components"]["schemas"]
    ]
    assert dangling == []


def test_every_operation_is_described(served: dict[str, Any]) -> None:
    ids = []
    problems: list[str] = []
    for method, path, op in _operations(served):
        where = f"{method.upper()} {path}"
        ids.append(op.get("operationId"))
        assert re.fullmatch(r"[a-z][A-Za-z]+", op.get("operationId", "")), where
        assert op.get("tags") and set(op["tags"]) <= ACTORS, where
        assert op.get("summary") and op.get("description"), where
        assert "Role:" in op["description"], where
        examples = [
            c
            for r in [op.get("requestBody", {}), *op["responses"].values()]
            for c in r.get("content", {}).values()
            if "example" in c or "examples" in c
        ]
        assert examples, f"{where} has no example"
        takes_body = (method, path) in WITH_BODY
        assert ("requestBody" in op) == takes_body, where
        if takes_body:
            content = op["requestBody"]["content"]
            assert all("schema" in c for c in content.values()), where
        success = {s: r for s, r in op["responses"].items() if s.startswith("2")}
        assert success, where
        assert all(
            "schema" in c for r in success.values() for c in r.get("content", {}).values()
        ), where
        assert any(r.get("content") for r in success.values()), where
        for status, response in op["responses"].items():
            if status.startswith("2") or (path, status) == ("/readyz", "503"):
                continue  # readiness answers its checks, also when not ready
            content = response.get("content", {})
            assert list(content) == [MEDIA_TYPE], (where, status)
            schema = content[MEDIA_TYPE]["schema"]
            assert schema["allOf"][0] == {"$ref": "#/components/schemas/Problem"}
            codes = schema["allOf"][1]["properties"]["code"]["enum"]
            assert codes and all(CODES[c][0] == int(status) for c in codes), (where, status)
            problems += codes
        assert "500" in op["responses"], where
    assert len(ids) == len(set(ids))
    assert set(problems) <= set(CODES)


def test_problem_schema_enumerates_every_code(served: dict[str, Any]) -> None:
    problem = served["components"]["schemas"]["Problem"]
    assert set(problem["properties"]["code"]["enum"]) == set(CODES)
    assert {cls.code for cls in all_error_classes()} <= set(CODES)


def _admits(daemon: Daemon, token: str | None, method: str, path: str) -> bool:
    """Whether the route lets ``token`` past its role check (any answer but 401/403)."""
    concrete = re.sub(r"\{[^}]+\}", "x", path)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = httpx.request(
        method, f"{daemon.url}{concrete}", headers=headers, content=b"{}", timeout=60
    )
    code = answer.json().get("code") if answer.status_code in (401, 403) else None
    return code not in ("unauthenticated", "forbidden")


@pytest.mark.slow
def test_security_requirements_match_the_roles_routes_admit(
    served: dict[str, Any], daemon: Daemon
) -> None:
    tokens = {
        "orchestrator": daemon.orchestrator_token,
        "operator": daemon.operator_token,
    }
    with daemon.orchestrator() as orch:
        minted = orch.post("/v1/executor-tokens", json={"executor_run_id": "x"})
        tokens["executor"] = minted.json()["token"]
    mismatches = []
    for method, path, op in _operations(served):
        if path.startswith("/problems") or path in ("/healthz", "/readyz", "/metrics"):
            assert all(not any(req.values()) for req in op["security"]), path
            continue
        if op["security"] == []:
            assert _admits(daemon, None, method, path), path
            continue
        (requirement,) = op["security"]
        declared = set(requirement["bearer"])
        assert declared <= ROLES and declared == set(op["x-roles"])
        assert not _admits(daemon, None, method, path), path
        admitted = {role for role, token in tokens.items() if _admits(daemon, token, method, path)}
        if admitted != declared:
            mismatches.append((method, path, sorted(declared), sorted(admitted)))
    assert mismatches == []


# The operations that read no ledger: liveness, problem pages, and readiness (whose own
# 503 is its Readiness answer naming the database check, never a problem).
LEDGER_FREE = {"getHealth", "getProblemType", "getReadiness"}


def test_every_route_that_reads_the_ledger_publishes_database_unavailable(
    served: dict[str, Any],
) -> None:
    """A route that takes a token (any credential but this host's own is read from the
    ledger) or reads the ledger itself (every host's keys) lists 503
    ``database_unavailable`` with its ``Retry-After`` header (docs/reference/api.md)."""
    missing, listed = [], set()
    for method, path, op in _operations(served):
        answer = op["responses"].get("503", {})
        schema = answer.get("content", {}).get(MEDIA_TYPE, {}).get("schema", {})
        codes = schema.get("allOf", [{}, {}])[1].get("properties", {}).get("code", {})
        if "database_unavailable" not in codes.get("enum", []):
            missing.append(op["operationId"])
            continue
        listed.add(op["operationId"])
        assert "`database_unavailable`" in answer["description"], (method, path)
        retry = answer["headers"]["Retry-After"]
        assert retry["schema"] == {"type": "integer", "minimum": 1}, (method, path)
        takes_a_token = any(req.get("bearer") is not None for req in op["security"])
        assert takes_a_token or op["operationId"] in ("getKeys", "getKeyPem"), (method, path)
    assert sorted(missing) == sorted(LEDGER_FREE)
    assert {"getKeys", "getKeyPem", "getMetrics", "whoami", "getBlob"} <= listed


def test_every_problem_code_has_a_served_page(daemon: Daemon) -> None:
    with httpx.Client(base_url=daemon.url, timeout=60) as client:
        for code, (status, title) in CODES.items():
            answer = client.get(f"/problems/{code}")
            assert answer.status_code == 200, code
            assert answer.headers["content-type"].startswith("text/html")
            assert f"<h1>{code}</h1>" in answer.text
            assert f"HTTP status {status}" in answer.text
            assert title.replace("'", "&#x27;") in answer.text
        unknown = client.get("/problems/%3Cscript%3E")
        assert unknown.status_code == 404
        assert unknown.json()["code"] == "not_found"
        assert unknown.headers["content-type"] == MEDIA_TYPE  # JSON, never an HTML page


def test_problem_types_point_at_the_daemon(daemon: Daemon) -> None:
    with httpx.Client(base_url=daemon.url, timeout=60) as client:
        unauthenticated = client.get("/v1/repositories")
        assert unauthenticated.headers["content-type"] == MEDIA_TYPE
        problem = unauthenticated.json()
        assert problem["type"] == "/problems/unauthenticated"
        assert client.get(problem["type"]).status_code == 200
        missing = client.get("/nowhere")
        assert missing.json()["type"] == "/problems/not_found"


def test_committed_openapi_document_is_current(served: dict[str, Any]) -> None:
    committed = (ROOT / "schemas" / "openapi.json").read_text(encoding="utf-8")
    assert committed == render(), "run `make schemas` and commit the result"
    assert json.loads(committed) == served


def test_docs_load_only_local_assets(daemon: Daemon) -> None:
    with httpx.Client(base_url=daemon.url, timeout=60) as client:
        page = client.get("/docs")
        assert page.status_code == 200
        urls = re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", page.text)
        assert urls, page.text
        assert [u for u in urls if not u.startswith("/")] == []
        assert "//" not in "".join(urls)
        for url in urls:
            asset = client.get(url)
            assert asset.status_code == 200, url
            assert len(asset.content) > 0
        script = client.get("/docs/assets/swagger-ui-bundle.js")
        assert script.headers["content-type"].startswith("text/javascript")
        assert b"SwaggerUIBundle" in script.content
        assert client.get("/docs/assets/..%2Fcore.py").status_code == 404
        assert client.get("/redoc").status_code == 404


def test_a_whole_flow_answers_as_published(daemon: Daemon, repo: Path, identity: str) -> None:
    """Success answers of every kind validate against the schemas the daemon publishes."""
    doc = httpx.get(f"{daemon.url}/openapi.json", timeout=60).json()
    schema = schemathesis.openapi.from_dict(doc)
    checked: list[str] = []

    def check(method: str, template: str, answer: httpx.Response, status: int) -> Any:
        assert answer.status_code == status, (template, answer.text)
        schema[template][method].validate_response(answer)
        checked.append(doc["paths"][template][method.lower()]["operationId"])
        return answer.json() if "json" in answer.headers["content-type"] else answer.content

    check("GET", "/healthz", httpx.get(f"{daemon.url}/healthz"), 200)
    check("GET", "/readyz", httpx.get(f"{daemon.url}/readyz"), 200)
    check("GET", "/v1/keys", httpx.get(f"{daemon.url}/v1/keys"), 200)
    new = b"print('v2')\n"
    grant = make_grant(repo, identity, grant_id="grt_contract")
    bundle = make_bundle(grant, [("src/app.py", b"print('v1')\n", new)])
    base = "/v1/repositories/{name}/snapshots"
    with daemon.orchestrator() as orch, daemon.operator() as op:
        check("GET", "/v1/repositories", orch.get("/v1/repositories"), 200)
        check("POST", "/v1/grants", orch.post("/v1/grants", json=grant), 201)
        check("GET", "/v1/grants/{grant_id}", orch.get("/v1/grants/grt_contract"), 200)
        minted = orch.post("/v1/executor-tokens", json={"executor_run_id": "run_1"})
        token = check("POST", "/v1/executor-tokens", minted, 201)["token"]
        with daemon.client(token) as ex:
            asked = ex.post("/v1/blobs:missing", json={"sha256": [sha(new)]})
            check("POST", "/v1/blobs:missing", asked, 200)
            put = ex.put(f"/v1/blobs/sha256/{sha(new)}", content=new)
            check("PUT", "/v1/blobs/sha256/{sha256}", put, 201)
            upload(ex, b"print('v1')\n")
            submitted = check("POST", "/v1/bundles", ex.post("/v1/bundles", json=bundle), 201)
        bid = bundle["bundle_id"]
        check("GET", "/v1/blobs/sha256/{sha256}", op.get(f"/v1/blobs/sha256/{sha(new)}"), 200)
        check("GET", "/v1/bundles/{bundle_id}", orch.get(f"/v1/bundles/{bid}"), 200)
        check(
            "GET",
            "/v1/bundles/{bundle_id}/verification",
            orch.get(f"/v1/bundles/{bid}/verification"),
            200,
        )
        check(
            "GET",
            "/v1/bundles/{bundle_id}/verification.dsse",
            orch.get(f"/v1/bundles/{bid}/verification.dsse"),
            200,
        )
        lease = {
            "run_id": "run_1",
            "attempt": 1,
            "generation": 1,
            "resume_epoch": 0,
            "fence": grant["fence"],
            "expires_at": grant["expires_at"],
        }
        leased = orch.put(f"/v1/leases/{grant['workflow_id']}/{grant['stage']}", json=lease)
        check("PUT", "/v1/leases/{workflow_id}/{stage}", leased, 200)
        ahead = orch.post(f"/v1/bundles/{bid}/preflight", json={"fence": grant["fence"]})
        assert check("POST", "/v1/bundles/{bundle_id}/preflight", ahead, 200)["status"] == "passed"
        before = check("POST", base, op.post(f"{base.format(name='work')}", json={}), 201)
        request = {
            "bundle_id": bid,
            "verification_receipt_sha256": submitted["verification_receipt"]["receipt_sha256"],
            "fence": grant["fence"],
            "wait": True,
        }
        view = check("POST", "/v1/promotions", orch.post("/v1/promotions", json=request), 200)
        oid = view["operation_id"]
        current = orch.get(f"/v1/operations/{oid}", params={"current": "true"})
        check("GET", "/v1/operations/{operation_id}", current, 200)
        check("GET", "/v1/operations", op.get("/v1/operations"), 200)
        check(
            "GET",
            "/v1/operations/{operation_id}/receipt",
            orch.get(f"/v1/operations/{oid}/receipt"),
            200,
        )
        check(
            "GET",
            "/v1/operations/{operation_id}/receipt.dsse",
            orch.get(f"/v1/operations/{oid}/receipt.dsse"),
            200,
        )
        after = check("POST", base, op.post(f"{base.format(name='work')}"), 201)
        check("GET", base, op.get(base.format(name="work")), 200)
        diff = op.get(
            f"{base.format(name='work')}/diff", params={"from": before["tree"], "to": after["tree"]}
        )
        assert check("GET", f"{base}/diff", diff, 200)["modified"] == ["src/app.py"]
        rollback = op.post(f"/v1/operations/{oid}/rollback", json={"note": "contract"})
        check("POST", "/v1/operations/{operation_id}/rollback", rollback, 200)
        check(
            "GET",
            "/v1/operations/{operation_id}/rollback-receipt.dsse",
            orch.get(f"/v1/operations/{oid}/rollback-receipt.dsse"),
            200,
        )
        restore = op.post(
            f"{base.format(name='work')}/{after['tree']}/restore",
            json={"expected_current_tree": before["tree"]},
        )
        assert check("POST", f"{base}/{{tree}}/restore", restore, 200)["status"] == "completed"
    assert len(set(checked)) == 27  # all but recover, reconcile, metrics, problem pages


def test_every_example_matches_its_schema(served: dict[str, Any]) -> None:
    checked = 0
    for method, path, op in _operations(served):
        bodies = [("request", op.get("requestBody", {}))]
        bodies += list(op["responses"].items())
        for where, part in bodies:
            for media_type, content in part.get("content", {}).items():
                if "example" not in content or "schema" not in content:
                    continue
                schema = {**content["schema"], "components": served["components"]}
                validator = jsonschema_rs.Draft202012Validator(schema)
                errors = [e.message for e in validator.iter_errors(content["example"])]
                assert errors == [], (method, path, where, media_type)
                checked += 1
    assert checked > 60


JSON_MEDIA = "application/json"


def test_every_route_declares_its_answer_as_published() -> None:
    """Each API route names its answer: a ``response_model`` that is exactly the models of
    its JSON success responses (in the document), or a ``response_class`` for another
    media type (blob bytes, PEM, metrics text, problem pages)."""
    import importlib
    import pkgutil

    from fastapi.routing import APIRoute

    import promoter.api.routes as package
    from promoter.api.openapi import _CONTRACT

    modules = [
        importlib.import_module(f"{package.__name__}.{found.name}")
        for found in pkgutil.iter_modules(package.__path__)
    ]
    routes = [
        route
        for module in modules
        if hasattr(module, "router")
        for route in module.router.routes
        if isinstance(route, APIRoute)
    ]
    checked = 0
    for route in routes:
        entry = _CONTRACT[str(route.operation_id)]
        contents = [
            (media_type, body.get("schema", {}))
            for response in entry.responses.values()
            for media_type, body in response.get("content", {}).items()
        ]
        media = {media_type for media_type, _ in contents}
        if media == {JSON_MEDIA}:
            published = {schema["$ref"].rsplit("/", 1)[1] for _, schema in contents}
            declared = route.response_model
            members = getattr(declared, "__args__", (declared,))
            assert {m.__name__ for m in members} == published, route.path
        else:
            assert route.response_model is None and media, route.path
            assert route.response_class.__name__ != "JSONResponse", route.path
        checked += 1
    assert checked >= 50


def test_the_typed_answers_are_current() -> None:
    """``promoter/domain/answers.py`` is what ``python -m scripts.answers`` writes from the
    answer models (``make schemas``)."""
    from scripts.answers import TARGET, render

    assert TARGET.read_text(encoding="utf-8") == render(), "run `make schemas` and commit"
