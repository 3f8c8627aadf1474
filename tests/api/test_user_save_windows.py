"""TESTS.md W1 and W3: a user's save landing inside promoter's narrowest windows.

Each test pauses the real daemon (in-process, real uvicorn on loopback) at a fault point,
plays the user in between (an editor-style save: a temp file renamed over the target; or
an in-place save: ``O_TRUNC`` and write into the same inode), releases it, and asserts
that every byte the user saved is still on disk (in place or under the
``.promoter-kept-*`` name the operation report gives) and that the status is honest.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from promoter import faults
from promoter.cli.main import app
from promoter.engine.rollback import rollback_id
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo, sha
from tests.support.pause import Pause, specs
from tests.support.promotion import promote, submit, tree_bytes

Save = Callable[[Path, bytes], None]


def atomic_save(path: Path, data: bytes) -> None:
    """An editor's save: write a sibling temp file, then rename it over the target."""
    sibling = path.with_name(f".{path.name}.save~")
    sibling.write_bytes(data)
    os.rename(sibling, path)


def in_place_save(path: Path, data: bytes) -> None:
    """A save into the existing inode (``O_TRUNC`` + write)."""
    with path.open("r+b") as handle:
        handle.truncate(0)
        handle.write(data)


SAVES = pytest.mark.parametrize("save", [atomic_save, in_place_save], ids=["atomic", "in_place"])


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    def arm(*pauses: Pause) -> None:
        monkeypatch.setenv(faults.ENV, specs(*pauses))
        faults.reset()

    yield arm
    faults.reset()


class Running:
    """A promotion running in a thread while the test plays the user."""

    def __init__(self, daemon: Daemon, bundle: dict[str, Any], receipt: dict[str, Any]) -> None:
        self.view: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, args=(daemon, bundle, receipt))
        self.thread.start()

    def _run(self, daemon: Daemon, bundle: dict[str, Any], receipt: dict[str, Any]) -> None:
        self.view = promote(daemon, bundle, receipt).json()

    def join(self, *pauses: Pause) -> dict[str, Any]:
        for pause in pauses:
            pause.release()
        self.thread.join(120)
        assert not self.thread.is_alive()
        return self.view


def _operation(daemon: Daemon, operation_id: str) -> dict[str, Any]:
    with daemon.operator() as client:
        answer = client.get(f"/v1/operations/{operation_id}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


def _no_temps(repo: Path) -> None:
    assert not [p for p in repo.rglob(".promoter-tmp-*") if ".git" not in p.parts]


def _start(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, Iterator[Daemon]]:
    repo = init_repo(tmp_path / "work", files)
    return repo, running_daemon(tmp_path / "state", {"work": repo})


# -- W1: the exchange of a modify ----------------------------------------------------------


@SAVES
def test_second_save_during_swap_back_is_kept(
    tmp_path: Path, paused: Callable[..., None], save: Save
) -> None:
    first, second = Pause(tmp_path, "before_replace"), Pause(tmp_path, "before_swap_back")
    paused(first, second)
    repo, running = _start(tmp_path, {"f.txt": b"old\n", "other.txt": b"x\n"})
    with running as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("f.txt", b"old\n", b"new\n")])
        run = Running(daemon, bundle, receipt)
        try:
            first.reached()
            save(repo / "f.txt", b"save one\n")
            first.release()
            second.reached()
            save(repo / "f.txt", b"save two, the newest\n")
        finally:
            view = run.join(first, second)
        operation = _operation(daemon, view["operation_id"])
    op_id = view["operation_id"]
    assert view["status"] == "needs_reconciliation"
    kept_as = f".promoter-kept-{op_id}-1-0"
    assert operation["report"]["kept"] == [
        {
            "path": "f.txt",
            "kept_as": kept_as,
            "kind": "file",
            "sha256": sha(b"save two, the newest\n"),
            "size": 21,
        }
    ]
    assert (repo / "f.txt").read_bytes() == b"save one\n"
    assert (repo / kept_as).read_bytes() == b"save two, the newest\n"
    assert (repo / "other.txt").read_bytes() == b"x\n"
    _no_temps(repo)


