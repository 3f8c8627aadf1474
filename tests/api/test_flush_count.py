"""How many flushes and git processes the fixed cost of a 1-file change is made of.

A 1-file flow is the upload of its blob, the submission of its bundle and the promotion
(``wait``), through the real server, on a daemon that has already promoted once (so the
state directory's folders, the blob's fan-out folder and the compiled statements exist:
what every later change pays, not what the first one does once). Flushes are counted
with the fs layer's own counter (``promoter.fs.flush``: ``fsync``, ``fdatasync``,
``syncfs``) and the database's durable commits (``sqlite_commit``: one flush of the WAL
each; PostgreSQL's are the server's, and none is counted); git processes with the
runner's (``promoter.git.runner.spawned``).

The counts are pinned so that a change that adds a flush or a git process says so; a
flush fewer is a change of the protocol's durability and must say why in its decision
record (``docs/decisions/durable-commits-where-the-protocol-needs-them.md``).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from promoter.domain.blob_frames import frame_header
from promoter.domain.evidence_frames import bundle_header
from promoter.fs import flush
from promoter.git import runner
from tests.gitutil import commit_all
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import make_bundle, make_grant, sha, upload
from tests.support.fsutil import groups_syncs
from tests.support.promotion import promote, set_lease

# per 1-file flow: the blob (its temp, its folder), the run's quota record (temp,
# folder), the bundle and its verification receipt (temp and folder each), the worktree
# file (temp, folder); where a group sync is offered, one syncfs for the blob's and the
# quota record's temps (their folders an fsync each, the record named before the blob),
# one for the submission's two temps and one for its two folders. The promotion
# receipt's file is a copy of the outcome's row, written after its commit, not flushed
# (protocol: storage#receipt-in-outcome-commit): its temp's and its folder's fsyncs are gone
FS_FLUSHES = {"fsync": 10}
FS_FLUSHES_GROUPED = {"fsync": 4, "syncfs": 3}
# the plan before the first write, the outcome (event, receipt, envelope, ``completed``)
# before the answer; the blob's row, the bundle's and the request's are not flushed
SQLITE_COMMITS = 2
# none: HEAD from its files at the read-back (git told the commit's tree when the grant
# was registered); the index entries come from the whole listing the first flow made of
# the same index file, the tree entries read when the bundle is verified from the
# repository's running cat-file (no process either)
GIT = 0


# the same flow in one request (``POST /v1/promotions:withEvidence``), where a group sync
# is offered: one syncfs for every temp of the evidence (the blob's, the quota record's,
# the bundle's, the verification receipt's), the record named and ``quota/`` fsynced, one
# syncfs for every name (the blob's, the bundle's, the receipt's); then the promotion's
# plan, worktree temp, worktree folder and outcome (protocol: storage#evidence-of-one-request).
# Without one: an fsync of each of the four temps, of ``quota/`` and of the three folders
# named in, then the promotion's two
ONE_REQUEST_FLUSHES = {"fsync": 10}
ONE_REQUEST_FLUSHES_GROUPED = {"fsync": 3, "syncfs": 2}


def _same_fan_out(data: bytes) -> bytes:
    """Other bytes whose blob lands in the same fan-out folder as ``data``'s."""
    prefix = hashlib.sha256(data).hexdigest()[:2]
    for n in range(100_000):
        other = b"warm-up %d\n" % n
        if hashlib.sha256(other).hexdigest()[:2] == prefix:
            return other
    raise AssertionError("no bytes found for the fan-out folder")


def _flow(
    daemon: Daemon, repo: Path, identity: str, n: int, data: bytes
) -> tuple[Counter[str], int]:
    """One 1-file flow; the flushes and git processes of its upload, submit, promotion."""
    grant = make_grant(repo, identity, grant_id=f"grt_flush{n}", workflow_id=f"wf_flush{n}")
    with daemon.orchestrator() as orch:
        answer = orch.post("/v1/grants", json=grant)
        assert answer.status_code == 201, answer.text
    set_lease(daemon, grant)
    changes: list[tuple[str, bytes | None, bytes | None]] = [(f"src/f{n}.py", None, data)]
    bundle = make_bundle(grant, changes)
    with daemon.executor(grant["executor_run_id"]) as executor:
        before, spawned = flush.flushes(), runner.spawned()
        upload(executor, data)
        answer = executor.post("/v1/bundles", json=bundle)
        assert answer.status_code == 201, answer.text
        receipt = answer.json()["verification_receipt"]
        view = promote(daemon, bundle, receipt).json()
        counted, started = flush.flushes() - before, runner.spawned() - spawned
    assert view["status"] == "completed", view
    return counted, started


