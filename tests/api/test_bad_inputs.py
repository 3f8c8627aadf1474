"""Bad input through the real server: each answered with its stable code, nothing stored.

Covers the A rows (authorization attacks) and P5 (lexical paths) of TESTS.md at the
verification stage, plus schema, hash, count, blob and role errors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.daemon import Daemon
from tests.support.flows import (
    make_bundle,
    make_grant,
    make_lease,
    seal_bundle,
    sha,
    state,
    ts,
    upload,
)

OLD_APP = b"print('v1')\n"
NEW_APP = b"print('v2')\n"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "tmp" not in p.parts
    }


@pytest.fixture
def registered(daemon: Daemon, repo: Path, identity: str) -> dict[str, Any]:
    grant = make_grant(
        repo, identity, allow=[{"pattern": "src/**", "operations": ["modify", "create"]}]
    )
    with daemon.orchestrator() as orch:
        assert orch.post("/v1/grants", json=grant).status_code == 201
    with daemon.executor("run_1") as ex:
        upload(ex, OLD_APP, NEW_APP, b"# project\n")
    return grant


def _good(grant: dict[str, Any]) -> dict[str, Any]:
    return make_bundle(grant, [("src/app.py", OLD_APP, NEW_APP)])


def _with_change(grant: dict[str, Any], path: str) -> dict[str, Any]:
    change = {"path": path, "operation": "create", "old": state(None), "new": state(NEW_APP)}
    return make_bundle(grant, [change])


BundleCase = Callable[[dict[str, Any]], Any]

BAD_BUNDLES: dict[str, tuple[BundleCase, int, str]] = {
    "wrong_bundle_hash": (
        lambda g: {**_good(g), "bundle_sha256": "0" * 64},
        422,
        "bundle_hash_mismatch",
    ),
    "wrong_bundle_id": (
        lambda g: {**_good(g), "bundle_id": "bnd_" + "1" * 32},
        422,
        "bundle_hash_mismatch",
    ),
    "wrong_change_count": (
        lambda g: make_bundle(g, [("src/app.py", OLD_APP, NEW_APP)], change_count=2),
        422,
        "validation_failed",
    ),
    "wrong_total_bytes": (
        lambda g: make_bundle(g, [("src/app.py", OLD_APP, NEW_APP)], total_bytes=1),
        422,
        "validation_failed",
    ),
    "missing_blob": (
        lambda g: make_bundle(g, [("src/app.py", OLD_APP, b"never uploaded")]),
        422,
        "blob_missing",
    ),
    "blob_size_lie": (
        lambda g: make_bundle(
            g,
            [
                {
                    "path": "src/app.py",
                    "operation": "modify",
                    "old": state(OLD_APP),
                    "new": {**state(NEW_APP), "bytes": 3},
                }
            ],
            total_bytes=3,
        ),
        422,
        "blob_hash_mismatch",
    ),
    "path_outside_allowlist": (
        lambda g: make_bundle(g, [("README.md", b"# project\n", NEW_APP)]),
        422,
        "verification_failed",
    ),
    "operation_outside_allowlist": (
        lambda g: make_bundle(g, [("src/app.py", OLD_APP, None)]),
        422,
        "verification_failed",
    ),
    "old_state_unlike_base": (
        lambda g: make_bundle(g, [("src/app.py", NEW_APP, OLD_APP)]),
        422,
        "verification_failed",
    ),
    "create_over_existing": (
        lambda g: make_bundle(
            g,
            [
                {
                    "path": "src/app.py",
                    "operation": "create",
                    "old": state(None),
                    "new": state(NEW_APP),
                }
            ],
        ),
        422,
        "verification_failed",
    ),
    "wrong_grant_hash": (
        lambda g: make_bundle(g, [("src/app.py", OLD_APP, NEW_APP)], grant_sha256="a" * 64),
        422,
        "verification_failed",
    ),
    "wrong_base_commit": (
        lambda g: make_bundle(g, [("src/app.py", OLD_APP, NEW_APP)], base_commit="a" * 40),
        422,
        "verification_failed",
    ),
    "other_repository": (
        lambda g: make_bundle(
            g, [("src/app.py", OLD_APP, NEW_APP)], repository_identity="repo_" + "f" * 32
        ),
        422,
        "verification_failed",
    ),
    "unsorted_changes": (
        lambda g: seal_bundle(
            {
                **make_bundle(g, [("src/a.py", None, NEW_APP), ("src/b.py", None, NEW_APP)]),
                "changes": list(
                    reversed(
                        make_bundle(g, [("src/a.py", None, NEW_APP), ("src/b.py", None, NEW_APP)])[
                            "changes"
                        ]
                    )
                ),
            }
        ),
        422,
        "validation_failed",
    ),
    "modify_without_change": (
        lambda g: make_bundle(
            g,
            [
                {
                    "path": "src/app.py",
                    "operation": "modify",
                    "old": state(OLD_APP),
                    "new": state(OLD_APP),
                }
            ],
        ),
        422,
        "validation_failed",
    ),
    "case_fold_collision": (
        lambda g: make_bundle(g, [("src/A.py", None, NEW_APP), ("src/a.py", None, NEW_APP)]),
        422,
        "path_invalid",
    ),
    "prefix_directory": (
        lambda g: make_bundle(g, [("src/x", None, NEW_APP), ("src/x/y", None, NEW_APP)]),
        422,
        "path_invalid",
    ),
    "limits_exceeded": (
        lambda g: make_bundle(
            g,
            [("src/a.py", None, NEW_APP), ("src/b.py", None, NEW_APP), ("src/c.py", None, NEW_APP)],
            change_count=3,
        ),
        413,
        "payload_too_large",
    ),
    "unknown_field": (lambda g: {**_good(g), "extra": 1}, 422, "validation_failed"),
    "float_count": (lambda g: {**_good(g), "change_count": 1.0}, 422, "validation_failed"),
    "bad_timestamp": (
        lambda g: make_bundle(
            g, [("src/app.py", OLD_APP, NEW_APP)], created_at="2026-11-30 21:00:00"
        ),
        422,
        "validation_failed",
    ),
    "symlink_under_the_default_policy": (  # symlinks: none
        lambda g: make_bundle(
            g,
            [
                {
                    "path": "src/l",
                    "operation": "create",
                    "old": state(None),
                    "new": {**state(NEW_APP), "mode": "120000"},
                }
            ],
        ),
        422,
        "path_invalid",
    ),
    "blob_ref_elsewhere": (
        lambda g: make_bundle(
            g,
            [
                {
                    "path": "src/n.py",
                    "operation": "create",
                    "old": state(None),
                    "new": {
                        **state(NEW_APP),
                        "blob_ref": {"path": "../../etc/passwd", "sha256": sha(NEW_APP)},
                    },
                }
            ],
        ),
        422,
        "validation_failed",
    ),
    "unknown_grant": (
        lambda g: make_bundle({**g, "grant_id": "grt_nope"}, [("src/app.py", OLD_APP, NEW_APP)]),
        404,
        "grant_unknown",
    ),
}
for _name, _path in {
    "dotdot": "src/../../x",
    "absolute": "/etc/passwd",
    "nul": "src/a\x00b",
    "dot_git": "src/.git/config",
    "dot_git_upper": ".GIT/hooks/post-checkout",
    "backslash": "src\\a",
    "trailing_slash": "src/a/",
    "double_slash": "src//a",
    "dot": "src/./a",
    "control": "src/a\x1bb",
    "not_nfc": "src/cafe\u0301",
    "long_component": "src/" + "x" * 256,
    "empty": "",
    "reserved_temp_name": "src/.promoter-tmp-op_x-1-0",
    "reserved_kept_name": ".promoter-kept-op_x-1-0/a.txt",
    "reserved_name_case_folded": "src/.Promoter-Tmp-x",
}.items():
    BAD_BUNDLES[f"path_{_name}"] = (lambda g, p=_path: _with_change(g, p), 422, "path_invalid")


@pytest.mark.parametrize("case", sorted(BAD_BUNDLES))
def test_bad_bundle_is_refused_with_its_code_and_nothing_stored(
    case: str, daemon: Daemon, registered: dict[str, Any], repo: Path
) -> None:
    build, status, code = BAD_BUNDLES[case]
    grant = registered
    if case == "limits_exceeded":
        grant = {
            **registered,
            "grant_id": "grt_small",
            "limits": {"max_changes": 2, "max_total_bytes": 100},
        }
        with daemon.orchestrator() as orch:
            assert orch.post("/v1/grants", json=grant).status_code == 201
    before_state = _snapshot(daemon.state_dir / "audit")
    before_repo = _snapshot(repo)
    with daemon.executor("run_1") as ex:
        answer = ex.post("/v1/bundles", json=build(grant))
    assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert _snapshot(daemon.state_dir / "audit") == before_state
    assert _snapshot(repo) == before_repo


def test_malformed_json_is_bad_request(daemon: Daemon, registered: dict[str, Any]) -> None:
    with daemon.executor("run_1") as ex:
        for body in (b"{", b"[1,", b'{"a":1,"a":2}', b"NaN", b"\xff\xfe"):
            answer = ex.post(
                "/v1/bundles", content=body, headers={"content-type": "application/json"}
            )
            assert (answer.status_code, answer.json()["code"]) == (400, "bad_request"), body


def test_blob_hash_mismatch_stores_nothing(daemon: Daemon) -> None:
    with daemon.executor("run_1") as ex:
        answer = ex.put(f"/v1/blobs/sha256/{sha(b'claimed')}", content=b"actual")
    assert (answer.status_code, answer.json()["code"]) == (422, "blob_hash_mismatch")
    blobs = daemon.state_dir / "audit" / "blobs"
    assert [p for p in blobs.rglob("*") if p.is_file()] == []
    assert list((daemon.state_dir / "audit" / "tmp").iterdir()) == []


def test_oversized_blob_is_refused_while_streaming(tmp_path: Path, repo: Path) -> None:
    from tests.support.daemon import running_daemon

    with running_daemon(tmp_path / "small", {"work": repo}, max_blob_bytes=1024) as small:
        data = b"x" * 4096
        with small.executor("run_1") as ex:

            def chunks() -> Any:
                for start in range(0, len(data), 512):
                    yield data[start : start + 512]

            answer = ex.put(
                f"/v1/blobs/sha256/{hashlib.sha256(data).hexdigest()}", content=chunks()
            )
        assert (answer.status_code, answer.json()["code"]) == (413, "payload_too_large")
        assert [p for p in (small.state_dir / "audit" / "blobs").rglob("*") if p.is_file()] == []


def test_expired_executor_token_is_unauthenticated(daemon: Daemon) -> None:
    from promoter.store.credentials import token_sha256
    from promoter.store.tables import ExecutorTokenRow

    with daemon.executor("run_1") as ex:
        token = ex.headers["authorization"].split()[1]
        with daemon.services.db.session() as session:
            row = session.get(ExecutorTokenRow, token_sha256(token))
            assert row is not None
            row.expires_at = ts(timedelta(seconds=-1))
        answer = ex.post("/v1/blobs:missing", json={"sha256": []})
    assert (answer.status_code, answer.json()["code"]) == (401, "unauthenticated")


def test_bundle_of_another_run_is_forbidden(daemon: Daemon, registered: dict[str, Any]) -> None:
    with daemon.executor("run_2") as other:
        answer = other.post("/v1/bundles", json=_good(registered))
        assert (answer.status_code, answer.json()["code"]) == (403, "forbidden")
        forged = make_bundle(
            {**registered, "executor_run_id": "run_2"}, [("src/app.py", OLD_APP, NEW_APP)]
        )
        answer = other.post("/v1/bundles", json=forged)
        assert (answer.status_code, answer.json()["code"]) == (403, "forbidden")
        assert other.get(f"/v1/grants/{registered['grant_id']}").json()["code"] == "forbidden"
    with daemon.executor("run_1") as own:
        assert own.post("/v1/bundles", json=_good(registered)).status_code == 201
    with daemon.executor("run_2") as other:
        answer = other.get(f"/v1/bundles/{_good(registered)['bundle_id']}")
        assert (answer.status_code, answer.json()["code"]) == (403, "forbidden")


ROLE_CASES: list[tuple[str, str, str, int, str]] = [
    # (method, path, token kind, status, code)
    ("post", "/v1/grants", "executor", 403, "forbidden"),
    ("post", "/v1/executor-tokens", "executor", 403, "forbidden"),
    ("put", "/v1/leases/wf_1/implement", "executor", 403, "forbidden"),
    ("get", "/v1/repositories", "executor", 403, "forbidden"),
    ("get", f"/v1/blobs/sha256/{'a' * 64}", "executor", 403, "forbidden"),
    ("get", f"/v1/blobs/sha256/{'a' * 64}", "orchestrator", 403, "forbidden"),
    ("post", "/v1/bundles", "orchestrator", 403, "forbidden"),
    ("post", "/v1/blobs:missing", "orchestrator", 403, "forbidden"),
    ("put", f"/v1/blobs/sha256/{'a' * 64}", "operator", 403, "forbidden"),
    ("post", "/v1/grants", "none", 401, "unauthenticated"),
    ("post", "/v1/bundles", "garbage", 401, "unauthenticated"),
    ("get", "/v1/repositories", "none", 401, "unauthenticated"),
]


@pytest.mark.parametrize(("method", "path", "kind", "status", "code"), ROLE_CASES)
def test_every_role_mismatch_is_refused(
    daemon: Daemon, method: str, path: str, kind: str, status: int, code: str
) -> None:
    tokens = {
        "orchestrator": daemon.orchestrator_token,
        "operator": daemon.operator_token,
        "none": None,
        "garbage": "pex_not-a-token",
    }
    if kind == "executor":
        with daemon.executor("run_1") as ex:
            client = daemon.client(ex.headers["authorization"].split()[1])
    else:
        client = daemon.client(tokens[kind])
    with client:
        answer: httpx.Response = getattr(client, method)(
            path, **({} if method == "get" else {"json": {}})
        )
    assert (answer.status_code, answer.json()["code"]) == (status, code)


def test_grant_registration_checks_the_repository(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    cases = {
        "unknown base commit": (make_grant(repo, identity, base_commit="a" * 40), "grant_invalid"),
        "wrong base tree": (make_grant(repo, identity, base_tree="b" * 40), "grant_invalid"),
        "expired": (
            make_grant(repo, identity, expires_at=ts(timedelta(seconds=-10))),
            "grant_invalid",
        ),
        "inverted window": (
            make_grant(repo, identity, not_before=ts(timedelta(hours=2))),
            "grant_invalid",
        ),
        "bad pattern": (
            make_grant(repo, identity, allow=[{"pattern": "src/[ab]", "operations": ["modify"]}]),
            "grant_invalid",
        ),
        "bad ** use": (
            make_grant(repo, identity, allow=[{"pattern": "src/a**", "operations": ["modify"]}]),
            "grant_invalid",
        ),
        "unknown repository": (make_grant(repo, "repo_" + "e" * 32), "repository_unknown"),
        "wrong grant_sha256": (
            {**make_grant(repo, identity), "grant_sha256": "c" * 64},
            "grant_invalid",
        ),
        "bad precondition path": (
            make_grant(
                repo,
                identity,
                preconditions=[
                    {
                        "path": "../x",
                        "old": {"exists": False, "sha256": None, "mode": None},
                        "index": None,
                    }
                ],
            ),
            "path_invalid",
        ),
        "float fence": (make_grant(repo, identity, fence=7.0), "validation_failed"),
        "unknown field": ({**make_grant(repo, identity), "extra": True}, "validation_failed"),
    }
    with daemon.orchestrator() as orch:
        for name, (grant, code) in cases.items():
            answer = orch.post("/v1/grants", json=grant)
            assert answer.json().get("code") == code, name
            assert answer.status_code in (404, 422), name
        good = make_grant(repo, identity)
        assert orch.post("/v1/grants", json=good).status_code == 201
        changed = {**good, "fence": 8}
        answer = orch.post("/v1/grants", json=changed)
        assert (answer.status_code, answer.json()["code"]) == (409, "grant_conflict")
    assert sorted(p.name for p in (daemon.state_dir / "audit" / "grants").iterdir()) == [
        "grt_test1.json"
    ]


def test_lease_fences_only_move_forward(daemon: Daemon) -> None:
    lease = make_lease()
    with daemon.orchestrator() as orch:
        assert orch.put("/v1/leases/wf_1/implement", json=lease).json()["changed"] is True
        assert orch.put("/v1/leases/wf_1/implement", json=lease).json()["changed"] is False
        lower = orch.put("/v1/leases/wf_1/implement", json={**lease, "fence": 6})
        assert (lower.status_code, lower.json()["code"]) == (409, "lease_fence_regression")
        same = orch.put("/v1/leases/wf_1/implement", json={**lease, "attempt": 2})
        assert (same.status_code, same.json()["code"]) == (409, "lease_conflict")
        assert same.json()["differing"] == ["attempt"]
        later = orch.put(
            "/v1/leases/wf_1/implement", json={**lease, "expires_at": "2099-01-01T00:00:00Z"}
        )
        assert later.json()["differing"] == ["expires_at"]
        assert later.json()["detail"] == (
            "fence 7 is already set with other fields (expires_at): the lease of a fence "
            "never changes; set the new one with a higher fence (--fence 8)"
        )
        assert orch.put("/v1/leases/wf_1/implement", json={**lease, "fence": 8}).status_code == 200


def test_an_operations_filter_naming_no_repository_is_refused_not_an_empty_list(
    daemon: Daemon,
) -> None:
    with daemon.operator() as operator:
        (guarded,) = operator.get("/v1/repositories").json()["repositories"]
        for known in (guarded["name"], guarded["repository_identity"]):
            listed = operator.get("/v1/operations", params={"repository": known})
            assert (listed.status_code, listed.json()) == (200, {"operations": []})
        typo = operator.get("/v1/operations", params={"repository": guarded["name"] + "x"})
        assert (typo.status_code, typo.json()["code"]) == (404, "repository_unknown")
        assert typo.json()["repository"] == guarded["name"] + "x"
