"""The blob store's temp files: anonymous where the filesystem allows, named elsewhere.

Both kinds must give the same store: each blob linked into place complete, fsynced and
read-only, a wrong hash or an oversized stream storing nothing, and nothing left in the
store's ``tmp/`` once a writer is done. An anonymous temp (``O_TMPFILE``) has no name in
``tmp/`` even while it is written, so a crash cannot leave one behind.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from promoter.errors import BlobHashMismatch, PayloadTooLarge, StorageError
from promoter.store.blobs import BlobStore
from promoter.store.state_temps import PREFIX
from tests.support.fsutil import anonymous_temps_work


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def in_tmp(store: BlobStore) -> list[str]:
    return sorted(os.listdir(store.tmp_dir)) if store.tmp_dir.exists() else []


def refusing_o_tmpfile(monkeypatch: pytest.MonkeyPatch, code: int) -> list[int]:
    """``os.open`` failing every ``O_TMPFILE`` open with ``code`` (``EOPNOTSUPP``: as a
    filesystem without it does); the flags of the opens refused."""
    real_open = os.open
    refused: list[int] = []

    def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            refused.append(flags)
            raise OSError(code, os.strerror(code), path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    return refused


@pytest.fixture(params=[True, False], ids=["anonymous", "named"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    store = BlobStore(tmp_path / "audit")
    if request.param and not anonymous_temps_work(tmp_path):
        pytest.skip("no O_TMPFILE or /proc/self/fd here: every temp is named")
    store.anonymous_temps = request.param
    return store


def test_a_blob_is_stored_complete_read_only_and_nothing_stays_in_tmp(store: BlobStore) -> None:
    anonymous = store.anonymous_temps
    data = b"line\n" * 1000
    writer = store.writer(sha(data), len(data))
    writer.write(data[:100])
    writer.write(data[100:])
    # while it is written: an anonymous temp has no name; a named one is the only entry
    assert len(in_tmp(store)) == (0 if anonymous else 1)
    assert writer.commit() is True
    path = store.path_for(sha(data))
    assert path.read_bytes() == data
    assert path.stat().st_mode & 0o777 == 0o444
    assert path.stat().st_nlink == 1
    assert in_tmp(store) == []
    again = store.writer(sha(data), len(data))
    again.write(data)
    assert again.commit() is False  # present already: kept as it was
    assert path.read_bytes() == data
    assert in_tmp(store) == []


def test_a_batch_style_sync_then_link_stores_every_blob(store: BlobStore) -> None:
    blobs = [b"a\n", b"", b"c" * 70_000]
    writers = [store.writer(sha(b), max(len(b), 1)) for b in blobs]
    for writer, data in zip(writers, blobs, strict=True):
        writer.write(data)
        writer.start_writeback()
        writer.check()
    for writer in writers:
        writer.sync()
    assert [w.link() for w in writers] == [True, True, True]
    assert {p.name: p.read_bytes() for p in store.root.rglob("blobs/sha256/*/*")} == {
        sha(b): b for b in blobs
    }
    assert in_tmp(store) == []


def test_a_wrong_hash_or_too_many_bytes_stores_nothing_and_leaves_nothing(
    store: BlobStore,
) -> None:
    data = b"payload\n"
    wrong = store.writer("0" * 64, 100)
    wrong.write(data)
    with pytest.raises(BlobHashMismatch):
        wrong.commit()
    big = store.writer(sha(data), 4)
    with pytest.raises(PayloadTooLarge):
        big.write(data)
    dropped = store.writer(sha(data), 100)
    dropped.write(data)
    dropped.abort()
    assert not store.has(sha(data)) and not store.has("0" * 64)
    assert list(store.root.rglob("blobs/sha256/*/*")) == []
    assert in_tmp(store) == []


def test_a_filesystem_without_o_tmpfile_falls_back_to_named_temps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BlobStore(tmp_path / "audit")
    store.anonymous_temps = True
    refused = refusing_o_tmpfile(monkeypatch, errno.EOPNOTSUPP)
    first, second = b"one\n", b"two\n"
    writer = store.writer(sha(first), 10)
    writer.write(first)
    assert len(in_tmp(store)) == 1 and in_tmp(store)[0].startswith(PREFIX)
    assert writer.commit() is True
    assert store.anonymous_temps is False  # asked once, then named straight away
    store.put(sha(second), second)
    assert len(refused) == 1
    assert store.read(sha(first)) == first and store.read(sha(second)) == second
    assert in_tmp(store) == []


def test_an_o_tmpfile_failure_that_is_not_a_missing_feature_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BlobStore(tmp_path / "audit")
    store.anonymous_temps = True
    store.tmp_dir.mkdir(parents=True)
    refusing_o_tmpfile(monkeypatch, errno.ENOSPC)
    with pytest.raises(StorageError, match="No space left"):
        store.writer(sha(b"x"), 1)
    assert store.anonymous_temps is True  # a full disk is not a filesystem without it
    assert in_tmp(store) == []