@pytest.mark.parametrize("group_sync", [True, False], ids=["group-sync", "fsync-each"])
def test_a_one_file_flow_pays_a_pinned_number_of_flushes_and_git_processes(
    tmp_path: Path, repo: Path, group_sync: bool
) -> None:
    # out of reach: a busy machine's dirty pages cannot turn the group path into fsyncs
    settings = {"group_sync": group_sync, "group_sync_max_pending_bytes": 1 << 62}
    with running_daemon(tmp_path / "state", {"work": repo}, **settings) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        data = b"print('one file')\n"
        _flow(daemon, repo, identity, 0, _same_fan_out(data))
        counted, started = _flow(daemon, repo, identity, 1, data)
        sqlite = daemon.services.db.engine.dialect.name == "sqlite"
    grouped = group_sync and groups_syncs(tmp_path / "state")
    fs = FS_FLUSHES_GROUPED if grouped else FS_FLUSHES
    expected = Counter(fs) + Counter(sqlite_commit=SQLITE_COMMITS if sqlite else 0)
    assert counted == expected, counted
    assert started == GIT
    assert (repo / "src" / "f1.py").read_bytes() == data


def test_a_flow_that_modifies_a_tracked_file_starts_no_more_git_processes(
    tmp_path: Path, repo: Path
) -> None:
    """The base state of a modified file is a blob's digest: asked of the repository's
    running cat-file, not of a process of its own (the second flow's file is one no
    earlier flow asked about)."""
    olds = {n: b"tracked %d\n" % n for n in range(2)}
    for n, old in olds.items():
        (repo / "src" / f"tracked{n}.py").write_bytes(old)
    commit_all(repo, "tracked files")
    with running_daemon(tmp_path / "state", {"work": repo}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        for n, old in olds.items():
            new = b"changed %d\n" % n
            grant = make_grant(repo, identity, grant_id=f"grt_mod{n}", workflow_id=f"wf_mod{n}")
            with daemon.orchestrator() as orch:
                assert orch.post("/v1/grants", json=grant).status_code == 201
            set_lease(daemon, grant)
            bundle = make_bundle(grant, [(f"src/tracked{n}.py", old, new)])
            with daemon.executor(grant["executor_run_id"]) as executor:
                spawned = runner.spawned()
                upload(executor, old)
                upload(executor, new)
                answer = executor.post("/v1/bundles", json=bundle)
                assert answer.status_code == 201, answer.text
                receipt = answer.json()["verification_receipt"]
                view = promote(daemon, bundle, receipt).json()
                started = runner.spawned() - spawned
            assert view["status"] == "completed", view
            assert (repo / "src" / f"tracked{n}.py").read_bytes() == new
    assert started == GIT  # the second flow: HEAD from its files, nothing else


def _one_request(daemon: Daemon, repo: Path, identity: str, n: int, data: bytes) -> Counter[str]:
    """One 1-file flow in one request, its own run; the flushes it made."""
    run_id = f"run_one{n}"
    grant = make_grant(
        repo, identity, grant_id=f"grt_one{n}", workflow_id=f"wf_one{n}", run_id=run_id
    )
    with daemon.orchestrator() as orch:
        assert orch.post("/v1/grants", json=grant).status_code == 201
        token = orch.post(
            "/v1/executor-tokens", json={"executor_run_id": run_id, "ttl_seconds": 3600}
        ).json()["token"]
    set_lease(daemon, grant)
    document = json.dumps(make_bundle(grant, [(f"src/one{n}.py", None, data)])).encode()
    content = bundle_header(len(document)) + document + frame_header(sha(data), len(data)) + data
    with daemon.orchestrator() as orch:
        before = flush.flushes()
        answer = orch.post(
            "/v1/promotions:withEvidence",
            content=content,
            params={"fence": "7", "wait": "true"},
            headers={"Content-Type": "application/octet-stream", "Promoter-Executor-Token": token},
        )
        counted = flush.flushes() - before
    assert answer.status_code == 200, answer.text
    assert answer.json()["operation"]["status"] == "completed"
    return counted


@pytest.mark.parametrize("group_sync", [True, False], ids=["group-sync", "fsync-each"])
def test_a_one_file_flow_in_one_request_pays_a_pinned_number_of_flushes(
    tmp_path: Path, repo: Path, group_sync: bool
) -> None:
    settings = {"group_sync": group_sync, "group_sync_max_pending_bytes": 1 << 62}
    data = b"print('one request')\n"
    with running_daemon(tmp_path / "state", {"work": repo}, **settings) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _one_request(daemon, repo, identity, 0, _same_fan_out(data))
        counted = _one_request(daemon, repo, identity, 1, data)
        sqlite = daemon.services.db.engine.dialect.name == "sqlite"
    grouped = group_sync and groups_syncs(tmp_path / "state")
    fs = ONE_REQUEST_FLUSHES_GROUPED if grouped else ONE_REQUEST_FLUSHES
    expected = Counter(fs) + Counter(sqlite_commit=SQLITE_COMMITS if sqlite else 0)
    assert counted == expected, counted
    assert (repo / "src" / "one1.py").read_bytes() == data
