"""``store.durable.write_new_together`` and ``AuditStore.put_all``: documents flushed together.

Where a group sync is offered, the temps of several documents are made durable by one
``syncfs`` before any is named, and their directories by one more after every link;
where it is not, each temp and each directory is fsynced as ``write_new`` does. A failed
first sync names nothing; a document that differs from the stored one is refused before
anything is written.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter import faults
from promoter.errors import BundleConflict, ReceiptConflict
from promoter.fs import flush
from promoter.fs.group_sync import GroupSync
from promoter.store import durable
from promoter.store.audit import AuditStore

UNREACHABLE = 1 << 62  # pending bytes: no machine is this busy


@pytest.fixture
def grouped(tmp_path: Path) -> Iterator[None]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        why = GroupSync.unsupported(fd)
    finally:
        os.close(fd)
    if why is not None:
        pytest.skip(why)
    faults.reset()
    yield
    faults.reset()


def _items(root: Path) -> list[tuple[Path, bytes, str]]:
    return [
        (root / "bundles" / "bnd_1.json", b'{"bundle":1}', "audit_bundle"),
        (root / "receipts" / "verification" / "bnd_1.json", b'{"receipt":1}', "audit_verification"),
    ]


def test_two_documents_cost_two_syncfs_where_a_group_sync_is_offered(
    tmp_path: Path, grouped: None
) -> None:
    items = _items(tmp_path)
    durable.write_new_together(items[:1], group_sync_limit=UNREACHABLE)  # the folders exist
    for path, _, _ in items[1:]:
        durable.make_dirs(path.parent)
    items = [(p.with_name("bnd_2.json"), data, fault) for p, data, fault in items]
    before = flush.flushes()
    created = durable.write_new_together(items, group_sync_limit=UNREACHABLE)
    assert flush.flushes() - before == {"syncfs": 2}
    assert created == [True, True]
    assert [p.read_bytes() for p, _, _ in items] == [data for _, data, _ in items]
    assert [oct(p.stat().st_mode & 0o777) for p, _, _ in items] == ["0o444", "0o444"]


def test_without_a_group_sync_each_temp_and_directory_is_fsynced(tmp_path: Path) -> None:
    items = _items(tmp_path)
    for path, _, _ in items:
        durable.make_dirs(path.parent)
    before = flush.flushes()
    created = durable.write_new_together(items, group_sync_limit=None)
    assert flush.flushes() - before == {"fsync": 4}
    assert created == [True, True]
    again = durable.write_new_together(items, group_sync_limit=None)
    assert again == [False, False]  # never over a file
    assert [p.read_bytes() for p, _, _ in items] == [data for _, data, _ in items]


def test_a_failed_sync_of_the_temps_names_no_document(
    tmp_path: Path, grouped: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = _items(tmp_path)
    for path, _, _ in items:
        durable.make_dirs(path.parent)
    monkeypatch.setenv(faults.ENV, "after_state_group_sync=EIO@1")
    faults.reset()
    with pytest.raises(OSError) as failed:
        durable.write_new_together(items, group_sync_limit=UNREACHABLE)
    assert failed.value.errno == errno.EIO
    assert [os.listdir(p.parent) for p, _, _ in items] == [[], []]


def test_a_bundle_that_differs_from_the_stored_one_writes_no_receipt(tmp_path: Path) -> None:
    audit = AuditStore(tmp_path / "audit", group_sync_limit=UNREACHABLE)
    assert audit.put("bundle", "bnd_1", b'{"stored":1}')
    with pytest.raises(BundleConflict):
        audit.put_all(
            [
                ("bundle", "bnd_1", b'{"other":1}', BundleConflict),
                ("verification", "bnd_1", b'{"receipt":1}', ReceiptConflict),
            ]
        )
    assert audit.get("verification", "bnd_1") is None
    assert audit.get("bundle", "bnd_1") == b'{"stored":1}'
    same = audit.put_all(
        [
            ("bundle", "bnd_1", b'{"stored":1}', BundleConflict),
            ("verification", "bnd_1", b'{"receipt":1}', ReceiptConflict),
        ]
    )
    assert same == [False, True]
    assert audit.get("verification", "bnd_1") == b'{"receipt":1}'
