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
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from promoter import faults
from promoter.cli.main import app
from promoter.engine.operation.rollback import rollback_id
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo, sha
from tests.support.pause import Pause, specs
from tests.support.promotion import promote, submit, tree_bytes

Save = Callable[[Path, bytes], None]
Play = tuple[Pause, Callable[[Path], None]]
SNAPSHOTS = "/v1/repositories/work/snapshots"


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


def saving(path: str, data: bytes, save: Save = atomic_save) -> Callable[[Path], None]:
    """The user's move: save ``data`` at ``path`` of the worktree."""
    return lambda repo: save(repo / path, data)


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    def arm(*pauses: Pause) -> None:
        monkeypatch.setenv(faults.ENV, specs(*pauses))
        faults.reset()

    yield arm
    faults.reset()


@dataclass
class Raced:
    repo: Path
    daemon: Daemon
    answer: httpx.Response | None = None
    operation: dict[str, Any] = field(default_factory=dict)

    def view(self, operation_id: str) -> dict[str, Any]:
        with self.daemon.operator() as client:
            answer = client.get(f"/v1/operations/{operation_id}")
            assert answer.status_code == 200, answer.text
            return dict(answer.json())


def _race(raced: Raced, request: Callable[[Daemon], httpx.Response], plays: list[Play]) -> None:
    """Send ``request`` in a thread; at each pause play the user, then release it."""

    def send() -> None:
        raced.answer = request(raced.daemon)

    thread = threading.Thread(target=send)
    thread.start()
    try:
        for pause, play in plays:
            pause.reached()
            play(raced.repo)
            pause.release()
    finally:
        for pause, _ in plays:
            pause.release()
        thread.join(120)
    assert not thread.is_alive()
    assert raced.answer is not None and raced.answer.status_code == 200, raced.answer


@contextmanager
def racing(
    tmp_path: Path,
    arm: Callable[..., None],
    files: dict[str, bytes],
    change: tuple[str, bytes | None, bytes | None],
    *plays: Play,
    rollback: bool = False,
) -> Iterator[Raced]:
    """A promotion of ``change`` (or, with ``rollback``, the rollback of that completed
    promotion) while the user plays ``plays``; yields it with its final operation view."""
    repo = init_repo(tmp_path / "work", files)
    with running_daemon(tmp_path / "state", {"work": repo}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [change])
        op_id = ""
        if rollback:
            promoted = promote(daemon, bundle, receipt).json()
            assert promoted["status"] == "completed"
            op_id = promoted["operation_id"]

        def request(d: Daemon) -> httpx.Response:
            if not rollback:
                return promote(d, bundle, receipt)
            with d.operator() as client:
                return client.post(f"/v1/operations/{op_id}/rollback")

        arm(*(pause for pause, _ in plays))
        raced = Raced(repo, daemon)
        _race(raced, request, list(plays))
        assert raced.answer is not None
        shown = rollback_id(op_id) if rollback else raced.answer.json()["operation_id"]
        raced.operation = raced.view(shown)
        yield raced


def _no_temps(repo: Path) -> None:
    assert not [p for p in repo.rglob(".promoter-tmp-*") if ".git" not in p.parts]


def _two_saves(tmp_path: Path, save: Save, one: bytes, two: bytes) -> list[Play]:
    """A save before the exchange, and a second one before the swap-back."""
    return [
        (Pause(tmp_path, "before_replace"), saving("f.txt", one, save)),
        (Pause(tmp_path, "before_swap_back"), saving("f.txt", two, save)),
    ]


MODIFY = ("f.txt", b"old\n", b"new\n")

# -- W1: the exchange of a modify ----------------------------------------------------------


