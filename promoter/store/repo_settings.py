"""The ledger's record of repository settings changed at run time (``repos set``).

``newest`` reads the setting in force (the newest row of a repository and setting) as a
``SettingChange`` in the caller's session, ``newest_now`` the same without one (a pooled
connection, as a request reads it); ``add`` appends a change in the caller's session.
Rows never leave this module.

Deliberately not here: what a setting means (``promoter.engine.repo_settings``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import String, Table, bindparam, select
from sqlalchemy.orm import Session

from promoter.store.db import Database
from promoter.store.tables import RepositorySettingRow

__all__ = ["SettingChange", "add", "newest", "newest_now"]


@dataclass(frozen=True)
class SettingChange:
    repository_identity: str
    repository_name: str
    setting: str
    value: str
    previous: str
    by_role: str
    by_name: str
    host_id: str
    at: str


def _change(row: Any) -> SettingChange:
    return SettingChange(
        row.repository_identity,
        row.repository_name,
        row.setting,
        row.value,
        row.previous,
        row.by_role,
        row.by_name,
        row.host_id,
        row.at,
    )


# Core, built once: the newest change's columns (every promotion request reads them), on
# the table's own columns (the ORM has no part in running it)
_SETTINGS = cast(Table, RepositorySettingRow.__table__)
_NEWEST = (
    select(
        _SETTINGS.c.repository_identity,
        _SETTINGS.c.repository_name,
        _SETTINGS.c.setting,
        _SETTINGS.c.value,
        _SETTINGS.c.previous,
        _SETTINGS.c.by_role,
        _SETTINGS.c.by_name,
        _SETTINGS.c.host_id,
        _SETTINGS.c.at,
    )
    .where(_SETTINGS.c.repository_identity == bindparam("identity", type_=String()))
    .where(_SETTINGS.c.setting == bindparam("setting", type_=String()))
    .order_by(_SETTINGS.c.id.desc())
    .limit(1)
)


def newest(session: Session, identity: str, setting: str) -> SettingChange | None:
    """The change in force for ``identity``'s ``setting``, or None (the file's value)."""
    row = session.execute(_NEWEST, {"identity": identity, "setting": setting}).first()
    return None if row is None else _change(row)


def newest_now(db: Database, identity: str, setting: str) -> SettingChange | None:
    """``newest``, read on its own (``Database.first``: no session, nothing written)."""
    row = db.first(_NEWEST, {"identity": identity, "setting": setting})
    return None if row is None else _change(row)


def add(session: Session, change: SettingChange) -> None:
    """Append ``change`` in ``session`` (in force once it commits)."""
    session.add(
        RepositorySettingRow(
            repository_identity=change.repository_identity,
            repository_name=change.repository_name,
            setting=change.setting,
            value=change.value,
            previous=change.previous,
            by_role=change.by_role,
            by_name=change.by_name,
            host_id=change.host_id,
            at=change.at,
        )
    )