@SAVES
def test_save_before_the_exchange_is_put_back_in_place(
    tmp_path: Path, paused: Callable[..., None], save: Save
) -> None:
    first = Pause(tmp_path, "before_replace")
    paused(first)
    repo, running = _start(tmp_path, {"f.txt": b"old\n"})
    with running as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("f.txt", b"old\n", b"new\n")])
        run = Running(daemon, bundle, receipt)
        try:
            first.reached()
            save(repo / "f.txt", b"the user's save\n")
        finally:
            view = run.join(first)
        operation = _operation(daemon, view["operation_id"])
    assert view["status"] == "needs_reconciliation"
    assert "kept" not in operation["report"]
    assert (repo / "f.txt").read_bytes() == b"the user's save\n"
    assert sorted(tree_bytes(repo)) == ["f.txt"]


@SAVES
def test_save_after_the_exchange_is_never_overwritten_by_the_receipt(
    tmp_path: Path, paused: Callable[..., None], save: Save
) -> None:
    after = Pause(tmp_path, "after_replace")
    paused(after)
    repo, running = _start(tmp_path, {"f.txt": b"old\n"})
    with running as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("f.txt", b"old\n", b"new\n")])
        run = Running(daemon, bundle, receipt)
        try:
            after.reached()
            save(repo / "f.txt", b"edited right after\n")
        finally:
            view = run.join(after)
    assert view["status"] == "needs_reconciliation"
    assert (repo / "f.txt").read_bytes() == b"edited right after\n"
    _no_temps(repo)


# -- W3: a checked delete -------------------------------------------------------------------


@SAVES
def test_save_during_delete_is_kept(
    tmp_path: Path, paused: Callable[..., None], save: Save
) -> None:
    window = Pause(tmp_path, "before_unlink")
    paused(window)
    repo, running = _start(tmp_path, {"gone.txt": b"delete me\n", "keep.txt": b"k\n"})
    with running as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("gone.txt", b"delete me\n", None)])
        run = Running(daemon, bundle, receipt)
        try:
            window.reached()
            save(repo / "gone.txt", b"but I just saved this\n")
        finally:
            view = run.join(window)
        operation = _operation(daemon, view["operation_id"])
    assert view["status"] == "needs_reconciliation"
    assert "kept" not in operation["report"]  # it went back under its own name
    assert (repo / "gone.txt").read_bytes() == b"but I just saved this\n"
    assert (repo / "keep.txt").read_bytes() == b"k\n"
    _no_temps(repo)


def test_file_created_while_the_deleted_file_is_aside_stays(
    tmp_path: Path, paused: Callable[..., None]
) -> None:
    window = Pause(tmp_path, "after_move_aside")
    paused(window)
    repo, running = _start(tmp_path, {"gone.txt": b"delete me\n"})
    with running as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("gone.txt", b"delete me\n", None)])
        run = Running(daemon, bundle, receipt)
        try:
            window.reached()
            (repo / "gone.txt").write_bytes(b"a new file under the old name\n")
        finally:
            view = run.join(window)
    assert view["status"] == "needs_reconciliation"
    assert (repo / "gone.txt").read_bytes() == b"a new file under the old name\n"
    _no_temps(repo)


def test_save_during_rollback_delete_is_kept(tmp_path: Path, paused: Callable[..., None]) -> None:
    repo, running = _start(tmp_path, {"a.txt": b"a\n"})
    with running as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("made.txt", None, b"promoted\n")])
        view = promote(daemon, bundle, receipt).json()
        assert view["status"] == "completed"
        window = Pause(tmp_path, "before_unlink")
        paused(window)
        result: dict[str, Any] = {}

        def roll() -> None:
            with daemon.operator() as client:
                result["answer"] = client.post(f"/v1/operations/{view['operation_id']}/rollback")

        thread = threading.Thread(target=roll)
        thread.start()
        try:
            window.reached()
            atomic_save(repo / "made.txt", b"the user kept working on it\n")
        finally:
            window.release()
            thread.join(120)
    answer = result["answer"]
    assert answer.status_code == 200, answer.text
    rolled = answer.json()
    assert rolled["status"] == "rollback_failed"  # its only target is a conflict
    assert [t["result"] for t in rolled["targets"]] == ["conflict"]
    assert (repo / "made.txt").read_bytes() == b"the user kept working on it\n"
    _no_temps(repo)