@SAVES
def test_second_save_during_swap_back_is_kept(
    tmp_path: Path, paused: Callable[..., None], save: Save
) -> None:
    files = {"f.txt": b"old\n", "other.txt": b"x\n"}
    plays = _two_saves(tmp_path, save, b"save one\n", b"save two, the newest\n")
    with racing(tmp_path, paused, files, MODIFY, *plays) as raced:
        operation = raced.operation
    op_id, repo = operation["operation_id"], raced.repo
    assert operation["status"] == "needs_reconciliation"
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
    play = (Pause(tmp_path, "before_replace"), saving("f.txt", b"the user's save\n", save))
    with racing(tmp_path, paused, {"f.txt": b"old\n"}, MODIFY, play) as raced:
        operation = raced.operation
    assert operation["status"] == "needs_reconciliation"
    assert "kept" not in operation["report"]
    assert (raced.repo / "f.txt").read_bytes() == b"the user's save\n"
    assert sorted(tree_bytes(raced.repo)) == ["f.txt"]


@SAVES
def test_save_after_the_exchange_is_never_overwritten_by_the_receipt(
    tmp_path: Path, paused: Callable[..., None], save: Save
) -> None:
    play = (Pause(tmp_path, "after_replace"), saving("f.txt", b"edited right after\n", save))
    with racing(tmp_path, paused, {"f.txt": b"old\n"}, MODIFY, play) as raced:
        operation = raced.operation
    assert operation["status"] == "needs_reconciliation"
    assert operation["receipt_sha256"] is None
    assert (raced.repo / "f.txt").read_bytes() == b"edited right after\n"
    _no_temps(raced.repo)


def test_second_save_during_rollback_swap_back_is_kept(
    tmp_path: Path, paused: Callable[..., None]
) -> None:
    plays = _two_saves(tmp_path, atomic_save, b"one\n", b"two\n")
    with racing(tmp_path, paused, {"f.txt": b"old\n"}, MODIFY, *plays, rollback=True) as raced:
        assert raced.answer is not None
        rolled, child = raced.answer.json(), raced.operation
    assert rolled["status"] == "rollback_failed"  # its only target is a conflict
    assert [t["result"] for t in rolled["targets"]] == ["conflict"]
    kept_as = f".promoter-kept-{child['operation_id']}-1-0"
    assert [k["kept_as"] for k in child["report"]["kept"]] == [kept_as]
    assert (raced.repo / "f.txt").read_bytes() == b"one\n"
    assert (raced.repo / kept_as).read_bytes() == b"two\n"
    _no_temps(raced.repo)


def test_ops_show_says_where_kept_bytes_are(tmp_path: Path, paused: Callable[..., None]) -> None:
    plays = _two_saves(tmp_path, atomic_save, b"one\n", b"two\n")
    with racing(tmp_path, paused, {"f.txt": b"old\n"}, MODIFY, *plays) as raced:
        env = {"PROMOTER_URL": raced.daemon.url, "PROMOTER_TOKEN": raced.daemon.operator_token}
        op_id = raced.operation["operation_id"]
        shown = CliRunner().invoke(app, ["ops", "show", op_id], env=env, terminal_width=250)
    assert shown.exit_code == 0, shown.output
    line = " ".join(shown.output.split())
    digest = sha(b"two\n")[:12]
    assert f"kept f.txt: bytes that were not promoter's ({digest}, 4 B)" in line
    assert f".promoter-kept-{op_id}-1-0" in line


# -- W3: a checked delete -------------------------------------------------------------------

DELETE = ("gone.txt", b"delete me\n", None)


@SAVES
def test_save_during_delete_is_kept(
    tmp_path: Path, paused: Callable[..., None], save: Save
) -> None:
    files = {"gone.txt": b"delete me\n", "keep.txt": b"k\n"}
    play = (Pause(tmp_path, "before_unlink"), saving("gone.txt", b"but I just saved this\n", save))
    with racing(tmp_path, paused, files, DELETE, play) as raced:
        operation = raced.operation
    assert operation["status"] == "needs_reconciliation"
    assert "kept" not in operation["report"]  # it went back under its own name
    assert (raced.repo / "gone.txt").read_bytes() == b"but I just saved this\n"
    assert (raced.repo / "keep.txt").read_bytes() == b"k\n"
    _no_temps(raced.repo)


