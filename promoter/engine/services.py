"""The wired set of services one daemon (or one CLI command) works with.

``build_services(settings)`` creates the state directory layout, migrates the database,
creates the trusted tokens on first start and checks every configured repository. Nothing
here runs at import time; the API's lifespan and the CLI call it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from promoter.config import Settings
from promoter.engine.repos import Registry
from promoter.store import db as dbmod
from promoter.store.audit import AuditStore
from promoter.store.blobs import BlobStore
from promoter.store.credentials import Authenticator, Role, ensure_trusted_tokens
from promoter.store.durable import make_dirs


@dataclass
class Services:
    settings: Settings
    db: dbmod.Database
    blobs: BlobStore
    audit: AuditStore
    registry: Registry
    auth: Authenticator
    tokens: dict[Role, str]
    extras: dict[str, object] = field(default_factory=dict)
    # set on SIGTERM: running attempts stop after the current step and are left for recovery
    stopping: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        self.db.dispose()


def prepare_state_dir(state_dir: Path) -> None:
    make_dirs(state_dir, mode=0o700)
    for sub in ("audit", "audit/blobs", "audit/tmp", "snapshots", "credentials"):
        make_dirs(state_dir / sub, mode=0o700)
    if not os.access(state_dir, os.W_OK):
        raise PermissionError(f"state directory {state_dir} is not writable")


def build_services(settings: Settings, *, migrate: bool = True) -> Services:
    prepare_state_dir(settings.state_dir)
    if migrate:
        dbmod.upgrade(settings.db_url)
    database = dbmod.Database(settings.db_url, settings.database_busy_timeout)
    tokens = ensure_trusted_tokens(settings.credentials_dir)
    return Services(
        settings=settings,
        db=database,
        blobs=BlobStore(settings.audit_dir),
        audit=AuditStore(settings.audit_dir),
        registry=Registry.from_settings(settings),
        auth=Authenticator(database, tokens),
        tokens=tokens,
    )