@SAVES
def test_save_during_restore_delete_is_kept(
    tmp_path: Path, paused: Callable[..., None], save: Save
) -> None:
    repo, running = _start(tmp_path, {"a.txt": b"a\n"})
    base = "/v1/repositories/work/snapshots"
    with running as daemon, daemon.operator() as client:
        before = client.post(base, json={"label": "before"}).json()["tree"]
        (repo / "junk.txt").write_bytes(b"junk\n")
        after = client.post(base, json={"label": "after"}).json()["tree"]
        window = Pause(tmp_path, "before_unlink")
        paused(window)
        result: dict[str, Any] = {}

        def restore() -> None:
            with daemon.operator() as other:
                result["answer"] = other.post(
                    f"{base}/{before}/restore", json={"expected_current_tree": after}
                )

        thread = threading.Thread(target=restore)
        thread.start()
        try:
            window.reached()
            save(repo / "junk.txt", b"not junk any more\n")
        finally:
            window.release()
            thread.join(120)
        answer = result["answer"]
        assert answer.status_code == 200, answer.text
        # the save went back under its own name and nothing else changed: refused, honestly
        assert answer.json()["status"] == "refused"
        operation = client.get(f"/v1/operations/{answer.json()['operation_id']}").json()
        assert operation["code"] == "target_drift"
    assert (repo / "junk.txt").read_bytes() == b"not junk any more\n"
    assert (repo / "a.txt").read_bytes() == b"a\n"
    _no_temps(repo)


def test_second_save_during_rollback_swap_back_is_kept(
    tmp_path: Path, paused: Callable[..., None]
) -> None:
    repo, running = _start(tmp_path, {"f.txt": b"old\n"})
    with running as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("f.txt", b"old\n", b"new\n")])
        view = promote(daemon, bundle, receipt).json()
        assert view["status"] == "completed"
        first, second = Pause(tmp_path, "before_replace"), Pause(tmp_path, "before_swap_back")
        paused(first, second)
        result: dict[str, Any] = {}

        def roll() -> None:
            with daemon.operator() as client:
                result["answer"] = client.post(f"/v1/operations/{view['operation_id']}/rollback")

        thread = threading.Thread(target=roll)
        thread.start()
        try:
            first.reached()
            atomic_save(repo / "f.txt", b"one\n")
            first.release()
            second.reached()
            atomic_save(repo / "f.txt", b"two\n")
        finally:
            first.release()
            second.release()
            thread.join(120)
        child = _operation(daemon, rollback_id(view["operation_id"]))
    rolled = result["answer"].json()
    assert rolled["status"] == "rollback_failed"  # its only target is a conflict
    assert [t["result"] for t in rolled["targets"]] == ["conflict"]
    kept_as = f".promoter-kept-{child['operation_id']}-1-0"
    assert [k["kept_as"] for k in child["report"]["kept"]] == [kept_as]
    assert (repo / "f.txt").read_bytes() == b"one\n"
    assert (repo / kept_as).read_bytes() == b"two\n"
    _no_temps(repo)


def test_ops_show_says_where_kept_bytes_are(tmp_path: Path, paused: Callable[..., None]) -> None:
    first, second = Pause(tmp_path, "before_replace"), Pause(tmp_path, "before_swap_back")
    paused(first, second)
    repo, running = _start(tmp_path, {"f.txt": b"old\n"})
    with running as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("f.txt", b"old\n", b"new\n")])
        run = Running(daemon, bundle, receipt)
        try:
            first.reached()
            atomic_save(repo / "f.txt", b"one\n")
            first.release()
            second.reached()
            atomic_save(repo / "f.txt", b"two\n")
        finally:
            view = run.join(first, second)
        env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
        shown = CliRunner().invoke(
            app, ["ops", "show", view["operation_id"]], env=env, terminal_width=250
        )
    assert shown.exit_code == 0, shown.output
    kept_as = f".promoter-kept-{view['operation_id']}-1-0"
    line = " ".join(shown.output.split())
    digest = sha(b"two\n")[:12]
    assert f"kept f.txt: bytes that were not promoter's ({digest}, 4 bytes)" in line
    assert kept_as in line