def test_file_created_while_the_deleted_file_is_aside_stays(
    tmp_path: Path, paused: Callable[..., None]
) -> None:
    def create(repo: Path) -> None:
        (repo / "gone.txt").write_bytes(b"a new file under the old name\n")

    play = (Pause(tmp_path, "after_move_aside"), create)
    with racing(tmp_path, paused, {"gone.txt": b"delete me\n"}, DELETE, play) as raced:
        operation = raced.operation
    assert operation["status"] == "needs_reconciliation"
    assert (raced.repo / "gone.txt").read_bytes() == b"a new file under the old name\n"
    _no_temps(raced.repo)


def test_save_during_rollback_delete_is_kept(tmp_path: Path, paused: Callable[..., None]) -> None:
    made = ("made.txt", None, b"promoted\n")
    play = (Pause(tmp_path, "before_unlink"), saving("made.txt", b"the user kept working\n"))
    with racing(tmp_path, paused, {"a.txt": b"a\n"}, made, play, rollback=True) as raced:
        assert raced.answer is not None
        rolled = raced.answer.json()
    assert rolled["status"] == "rollback_failed"  # its only target is a conflict
    assert [t["result"] for t in rolled["targets"]] == ["conflict"]
    assert (raced.repo / "made.txt").read_bytes() == b"the user kept working\n"
    _no_temps(raced.repo)


@SAVES
def test_save_during_restore_delete_is_kept(
    tmp_path: Path, paused: Callable[..., None], save: Save
) -> None:
    repo = init_repo(tmp_path / "work", {"a.txt": b"a\n"})
    with running_daemon(tmp_path / "state", {"work": repo}) as daemon:
        with daemon.operator() as client:
            before = client.post(SNAPSHOTS, json={"label": "before"}).json()["tree"]
            (repo / "junk.txt").write_bytes(b"junk\n")
            after = client.post(SNAPSHOTS, json={"label": "after"}).json()["tree"]

        def restore(d: Daemon) -> httpx.Response:
            with d.operator() as other:
                body = {"expected_current_tree": after}
                return other.post(f"{SNAPSHOTS}/{before}/restore", json=body)

        play = (Pause(tmp_path, "before_unlink"), saving("junk.txt", b"not junk\n", save))
        paused(play[0])
        raced = Raced(repo, daemon)
        _race(raced, restore, [play])
        assert raced.answer is not None
        operation = raced.view(raced.answer.json()["operation_id"])
    # the save went back under its own name and nothing else changed: refused, honestly
    assert (operation["status"], operation["code"]) == ("refused", "target_drift")
    assert (repo / "junk.txt").read_bytes() == b"not junk\n"
    assert (repo / "a.txt").read_bytes() == b"a\n"
    _no_temps(repo)


def test_directory_removed_after_the_plan_is_journaled_when_made_again(
    tmp_path: Path, paused: Callable[..., None]
) -> None:
    """The plan found ``made/`` present; the user removes it before the writes. The write
    makes it again and journals it, so the rollback removes exactly what promoter made."""
    play = (Pause(tmp_path, "after_journal"), lambda repo: (repo / "made").rmdir())
    change = ("made/new.txt", None, b"new\n")
    repo = init_repo(tmp_path / "work", {"f.txt": b"x\n"})
    (repo / "made").mkdir()
    with running_daemon(tmp_path / "state", {"work": repo}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [change])
        paused(play[0])
        raced = Raced(repo, daemon)
        _race(raced, lambda d: promote(d, bundle, receipt), [play])
        assert raced.answer is not None
        op_id = raced.answer.json()["operation_id"]
        view = raced.view(op_id)
        assert (view["status"], view["created_directories"]) == ("completed", ["made"])
        assert (repo / "made" / "new.txt").read_bytes() == b"new\n"
        with daemon.operator() as client:
            rolled = client.post(f"/v1/operations/{op_id}/rollback")
        assert rolled.status_code == 200, rolled.text
        assert rolled.json()["status"] == "rolled_back", rolled.json()
    assert not (repo / "made").exists()
    assert sorted(tree_bytes(repo)) == ["f.txt"]
