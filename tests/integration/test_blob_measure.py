"""Verification's blob re-read: ``BlobStore.measure_all`` re-hashes each blob from disk.

A blob counts only when its bytes hash to its name: a missing blob, one whose bytes were
altered in the store, one truncated or grown, and every blob of a store whose fan-out
directory is gone all measure None. Blobs larger than the first read are read whole.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from promoter.store.blobs import CHUNK, FIRST_READ, BlobStore


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_each_blob_is_measured_by_its_bytes_on_disk(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "audit")
    small, empty = b"tiny\n", b""
    large = os.urandom(FIRST_READ + CHUNK + 17)  # a first read, a full chunk, a remainder
    altered, grown = b"will be altered\n", b"will grow\n"
    for data in (small, empty, large, altered, grown):
        assert store.put(sha(data), data, max_bytes=len(large))
    for data, replacement in ((altered, b"will be ALTERED\n"), (grown, grown + b"x")):
        path = store.path_for(sha(data))
        path.chmod(0o644)
        path.write_bytes(replacement)
    absent = sha(b"never stored")
    digests = [sha(small), sha(empty), sha(large), sha(altered), sha(grown), absent]
    assert store.measure_all(digests) == [len(small), 0, len(large), None, None, None]
    assert store.measure_all([]) == []


def test_a_store_without_its_fan_out_directory_measures_every_blob_missing(
    tmp_path: Path,
) -> None:
    store = BlobStore(tmp_path / "audit")
    assert store.measure_all([sha(b"a"), sha(b"b")]) == [None, None]
