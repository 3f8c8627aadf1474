"""Garbage collection of the blob store and the shadow snapshots (protocol: storage#pinned-blobs).

A blob is removed only when no stored bundle references it (every bundle is kept in the
audit store, so every old and new state a rollback may need stays) and it is older than
the retention period. Bundles, grants and receipts are never removed. Snapshot
repositories keep their newest snapshots and every tree an operation refers to.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from promoter.engine.ports import Capturing
from promoter.engine.snapshots.capture import gc_snapshots
from promoter.errors import PromoterError
from promoter.store import journal, repo
from promoter.store.db import Database


@dataclass(frozen=True)
class GcReport:
    blobs_examined: int
    blobs_removed: list[str]
    bytes_freed: int
    snapshots_pruned: list[str]  # the repositories whose snapshots were pruned, by name
    snapshots_failed: list[tuple[str, str]]  # (name, why) of those that could not be


def referenced_blobs(db: Database) -> set[str]:
    """Every blob some stored bundle refers to."""
    with journal.unit_of_work(db) as session:
        return repo.referenced_blobs(session)


def collect(services: Capturing, *, dry_run: bool = False, keep_snapshots: int = 100) -> GcReport:
    retention = services.settings.blob_retention_seconds
    pinned = referenced_blobs(services.db)
    cutoff = time.time() - retention
    removed: list[str] = []
    freed = 0
    root = services.blobs.root / "blobs" / "sha256"
    examined = 0
    for path in sorted(root.glob("*/*")) if root.is_dir() else []:
        examined += 1
        digest = path.name
        info = path.lstat()
        if digest in pinned or info.st_mtime > cutoff:
            continue
        removed.append(digest)
        freed += info.st_size
        if not dry_run:
            services.blobs.remove(digest)
    if removed and not dry_run:
        with journal.unit_of_work(services.db) as session:
            repo.forget_blobs(session, removed)
    pruned: list[str] = []
    failed: list[tuple[str, str]] = []
    if not dry_run:
        for repository in services.registry.all():
            try:
                gc_snapshots(services, repository, keep_snapshots)
            except PromoterError as exc:
                failed.append((repository.name, exc.detail))
                continue
            pruned.append(repository.name)
    return GcReport(examined, removed, freed, pruned, failed)
