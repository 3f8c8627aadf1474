"""Write-once canonical documents under ``<state>/audit/``.

Grants, bundles and receipts are stored as their exact canonical bytes, once. Writing
the same bytes again is a no-op; different bytes under the same name raise the conflict
class the caller names. Nothing here ever rewrites or deletes a document (the one
exception below is a copy, never a record). Each write goes
through ``promoter.store.durable.write_new`` (an anonymous temp linked into place, the
parents of new directories fsynced), whose fault points are named ``audit_<kind>_after_*``
(e.g. ``audit_promotion_after_link``).

A promotion receipt's file is different: its record is the operation's row in the
ledger (protocol: storage#receipt-in-outcome-commit), and the file is a copy (``copy``), written
without a flush after the outcome's commit and compared byte for byte with the row's bytes whenever
it is made or served; one missing is written again, one that differs is set aside under a hidden
name beside it (``.<name>.json.damaged-<16 hex>``, its bytes kept, never served) and
written again.

A stored document read back as its model (``load``, ``checked``) that no longer parses
(the state directory was damaged or edited by hand) raises ``StorageError`` naming the
file: never an unexpected error, and never a document trusted unchecked.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from promoter.errors import DocumentConflict, PromoterError, StorageError
from promoter.store.durable import set_aside, write_copy, write_new, write_new_together

M = TypeVar("M", bound=BaseModel)
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")

KINDS = {
    "grant": "grants",
    "bundle": "bundles",
    "verification": "receipts/verification",
    "promotion": "receipts/promotion",
    "rollback": "receipts/rollback",
}


class AuditStore:
    def __init__(self, audit_root: Path, group_sync_limit: int | None = None) -> None:
        self.root = audit_root
        self.group_sync_limit = group_sync_limit  # ``put_all``'s, see ``write_new_together``

    @staticmethod
    def valid_name(name: str) -> bool:
        return bool(_NAME.fullmatch(name)) and not name.startswith(".")

    def path(self, kind: str, name: str) -> Path:
        if not self.valid_name(name):
            raise ValueError(f"invalid document name {name!r}")
        return self.root / KINDS[kind] / f"{name}.json"

    def put(
        self, kind: str, name: str, data: bytes, conflict: type[PromoterError] = DocumentConflict
    ) -> bool:
        """Store ``data``; True if new, False if identical bytes were already there."""
        target = self.path(kind, name)
        try:
            created = write_new(target, data, fault=f"audit_{kind}")
            existing = None if created else target.read_bytes()
        except OSError as exc:
            raise StorageError(f"cannot write {kind} {name}: {exc}") from exc
        if existing is not None and existing != data:
            raise conflict(f"a different {kind} is already stored as {name}", name=name)
        return created

    def copy(self, kind: str, name: str, data: bytes) -> Path | None:
        """Make the file ``kind`` ``name`` hold exactly ``data``, the bytes of a record kept
        elsewhere (a promotion receipt's row), with no flush; the path a damaged file was
        set aside at, or None. Fault points ``audit_<kind>_after_*``, as ``write_new``'s
        without the fsyncs'. ``StorageError`` when the file cannot be read or written."""
        target = self.path(kind, name)
        aside: Path | None = None
        try:
            for _ in range(3):  # a concurrent copy may take the name between the steps
                found = self._read(target)
                if found == data:
                    return aside
                if found is not None:
                    aside = set_aside(target, data) or aside
                if write_copy(target, data, fault=f"audit_{kind}"):
                    return aside
        except OSError as exc:
            raise StorageError(f"cannot write the copy of {kind} {name}: {exc}") from exc
        raise StorageError(f"the copy of {kind} {name} kept changing while it was written")

    @staticmethod
    def _read(target: Path) -> bytes | None:
        """The bytes at ``target`` read without following a symlink; None when missing;
        anything but a regular file (a symlink, a directory) reads as damaged (b"")."""
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR):
                return b""
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return b""
            with os.fdopen(os.dup(fd), "rb") as handle:
                return handle.read()
        finally:
            os.close(fd)

    def put_all(
        self, documents: Sequence[tuple[str, str, bytes, type[PromoterError]]]
    ) -> list[bool]:
        """``put`` of several documents (``(kind, name, data, conflict)`` each), flushed
        together (``write_new_together``); True for each that is new. A document that
        differs from one already stored raises its conflict before anything is written
        (and, stored meanwhile by another writer, after)."""
        for kind, name, data, conflict in documents:
            stored = self.get(kind, name)
            if stored is not None and stored != data:
                raise conflict(f"a different {kind} is already stored as {name}", name=name)
        targets = [self.path(kind, name) for kind, name, _, _ in documents]
        items = [
            (target, data, f"audit_{kind}")
            for target, (kind, _, data, _) in zip(targets, documents, strict=True)
        ]
        try:
            created = write_new_together(items, group_sync_limit=self.group_sync_limit)
            existing = [
                None if new else target.read_bytes()
                for new, target in zip(created, targets, strict=True)
            ]
        except OSError as exc:
            names = ", ".join(f"{kind} {name}" for kind, name, _, _ in documents)
            raise StorageError(f"cannot write {names}: {exc}") from exc
        for (kind, name, data, conflict), found in zip(documents, existing, strict=True):
            if found is not None and found != data:
                raise conflict(f"a different {kind} is already stored as {name}", name=name)
        return created

    def get(self, kind: str, name: str) -> bytes | None:
        """The stored bytes, or None (also for a name nothing could be stored under)."""
        if not self.valid_name(name):
            return None
        try:
            return self.path(kind, name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {kind} {name}: {exc}") from exc

    def load(self, kind: str, name: str, model: type[M]) -> M | None:
        """The stored document parsed as ``model``, or None when nothing is stored."""
        raw = self.get(kind, name)
        return None if raw is None else self.parsed(kind, name, raw, model)

    def checked(self, kind: str, name: str, model: type[M]) -> bytes | None:
        """The stored bytes, exactly as written, once they parse as ``model``; or None."""
        raw = self.get(kind, name)
        if raw is not None:
            self.parsed(kind, name, raw, model)
        return raw

    def parsed(self, kind: str, name: str, raw: bytes, model: type[M]) -> M:
        """``raw``, the bytes stored as ``kind`` ``name``, parsed as ``model``."""
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            where = self.path(kind, name)
            raise StorageError(
                f"the stored {kind} {name} is damaged: {where} no longer parses as a "
                f"{model.__name__}; nothing was changed",
                path=str(where),
            ) from exc
