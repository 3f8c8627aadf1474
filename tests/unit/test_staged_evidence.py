"""The pieces the one request's evidence is staged with (``promoter.store.evidence``).

``durable.StagedNew`` writes a document's temp and names it only at ``link``, never over
a file; ``StagedBlobs`` answers a verification for blobs still in their temps beside the
stored ones, without naming any of them.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from promoter.store import durable
from promoter.store.blobs import BlobStore
from promoter.store.evidence import StagedBlobs


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_staged_document_is_named_only_by_its_link_and_never_over_a_file(
    tmp_path: Path,
) -> None:
    target = tmp_path / "bundles" / "bnd_1.json"
    staged = durable.StagedNew(target, b'{"bundle":1}', fault="audit_bundle", sync=False)
    assert not target.exists()
    assert staged.link() is True
    staged.sync_dir()
    staged.close()
    staged.close()  # idempotent
    assert target.read_bytes() == b'{"bundle":1}'
    assert stat.S_IMODE(target.stat().st_mode) == 0o444
    other = durable.StagedNew(target, b'{"bundle":2}', fault="audit_bundle", sync=True)
    try:
        assert other.link() is False
    finally:
        other.close()
    assert target.read_bytes() == b'{"bundle":1}'
    assert sorted(os.listdir(target.parent)) == ["bnd_1.json"]  # no temp left beside it


def test_a_verification_reads_staged_blobs_beside_stored_ones_and_names_none(
    tmp_path: Path,
) -> None:
    store = BlobStore(tmp_path / "audit")
    stored, staged, missing = b"stored\n", b"staged link target", b"never sent\n"
    store.put(_sha(stored), stored)
    writer = store.writer(_sha(staged), len(staged))
    writer.write(staged)
    writer.check()
    try:
        blobs = StagedBlobs(store, {_sha(staged): writer})
        digests = [_sha(missing), _sha(staged), _sha(stored)]
        assert blobs.measure_all(digests) == [None, len(staged), len(stored)]
        assert blobs.read(_sha(staged)) == staged
        assert blobs.read(_sha(stored)) == stored
        assert not store.has(_sha(staged))
    finally:
        writer.abort()
    assert not store.has(_sha(staged))
