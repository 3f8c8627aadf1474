"""Answers that route; one set of credentials (protocol: hosts#answers-that-route,
hosts#one-set-of-credentials, TESTS "routing").

Two or three daemons (in this process, each its own host id, state directory and
repository) share one PostgreSQL database of the module's own cluster
(``tests.support.own_postgres``). Checked: an orchestrator given one URL and one token
promotes into every host's repository through either client, each 421 followed once to
the owner the ledger names; preflight and a grant for another host's repository answer
421 with ``Location``; a credential added on one host is valid on the others, and removed
on another it is refused everywhere, its console session on the first host ended;
``promoter run`` (the real command line, in a process of its own) given host A's URL
promotes into host B's repository: its first write is 421 on A, followed once, and the
rest of the run, the executor's client included, goes to B. The client's rules for
following (once, only http(s), only to a host the ledger lists) are checked against a
small hostile server on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import typer
from typer.testing import CliRunner

from promoter import faults
from promoter.cli import credentials_cmd
from promoter.client.aio import AsyncPromoterClient
from promoter.client.sync import PromoterClient
from promoter.domain.models import GrantV1
from promoter.engine.operation.rollback import rollback_id
from promoter.errors import OwnedByOtherHost, Unauthenticated
from tests.console.support import login
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo, make_bundle, make_grant, sha, ts
from tests.support.promotion import git_dir_digest, tree_bytes

pytestmark = pytest.mark.slow  # a PostgreSQL cluster and three daemons

OLD, NEW = b"one\n", b"two\n"
NAMES = ("a", "b", "c")


@contextlib.contextmanager
def _cluster(
    tmp_path: Path, database_url: str, names: tuple[str, ...]
) -> Iterator[dict[str, tuple[Daemon, Path]]]:
    with contextlib.ExitStack() as stack:
        started: dict[str, tuple[Daemon, Path]] = {}
        for name in names:
            repo = init_repo(tmp_path / f"repo-{name}", {"notes.txt": OLD})
            daemon = stack.enter_context(
                running_daemon(
                    tmp_path / f"state-{name}",
                    {f"lab-{name}": repo},
                    database_url=database_url,
                    host_id=f"host-{name}",
                )
            )
            started[name] = (daemon, repo)
        yield started


def _identity(daemon: Daemon, name: str) -> str:
    return daemon.services.registry.by_name(f"lab-{name}").identity


def _lease(grant: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": grant["executor_run_id"],
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": grant["fence"],
        "expires_at": ts(timedelta(hours=1)),
    }


def _grant(repo: Path, identity: str, name: str) -> dict[str, Any]:
    return make_grant(
        repo, identity, grant_id=f"grt_{name}", run_id=f"run_{name}", workflow_id=f"wf_{name}"
    )


def _owner_of(guardians: list[dict[str, Any]] | None, identity: str) -> str:
    assert guardians is not None
    (entry,) = [g for g in guardians if g["repository_identity"] == identity]
    return str(entry["address"])


def _submit_as_executor(url: str, token: str, grant: dict[str, Any]) -> dict[str, Any]:
    changes: list[tuple[str, bytes | None, bytes | None]] = [("notes.txt", OLD, NEW)]
    bundle = make_bundle(grant, changes)
    with PromoterClient(url, token) as executor:
        for data in (OLD, NEW):
            executor.put_blob(sha(data), data)
        return executor.submit_bundle(bundle)


def test_one_url_and_one_token_promote_into_every_hosts_repository(
    tmp_path: Path, database_url: str
) -> None:
    """The orchestrator knows host A's URL and A's token only. Grants and promotions for
    B's and C's repositories are 421 on A, followed once to the owner the ledger names
    (with A's token, valid there through the ledger); each ends ``completed`` with exact
    bytes; the executor is sent to the address ``GET /v1/repositories`` names."""
    with _cluster(tmp_path, database_url, NAMES) as hosts:
        first = hosts["a"][0]
        with PromoterClient(first.url, first.orchestrator_token) as orch:
            guardians = orch.guardians()
            assert {g["host_id"] for g in guardians or []} == {"host-a", "host-b", "host-c"}
            for name, (daemon, repo) in hosts.items():
                identity = _identity(daemon, name)
                assert _owner_of(guardians, identity) == daemon.url
                grant = _grant(repo, identity, name)
                assert orch.register_grant(grant)["grant_id"] == f"grt_{name}"
                assert daemon.services.audit.load("grant", f"grt_{name}", GrantV1) is not None
                orch.set_lease(grant["workflow_id"], grant["stage"], _lease(grant))
                token = orch.mint_executor_token(grant["executor_run_id"])["token"]
                submitted = _submit_as_executor(daemon.url, token, grant)
                receipt = submitted["verification_receipt"]["receipt_sha256"]
                done = orch.promote(submitted["bundle_id"], receipt, grant["fence"], wait=True)
                assert (done["status"], done["attempt"]) == ("completed", 1), done
                assert orch.get_receipt(done["operation_id"])  # a read any host serves
        for _, repo in hosts.values():
            assert tree_bytes(repo) == {"notes.txt": (NEW, 0o644)}


def test_the_async_client_follows_a_421_once_too(tmp_path: Path, database_url: str) -> None:
    with _cluster(tmp_path, database_url, ("a", "b")) as hosts:
        first, (owner, repo) = hosts["a"][0], hosts["b"]
        identity = _identity(owner, "b")
        grant = _grant(repo, identity, "b")

        async def orchestrate() -> Any:
            async with AsyncPromoterClient(first.url, first.orchestrator_token) as orch:
                await orch.register_grant(grant)
                await orch.set_lease(grant["workflow_id"], grant["stage"], _lease(grant))
                token = (await orch.mint_executor_token(grant["executor_run_id"])).token
                submitted = await asyncio.to_thread(_submit_as_executor, owner.url, token, grant)
                receipt = submitted["verification_receipt"]["receipt_sha256"]
                return await orch.promote(
                    submitted["bundle_id"], receipt, grant["fence"], wait=True
                )

        done = asyncio.run(orchestrate())
        assert (done.status, done.attempt) == ("completed", 1)
        assert tree_bytes(repo) == {"notes.txt": (NEW, 0o644)}


def test_preflight_and_a_grant_on_a_non_owner_are_421_with_location(
    tmp_path: Path, database_url: str
) -> None:
    """Preflight of another host's bundle answered 200 ``refused`` and a grant for its
    repository 404 ``repository_unknown`` naming nobody: both are 421 now, naming the
    owner in ``owner_host`` and ``owner_url`` and sending the request there (``Location``)."""
    with _cluster(tmp_path, database_url, ("a", "b")) as hosts:
        first, (owner, repo) = hosts["a"][0], hosts["b"]
        identity = _identity(owner, "b")
        grant = _grant(repo, identity, "b")
        with first.orchestrator() as orch:
            refused = orch.post("/v1/grants", json=grant)
        assert refused.status_code == 421, refused.text
        problem = refused.json()
        assert (problem["code"], problem["owner_host"], problem["owner_url"]) == (
            "owned_by_other_host",
            "host-b",
            owner.url,
        )
        assert refused.headers["location"] == f"{owner.url}/v1/grants"
        with owner.orchestrator() as orch:
            assert orch.post("/v1/grants", json=grant).status_code == 201
            orch.put(f"/v1/leases/wf_b/{grant['stage']}", json=_lease(grant))
            token = orch.post("/v1/executor-tokens", json={"executor_run_id": "run_b"})
        bundle_id = _submit_as_executor(owner.url, token.json()["token"], grant)["bundle_id"]
        with first.orchestrator() as orch:
            preflight = orch.post(f"/v1/bundles/{bundle_id}/preflight", json={"fence": 7})
            bundle = orch.get(f"/v1/bundles/{bundle_id}/diff?context=1")
        assert preflight.status_code == 421, preflight.text
        assert preflight.json()["owner_host"] == "host-b"
        assert preflight.headers["location"] == f"{owner.url}/v1/bundles/{bundle_id}/preflight"
        assert bundle.status_code == 421, bundle.text
        assert bundle.headers["location"] == f"{owner.url}/v1/bundles/{bundle_id}/diff?context=1"
        with PromoterClient(first.url, first.orchestrator_token) as client:
            assert client.preflight(bundle_id, 7)["status"] == "passed"  # followed
        with owner.orchestrator() as orch:
            hosts_listed = orch.get("/v1/hosts").json()["hosts"]
        assert {h["host_id"]: h["address"] for h in hosts_listed} == {
            "host-a": first.url,
            "host-b": owner.url,
        }
        assert tree_bytes(repo) == {"notes.txt": (OLD, 0o644)}


def test_recovering_another_hosts_rollback_is_421_naming_its_owner(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollback stopped on host B (its repository's) is B's work: asked on host A to
    recover or reconcile it, A answers 421 naming B (not 404 ``repository_unknown``) and
    changes nothing; on B it finishes."""
    with _cluster(tmp_path, database_url, ("a", "b")) as hosts:
        first, (owner, repo) = hosts["a"][0], hosts["b"]
        identity = _identity(owner, "b")
        grant = _grant(repo, identity, "b")
        with owner.orchestrator() as orch:
            assert orch.post("/v1/grants", json=grant).status_code == 201
            orch.put(f"/v1/leases/wf_b/{grant['stage']}", json=_lease(grant))
            token = orch.post("/v1/executor-tokens", json={"executor_run_id": "run_b"})
            submitted = _submit_as_executor(owner.url, token.json()["token"], grant)
            done = orch.post(
                "/v1/promotions",
                json={
                    "bundle_id": submitted["bundle_id"],
                    "verification_receipt_sha256": submitted["verification_receipt"][
                        "receipt_sha256"
                    ],
                    "fence": grant["fence"],
                    "wait": True,
                },
            ).json()
        assert done["status"] == "completed", done
        monkeypatch.setenv(faults.ENV, "rollback_after_step=EIO@1")
        faults.reset()
        with owner.operator() as op:
            stopped = op.post(f"/v1/operations/{done['operation_id']}/rollback")
        monkeypatch.delenv(faults.ENV)
        faults.reset()
        assert stopped.status_code == 503, stopped.text
        child = rollback_id(done["operation_id"])
        with first.operator() as op:
            recover = op.post(f"/v1/operations/{child}/recover", json={"fence": 0})
            reconcile = op.post(
                f"/v1/operations/{child}/reconcile", json={"decision": "abandon", "note": ""}
            )
            left = op.get(f"/v1/operations/{child}").json()
        assert recover.status_code == 421, recover.text
        assert (recover.json()["owner_host"], recover.json()["owner_url"]) == (
            "host-b",
            owner.url,
        )
        assert recover.headers["location"] == f"{owner.url}/v1/operations/{child}/recover"
        assert (reconcile.status_code, reconcile.json()["code"]) == (409, "operation_conflict")
        assert left["status"] == "needs_recovery"
        with owner.operator() as op:
            finished = op.post(f"/v1/operations/{child}/recover", json={"fence": 0})
        assert finished.json()["status"] == "rolled_back", finished.text
        assert tree_bytes(repo) == {"notes.txt": (OLD, 0o644)}


def test_an_executors_client_follows_a_421_within_the_cluster_its_maker_read(
    tmp_path: Path, database_url: str
) -> None:
    """An executor's credential may not read the hosts list, so its own client cannot
    tell a host of the cluster from any other: a 421 stays a 421. Made from the
    orchestrator's client (``with_token``), it follows once within the cluster that
    client read, and says where it went."""
    with _cluster(tmp_path, database_url, ("a", "b")) as hosts:
        first, (owner, repo) = hosts["a"][0], hosts["b"]
        grant = _grant(repo, _identity(owner, "b"), "b")
        with PromoterClient(first.url, first.orchestrator_token) as orch:
            orch.register_grant(grant)  # followed to B
            assert orch.followed == owner.url
            token = orch.mint_executor_token(grant["executor_run_id"])["token"]
            with PromoterClient(first.url, token) as alone, pytest.raises(OwnedByOtherHost):
                alone.get_grant("grt_b")
            with orch.with_token(token) as executor:
                assert executor.get_grant("grt_b").grant_id == "grt_b"
                assert executor.followed == owner.url


def _answered(daemon: Daemon, status: str) -> dict[str, float]:
    """The requests ``daemon`` answered with ``status``, by method and route."""
    with daemon.client(daemon.orchestrator_token) as api:
        scraped = api.get("/metrics").text
    counted: dict[str, float] = {}
    for line in scraped.splitlines():
        if line.startswith("promoter_http_requests_total{") and f'status="{status}"' in line:
            labels, value = line.rsplit(" ", 1)
            counted[labels.removeprefix("promoter_http_requests_total")] = float(value)
    return counted


def test_promoter_run_given_one_host_promotes_into_another_hosts_repository(
    tmp_path: Path, database_url: str
) -> None:
    """The person's ``promoter run --url A --repo lab-b``: the sandbox is made from B's
    worktree (found through the cluster's map), the run's request is 421 on A and
    followed once to B, the command's changes are promoted by B exactly; A's repository
    and B's ``.git`` are untouched."""
    with _cluster(tmp_path, database_url, ("a", "b")) as hosts:
        (first, repo_a), (owner, repo_b) = hosts["a"], hosts["b"]
        (repo_b / "mine.txt").write_bytes(b"the person's untracked notes\n")
        git_before = git_dir_digest(repo_b)
        argv = [sys.executable, "-m", "promoter.cli.main", "run"]
        argv += ["--state-dir", str(first.state_dir), "--url", first.url, "--repo", "lab-b"]
        argv += ["--yes", "--json", "--", "sh", "-c", "printf 'two\\n' > notes.txt"]
        keep = ("PROMOTER_REQUIRE_BWRAP",)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_") or k in keep}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        outcome = json.loads(done.stdout)
        assert (outcome["repository"], outcome["status"]) == ("lab-b", "completed"), outcome
        said = done.stdout + done.stderr
        assert f"lab-b is guarded by {owner.url}: the step goes on there" in said, said
        with owner.orchestrator() as orch:
            view = orch.get(f"/v1/operations/{outcome['operation_id']}").json()
        assert (view["status"], view["owner"]["host"]) == ("completed", "host-b")
        assert view["receipt_sha256"] == outcome["receipt_sha256"]
        assert _answered(first, "421") == {'{method="POST",route="/v1/runs",status="421"}': 1.0}
        assert not [k for k in _answered(first, "201") if "bundles" in k or "blobs" in k]
        assert tree_bytes(repo_b) == {
            "notes.txt": (NEW, 0o644),
            "mine.txt": (b"the person's untracked notes\n", 0o644),
        }
        assert git_dir_digest(repo_b) == git_before
        assert tree_bytes(repo_a) == {"notes.txt": (OLD, 0o644)}


def _credentials(daemon: Daemon, database_url: str, *argv: str) -> str:
    app = typer.Typer()
    credentials_cmd.register(app)
    env = {"PROMOTER_DATABASE_URL": database_url, "PROMOTER_HOST_ID": daemon.services.owner.host}
    done = CliRunner().invoke(
        app, ["credentials", *argv, "--state-dir", str(daemon.state_dir)], env=env
    )
    assert done.exit_code == 0, done.output
    return str(done.stdout)


def test_a_credential_added_on_one_host_works_on_all_and_removal_reaches_all(
    tmp_path: Path, database_url: str
) -> None:
    """Added on A: valid on B at once. Removed on B (where it has no file): refused on
    A, whose console session of it ends at its next request; A's file of it, left
    behind, never makes it valid again."""
    with _cluster(tmp_path, database_url, ("a", "b")) as hosts:
        a, b = hosts["a"][0], hosts["b"][0]
        token = _credentials(a, database_url, "add", "dana").strip()
        with b.client(token) as api:
            assert api.get("/v1/whoami").json() == {
                "role": "operator",
                "name": "dana",
                "run_id": None,
            }
        with PromoterClient(b.url, a.orchestrator_token) as orch:
            assert orch.whoami()["name"] == "orchestrator"  # A's trusted token on B
        assert "dana" in _credentials(b, database_url, "list").split()
        with login(a, token) as browser:
            assert browser.get("/ui/operations").status_code == 200
            _credentials(b, database_url, "remove", "dana")
            assert browser.get("/ui/operations").status_code == 303  # back to the login
        for daemon in (a, b):
            with daemon.client(token) as api:
                gone = api.get("/v1/operations")
            assert gone.status_code == 401, gone.text
            assert gone.json()["code"] == "unauthenticated"
        assert (a.state_dir / "credentials" / "operators" / "dana.token").exists()
        a.services.auth.publish()  # as at A's next start
        with pytest.raises(Unauthenticated):
            a.services.auth.authenticate(token)
        assert "dana" not in _credentials(a, database_url, "list").split()


class _Hostile(BaseHTTPRequestHandler):
    """A server that answers every request 421 with a Location it was told to send,
    lists the hosts it was told to, and records the Authorization headers it saw."""

    routes: ClassVar[dict[str, tuple[str, list[str]]]] = {}  # path: (Location, hosts)
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        self.seen.append((self.path, self.headers.get("authorization")))
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        here = f"http://127.0.0.1:{self.server.server_port}"  # type: ignore[attr-defined]
        if self.path == "/v1/hosts":
            listed = self.routes.get("hosts", ("", []))[1]
            body = json.dumps({"hosts": [{"address": a} for a in listed]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
        else:
            target = self.routes.get(self.path, (f"{here}/elsewhere", []))[0]
            body = json.dumps(
                {"code": "owned_by_other_host", "status": 421, "owner_host": "x", "detail": "x"}
            ).encode()
            self.send_response(421)
            self.send_header("content-type", "application/problem+json")
            self.send_header("location", target)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815


@contextlib.contextmanager
def _servers(count: int) -> Iterator[list[str]]:
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _Hostile) for _ in range(count)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_a_421_is_followed_once_only_within_the_cluster_and_only_over_http() -> None:
    """The token goes to no origin the first server's hosts list does not name, never to a
    ``file:`` or other URL, and a second 421 is never followed."""
    with _servers(3) as (first, second, third):
        _Hostile.seen = []
        _Hostile.routes = {
            "hosts": ("", [second, third]),
            "/outside": ("http://127.0.0.2:9/v1/promotions", []),
            "/scheme": ("file:///etc/passwd", []),
            "/chain": (f"{second}/chain2", []),
            "/chain2": (f"{third}/chain3", []),
        }
        with PromoterClient(first, "por_secret") as client:
            for path in ("/outside", "/scheme", "/chain"):
                with pytest.raises(OwnedByOtherHost):
                    client._json("POST", path, json_body={"x": 1})
    paths = [path for path, _ in _Hostile.seen]
    assert paths.count("/chain2") == 1  # followed once, to a listed host
    assert "/chain3" not in paths  # never twice
    assert paths.count("/outside") == paths.count("/scheme") == 1  # asked, not followed
    assert all(token == "Bearer por_secret" for _, token in _Hostile.seen)
