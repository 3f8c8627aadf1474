"""C3: injected EIO/ENOSPC/EACCES at the write boundaries of a promotion.

The error must surface with a code; no target is ever torn (each is exactly old or
exactly new); an error before the first replace leaves the operation ``refused`` with
nothing written and no temp files; an error after writing began leaves it
``needs_reconciliation`` with a per-path report, and ``continue`` finishes it once the
disk behaves. A failed fsync is never retried and trusted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter import faults
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo
from tests.support.fsutil import NEVER_BUSY, skip_without_group_sync
from tests.support.promotion import promote, submit, tree_bytes

FILES = {f"src/f{i}.txt": f"old {i}\n".encode() for i in range(4)}
CHANGES = [(p, d, d.replace(b"old", b"new")) for p, d in FILES.items()]
CHANGES.append(("src/new/created.txt", None, b"created\n"))


@pytest.fixture(params=["group_sync", "fsync_each"])
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Daemon, Path]]:
    """The lab repository and its daemon; every case runs with one ``syncfs`` per group
    of files where this filesystem allows it, and with an fsync per file and directory."""
    repo = init_repo(tmp_path / "lab", FILES)
    grouped = request.param == "group_sync"
    with running_daemon(
        tmp_path / "state",
        {"lab": repo},
        group_sync=grouped,
        group_sync_max_pending_bytes=NEVER_BUSY,
    ) as daemon:
        yield daemon, repo


def _inject(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv(faults.ENV, spec)
    faults.reset()


def _assert_untorn(repo: Path) -> None:
    now = tree_bytes(repo)
    for path, old, new in CHANGES:
        assert now.get(path, (None, 0))[0] in (old, new), path
    assert not list(repo.rglob(".promoter-tmp-*"))


@pytest.mark.parametrize(
    "spec",
    [
        "after_temp_write=ENOSPC",
        "after_temp_write=EIO@3",
        "after_mkdir=EACCES",
        "after_temps_journaled=EIO",
    ],
)
def test_error_before_any_replace_is_refused_with_nothing_written(
    spec: str, lab: tuple[Daemon, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, repo = lab
    identity = daemon.services.registry.by_name("lab").identity
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    before = tree_bytes(repo)
    _inject(monkeypatch, spec)
    view = promote(daemon, bundle, receipt).json()
    assert (view["status"], view["code"]) == ("refused", "write_failed"), view
    assert tree_bytes(repo) == before
    assert not (repo / "src" / "new").exists()
    _assert_untorn(repo)
    monkeypatch.delenv(faults.ENV)
    assert promote(daemon, bundle, receipt).json()["status"] == "completed"


@pytest.mark.parametrize(
    "spec",
    [
        "before_replace=EIO@2",
        "after_replace=ENOSPC@3",
        "after_parent_fsync=EIO",
        "after_unlink=EIO",
    ],
)
def test_error_after_writing_began_fails_closed_then_continue_finishes(
    spec: str, lab: tuple[Daemon, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, repo = lab
    identity = daemon.services.registry.by_name("lab").identity
    changes = [*CHANGES, ("src/f0.txt", FILES["src/f0.txt"], b"x")][:-1]
    if spec.startswith("after_unlink"):
        changes = [*CHANGES[:2], ("src/f3.txt", FILES["src/f3.txt"], None)]
    _, bundle, receipt = submit(daemon, repo, identity, changes)
    _inject(monkeypatch, spec)
    view = promote(daemon, bundle, receipt).json()
    assert (view["status"], view["code"]) == ("needs_reconciliation", "write_failed"), view
    verdicts = [p["verdict"] for p in view["report"]["paths"]]
    assert set(verdicts) <= {"old", "new"}
    assert "new" in verdicts
    assert view["report"]["error"]["code"] == "write_failed"
    now = tree_bytes(repo)
    for path, old, new in changes:
        assert now.get(path, (None, 0))[0] in (old, new), path
    assert not list(repo.rglob(".promoter-tmp-*"))
    monkeypatch.delenv(faults.ENV)
    _continue_to_new(daemon, repo, view["operation_id"], changes)


def _continue_to_new(
    daemon: Daemon, repo: Path, op_id: str, changes: list[tuple[str, bytes | None, bytes]]
) -> None:
    """The operator's ``continue`` completes the operation; every target holds its new bytes."""
    with daemon.operator() as op:
        done = op.post(
            f"/v1/operations/{op_id}/reconcile",
            json={"decision": "continue", "note": "disk replaced"},
        )
    assert done.json()["status"] == "completed", done.json()
    for path, _old, new in changes:
        assert tree_bytes(repo).get(path, (None, 0))[0] == new


