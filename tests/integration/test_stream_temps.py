"""Temp files streamed from the blob store with one hash pass (``Parent.write_temp`` with a
``BlobStream``): the bytes land whole, and bytes that changed in the store after intake
never get the temp's name and never reach the target (TESTS.md: fail closed).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from promoter import faults
from promoter.errors import BlobHashMismatch, BlobMissing
from promoter.fs import temps
from promoter.fs.leaf import TEMP_PREFIX
from promoter.fs.root import Root
from promoter.store.blobs import CHUNK, BlobStore
from tests.support.daemon import running_daemon
from tests.support.flows import init_repo
from tests.support.fsutil import MISSING, TMP, snapshot, state
from tests.support.pause import Pause, specs
from tests.support.promotion import promote, submit, tree_bytes


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "audit")


def alter(store: BlobStore, digest: str, data: bytes) -> None:
    """Play a process that rewrites a stored blob's file in place (same length)."""
    path = store.path_for(digest)
    path.chmod(0o644)
    with path.open("r+b") as handle:
        handle.write(data)


@pytest.fixture
def points(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every fault point the code under test passes, in order (the real points still fire)."""
    seen: list[str] = []
    real = faults.point

    def record(name: str) -> None:
        seen.append(name)
        real(name)

    monkeypatch.setattr(faults, "point", record)
    return seen


def test_streamed_temp_holds_every_byte_across_chunks(
    root: Root, work: Path, store: BlobStore
) -> None:
    data = os.urandom(2 * CHUNK + 12345)
    store.put(sha(data), data)
    (work / "d").mkdir()
    with root.open_parent("d/big.bin", create=False) as parent:
        temp = parent.write_temp(store.stream(sha(data)), "100755", temp=TMP)
        parent.replace(temp, expected_old=MISSING, new=state(data, "100755"))
        parent.fsync()
    assert (work / "d/big.bin").read_bytes() == data
    assert os.stat(work / "d/big.bin").st_mode & 0o100
    assert sorted(os.listdir(work / "d")) == ["big.bin"]


@pytest.mark.parametrize("anonymous", [True, False], ids=["o_tmpfile", "named_temp"])
def test_blob_altered_after_intake_never_gets_the_temp_name(
    root: Root,
    work: Path,
    store: BlobStore,
    points: list[str],
    monkeypatch: pytest.MonkeyPatch,
    anonymous: bool,
) -> None:
    if not anonymous:  # the filesystem without O_TMPFILE: the temp is named from the start
        monkeypatch.setattr(temps, "_proc_fd_links", lambda: False)
    data = b"promoter's verified bytes\n" * 1000
    store.put(sha(data), data)
    (work / "f.txt").write_bytes(b"user's\n")
    before = snapshot(work)
    alter(store, sha(data), b"X" * 64)
    with root.open_parent("f.txt", create=False) as parent:
        with pytest.raises(BlobHashMismatch) as info:
            parent.write_temp(store.stream(sha(data)), "100644", temp=TMP)
        assert not parent.written
    assert info.value.code == "blob_hash_mismatch"
    assert info.value.context["sha256"] == sha(data)
    assert "before_temp_named" not in points and "after_temp_write" not in points
    assert snapshot(work) == before  # no temp name, the target untouched


def test_blob_removed_after_it_was_opened_fails_before_any_name(
    root: Root, work: Path, store: BlobStore
) -> None:
    data = b"gone soon\n"
    store.put(sha(data), data)
    stream = store.stream(sha(data))
    store.remove(sha(data))
    with root.open_parent("f.txt", create=True) as parent, pytest.raises(BlobMissing):
        parent.write_temp(stream, "100644", temp=TMP)
    assert os.listdir(work) == []
    with pytest.raises(BlobMissing):
        store.stream(sha(data))


def test_streamed_link_target_is_checked_too(root: Root, work: Path, store: BlobStore) -> None:
    target = b"../elsewhere/file"
    store.put(sha(target), target)
    with root.open_parent("link", create=True) as parent:
        temp = parent.write_temp(store.stream(sha(target)), "120000", temp=TMP)
        assert os.readlink(work / temp) == target.decode()
        parent.drop_temp(temp, state(target, "120000"))
    alter(store, sha(target), b"/etc/passwd\x00\x00\x00\x00\x00\x00")
    with root.open_parent("link", create=True) as parent, pytest.raises(BlobHashMismatch):
        parent.write_temp(store.stream(sha(target)), "120000", temp=TMP)
    assert os.listdir(work) == []


# -- through the daemon: altered between the evidence re-check and the writes --------------


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Pause], None]]:
    def arm(pause: Pause) -> None:
        monkeypatch.setenv(faults.ENV, specs(pause))
        faults.reset()

    yield arm
    faults.reset()


def test_promotion_with_a_blob_altered_after_the_evidence_check_fails_closed(
    tmp_path: Path, paused: Callable[[Pause], None]
) -> None:
    files = {"a.txt": b"a old\n", "b.txt": b"b old\n"}
    repo = init_repo(tmp_path / "work", files)
    new_a, new_b = b"a new\n" * 100, b"b new\n" * 100
    with running_daemon(tmp_path / "state", {"work": repo}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        changes = [("a.txt", files["a.txt"], new_a), ("b.txt", files["b.txt"], new_b)]
        _, bundle, receipt = submit(daemon, repo, identity, changes)
        before = tree_bytes(repo)
        pause = Pause(tmp_path, "after_journal")  # evidence re-checked, nothing written yet
        paused(pause)
        answer: list[httpx.Response] = []
        thread = threading.Thread(target=lambda: answer.append(promote(daemon, bundle, receipt)))
        thread.start()
        try:
            pause.reached()
            alter(daemon.services.blobs, sha(new_b), b"B" * 32)
        finally:
            pause.release()
            thread.join(120)
        assert not thread.is_alive() and answer[0].status_code == 200, answer
        done: dict[str, Any] = answer[0].json()
    assert done["status"] == "refused", done
    assert done["code"] == "blob_hash_mismatch", done
    assert tree_bytes(repo) == before  # neither target touched, a.txt's staged temp removed
    assert not [p for p in repo.rglob(f"{TEMP_PREFIX}*") if ".git" not in p.parts]


def test_promotion_streams_every_regular_blob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No whole-blob read on the write path: ``BlobStore.read`` is not called for files."""
    files = {"src/a.txt": b"a\n", "src/b.txt": b"b\n"}
    repo = init_repo(tmp_path / "work", files)
    big = os.urandom(CHUNK + 7)
    whole_reads: list[str] = []
    real_read = BlobStore.read

    def counted(self: BlobStore, digest: str) -> bytes:
        whole_reads.append(digest)
        return real_read(self, digest)

    with running_daemon(tmp_path / "state", {"work": repo}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        changes = [
            ("src/a.txt", b"a\n", big),
            ("src/b.txt", b"b\n", b"b2\n"),
            ("src/c/n.txt", None, b"n\n"),
        ]
        _, bundle, receipt = submit(daemon, repo, identity, changes)
        monkeypatch.setattr(BlobStore, "read", counted)
        done = promote(daemon, bundle, receipt).json()
    assert done["status"] == "completed", done
    assert whole_reads == []
    assert (repo / "src/a.txt").read_bytes() == big
    assert (repo / "src/b.txt").read_bytes() == b"b2\n"
    assert (repo / "src/c/n.txt").read_bytes() == b"n\n"
