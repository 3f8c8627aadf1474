"""Directories a batch of writes will create, journaled before any is made
(protocol: recovery#removal-provably-ours).

``journal_intent`` finds the directories missing on the way to the paths a batch will
create and records them as the operation's created directories before the first
``mkdir``, so a crash after a ``mkdir`` never leaves a directory the journal does not
know. A rollback later removes such a directory only if it is empty.

Deliberately not here: making directories (``promoter.fs.chain.Root.open_parent``) and
removing them (``Root.remove_dir_if_empty``).
"""

from __future__ import annotations

from promoter import faults
from promoter.domain.paths import wire_path
from promoter.fs.root import Root
from promoter.store import journal
from promoter.store.db import Database


def missing_dirs(root: Root, paths: list[str]) -> list[str]:
    """The directories on the way to ``paths`` that do not exist now, shallowest first."""
    missing: dict[str, None] = {}
    present: set[str] = set()
    for path in paths:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            directory = "/".join(parts[:depth])
            if directory in missing or directory in present:
                continue
            if root.read_state(directory).kind == "missing":
                missing.update({"/".join(parts[:d]): None for d in range(depth, len(parts) + 1)})
                break
            present.add(directory)
    return list(missing)


def journal_intent(db: Database, operation_id: str, root: Root, paths: list[str]) -> list[str]:
    """Journal the directories that writing ``paths`` will create (and return them);
    fault ``after_dir_intent``."""
    intended = missing_dirs(root, paths)
    if intended:
        with journal.attempt(db, operation_id) as j:
            j.add_created_dirs([wire_path(d) for d in intended])
    faults.point("after_dir_intent")
    return intended