def _receipts(daemon: Daemon, op_id: str) -> list[bytes]:
    folder = daemon.state_dir / "audit" / "receipts" / "promotion"
    return [p.read_bytes() for p in sorted(folder.glob(f"{op_id}*"))]


@pytest.mark.parametrize(
    ("spec", "status", "code", "why"),
    [
        ("after_readback=EIO", 503, "write_failed", "after_readback: Input/output error"),
        ("before_receipt=ENOSPC", 507, "storage_error", "before_receipt: No space left on device"),
    ],
)
def test_io_error_during_continue_leaves_it_needs_reconciliation_never_stuck_running(
    spec: str,
    status: int,
    code: str,
    why: str,
    lab: tuple[Daemon, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An I/O error while ``continue`` finishes the operation answers its code (a full disk
    ``storage_error``, protocol: storage#storage-quota) and puts it back to
    ``needs_reconciliation``; it was answered 500 and left ``in_progress``."""
    daemon, repo = lab
    identity = daemon.services.registry.by_name("lab").identity
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    _inject(monkeypatch, "after_replace=ENOSPC@3")
    first = promote(daemon, bundle, receipt).json()
    op_id = first["operation_id"]
    assert first["status"] == "needs_reconciliation", first
    _inject(monkeypatch, spec)
    with daemon.operator() as op:
        answer = op.post(f"/v1/operations/{op_id}/reconcile", json={"decision": "continue"})
        assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text
        view = op.get(f"/v1/operations/{op_id}").json()
    detail = f"the reconciliation stopped: injected fault at {why}"
    assert (view["status"], view["code"], view["detail"]) == (
        "needs_reconciliation",
        code,
        detail,
    ), view
    assert answer.json()["detail"] == detail
    _assert_untorn(repo)
    assert _receipts(daemon, op_id) == []
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    with daemon.operator() as op:
        done = op.post(f"/v1/operations/{op_id}/reconcile", json={"decision": "continue"})
        assert done.json()["status"] == "completed", done.json()
        served = op.get(f"/v1/operations/{op_id}/receipt").content
    assert {p: tree_bytes(repo)[p][0] for p, _old, _new in CHANGES} == {
        p: new for p, _old, new in CHANGES
    }
    assert _receipts(daemon, op_id) == [served]


def test_io_error_during_recover_leaves_it_needs_recovery_never_stuck_running(
    lab: tuple[Daemon, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for ``recover``: an error before the outcome's one commit (the receipt is
    part of it, protocol: storage#receipt-in-outcome-commit) records nothing of it, twice; the
    recovery that gets through makes exactly one receipt, its file the served bytes."""
    daemon, repo = lab
    identity = daemon.services.registry.by_name("lab").identity
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    _inject(monkeypatch, "before_receipt=EIO")
    view = promote(daemon, bundle, receipt).json()
    assert view["status"] == "needs_recovery", view
    op_id = view["operation_id"]
    assert view.get("receipt_sha256") is None, view
    assert _receipts(daemon, op_id) == []
    _inject(monkeypatch, "before_receipt=EIO")
    with daemon.orchestrator() as orch:
        answer = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
        assert (answer.status_code, answer.json()["code"]) == (503, "write_failed"), answer.text
        view = orch.get(f"/v1/operations/{op_id}").json()
    assert (view["status"], view["code"], view["detail"]) == (
        "needs_recovery",
        "write_failed",
        "the recovery stopped: injected fault at before_receipt: Input/output error",
    ), view
    _assert_untorn(repo)
    assert _receipts(daemon, op_id) == []
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    with daemon.orchestrator() as orch:
        done = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
        assert done.json()["status"] == "completed", done.json()
        served = orch.get(f"/v1/operations/{op_id}/receipt").content
    assert _receipts(daemon, op_id) == [served]
    assert [e["kind"] for e in done.json()["events"]].count("outcome") == 1


@pytest.mark.parametrize(
    ("nth", "status"),
    [(1, "refused"), (2, "needs_reconciliation")],
    ids=["temps_sync", "directories_sync"],
)
def test_a_failed_group_sync_fails_like_a_failed_fsync_and_is_never_retried(
    nth: int, status: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``syncfs`` that stands for every temp's fsync fails: nothing is named or
    replaced (``refused``); the one that stands for every directory's fsync fails: the
    replaces are done but not trusted (``needs_reconciliation``). No target is torn,
    no temp is left, and the promotion (or ``continue``) finishes once the disk behaves."""
    repo = init_repo(tmp_path / "lab", FILES)
    skip_without_group_sync(repo)
    with running_daemon(
        tmp_path / "state", {"lab": repo}, group_sync_max_pending_bytes=NEVER_BUSY
    ) as daemon:
        _fail_a_group_sync(daemon, repo, nth, status, monkeypatch)


def _fail_a_group_sync(
    daemon: Daemon, repo: Path, nth: int, status: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = daemon.services.registry.by_name("lab").identity
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    before = tree_bytes(repo)
    _inject(monkeypatch, f"after_group_sync=EIO@{nth}")
    view = promote(daemon, bundle, receipt).json()
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    assert (view["status"], view["code"]) == (status, "write_failed"), view
    what = "the new files" if status == "refused" else "the parent directories"
    assert (
        view["detail"]
        == f"syncing {what} failed: injected fault at after_group_sync: Input/output error"
    )
    _assert_untorn(repo)
    if status == "refused":
        assert tree_bytes(repo) == before
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        for path, _old, new in CHANGES:
            assert tree_bytes(repo).get(path, (None, 0))[0] == new
    else:
        assert "new" in [p["verdict"] for p in view["report"]["paths"]]
        _continue_to_new(daemon, repo, view["operation_id"], CHANGES)


@pytest.mark.parametrize("nth", [1, 3, 5])
def test_a_failed_temp_fsync_of_the_concurrent_fallback_refuses_with_nothing_written(
    nth: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No group sync: a group's temps are fsynced a few at once, and whichever of them
    fails (the ``nth`` fsync to return), the promotion is refused exactly as a failed
    fsync in the one-by-one loop refused it: ``write_failed`` naming that temp's path,
    nothing replaced, no temp left; the same promotion then completes."""
    repo = init_repo(tmp_path / "lab", FILES)
    with running_daemon(tmp_path / "state", {"lab": repo}, group_sync=False) as daemon:
        identity = daemon.services.registry.by_name("lab").identity
        _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
        before = tree_bytes(repo)
        _inject(monkeypatch, f"after_temp_fsync=EIO@{nth}")
        view = promote(daemon, bundle, receipt).json()
        monkeypatch.delenv(faults.ENV)
        faults.reset()
        assert (view["status"], view["code"]) == ("refused", "write_failed"), view
        assert view["detail"] == (
            "writing a temp file failed: injected fault at after_temp_fsync: Input/output error"
        )
        assert view["report"]["error"]["path"] in [path for path, _, _ in CHANGES]
        assert tree_bytes(repo) == before
        _assert_untorn(repo)
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        for path, _old, new in CHANGES:
            assert tree_bytes(repo).get(path, (None, 0))[0] == new
