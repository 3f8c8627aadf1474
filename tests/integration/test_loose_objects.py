"""``LooseObjects.chunks``: a blob read back from the store that wrote it, as git reads it."""

from __future__ import annotations

import os
import subprocess
import zlib
from pathlib import Path

import pytest

from promoter.executor.loose_objects import IN_MEMORY, LooseObjects
from tests.gitutil import git_env


def _store(tmp_path: Path) -> LooseObjects:
    objects = tmp_path / "objects"
    objects.mkdir()
    return LooseObjects(str(objects))


def _cat(objects: Path, oid: str) -> bytes:
    env = git_env() | {
        "GIT_DIR": str(objects.parent / "git"),
        "GIT_OBJECT_DIRECTORY": str(objects),
    }
    subprocess.run(
        ["git", "init", "-q", "--bare", str(objects.parent / "git")], env=git_env(), check=True
    )
    return subprocess.run(
        ["git", "cat-file", "blob", oid], env=env, check=True, capture_output=True
    ).stdout


def test_a_stored_blob_reads_back_with_the_bytes_git_reads(tmp_path: Path) -> None:
    store = _store(tmp_path)
    small = store.store_bytes(b"new content\n")
    big_file = tmp_path / "big"
    big_file.write_bytes(bytes(range(256)) * (IN_MEMORY // 256 + 4097))  # streamed in
    big = store.store_file(os.fsencode(big_file))
    empty = store.store_bytes(b"")
    for oid in (small, big, empty):
        found = store.chunks(oid)
        assert found is not None
        assert b"".join(found) == _cat(Path(store.objects), oid)
    assert b"".join(store.chunks(big) or []) == big_file.read_bytes()


def test_a_blob_the_store_did_not_write_is_not_read_from_its_directory(tmp_path: Path) -> None:
    store = _store(tmp_path)
    other = LooseObjects(store.objects)  # another writer of the same directory
    oid = other.store_bytes(b"written by another\n")
    assert store.chunks(oid) is None
    assert store.chunks("0" * 40) is None


@pytest.mark.parametrize("damage", ["truncated", "another_size", "trailing_bytes"])
def test_a_damaged_loose_object_is_refused_not_read_as_the_blob(
    tmp_path: Path, damage: str
) -> None:
    store = _store(tmp_path)
    oid = store.store_bytes(b"the person's new content\n")
    path = Path(store.objects, oid[:2], oid[2:])
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:-6])
    elif damage == "another_size":
        path.write_bytes(zlib.compress(b"blob 3\0abc", 0))
    else:
        path.write_bytes(data + b"more")
    with pytest.raises(ValueError, match="not the blob this store wrote"):
        b"".join(store.chunks(oid) or [])
