"""Property-based API testing with schemathesis against the real daemon on loopback.

Every operation of the served ``/openapi.json`` is called with requests generated from
its schema (positive data: what the contract says is well-formed), with a valid token of
the first role its security requirement names. Generation is deterministic
(``derandomize``, no example database, a fixed ``max_examples`` per operation) and has no
deadline. Every answer must be below 500 and conform to the published contract: a listed
status, its content type, and a body that validates against its schema (for problems,
a ``code`` of that status's enum). Failures are collected for all operations, then
reported together.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.daemon import Daemon

MAX_EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


# the suite's daemon, with long-polls that answer at once (nothing changes here)
pytestmark = pytest.mark.daemon(max_wait_seconds=0.0)


def _tokens(daemon: Daemon) -> dict[str, str]:
    with daemon.orchestrator() as orch:
        minted = orch.post("/v1/executor-tokens", json={"executor_run_id": "run_fuzz"})
        assert minted.status_code == 201
    return {
        "orchestrator": daemon.orchestrator_token,
        "operator": daemon.operator_token,
        "executor": minted.json()["token"],
    }


def _headers(operation: dict[str, Any], tokens: dict[str, str]) -> dict[str, str]:
    roles = [role for req in operation.get("security", []) for role in req.get("bearer", [])]
    return {"Authorization": f"Bearer {tokens[roles[0]]}"} if roles else {}


def _fuzz(
    operation: Any, mode: GenerationMode, url: str, headers: dict[str, str], counts: dict[str, int]
) -> list[str]:
    """Run one operation's examples; the first few failures, described."""
    seen: list[str] = []

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(mode))
    def run(case: Any) -> None:
        counts["examples"] += 1
        response = case.call(base_url=url, headers=headers, timeout=60)
        try:
            case.validate_response(response, checks=CHECKS)
        except (AssertionError, FailureGroup) as exc:  # every failure is collected
            counts["failures"] += 1
            if len(seen) < 2:
                kinds = [f.title for f in getattr(exc, "exceptions", ())] or [str(exc)[:200]]
                body = "" if case.body is None else repr(case.body)[:160]
                seen.append(
                    f"{mode.value}: {operation.method.upper()} {operation.path} -> {response.status_code} "
                    f"{response.text[:200]!r}; {kinds}; sent {case.path_parameters} "
                    f"{case.query} {body}"
                )

    try:
        run()
    except Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE  # nothing in it can be malformed
    return seen


@pytest.mark.slow
def test_every_operation_answers_by_its_contract(daemon: Daemon) -> None:
    doc = httpx.get(f"{daemon.url}/openapi.json", timeout=60).json()
    schema = schemathesis.openapi.from_dict(doc)
    tokens = _tokens(daemon)
    counts = {"operations": 0, "examples": 0, "failures": 0}
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        raw = doc["paths"][operation.path][operation.method.lower()]
        counts["operations"] += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failures += _fuzz(operation, mode, daemon.url, _headers(raw, tokens), counts)
    print(
        f"schemathesis: {counts['operations']} operations, {counts['examples']} examples, "
        f"{counts['failures']} failures"
    )
    assert counts["operations"] == len(
        [m for item in doc["paths"].values() for m in item if m in ("get", "put", "post")]
    )
    assert failures == [], "\n\n".join(failures)
