"""A migrated SQLite file, copied into place for each in-process daemon's default database.

Every daemon a test starts migrates ``<state dir>/promoter.db`` from nothing: all the
migrations, a tenth to half a second each time. ``install`` migrates one file per test
process and hooks SQLAlchemy's ``do_connect``: the first connection to a file named
``promoter.db`` that does not exist yet finds a copy of it there, so the daemon's own
``upgrade`` (which still runs, under its lock) finds nothing to do. The copy is linked
into place (``link`` fails if the name exists), so two connections racing to the same
new file never see two different files.

Only that name, only in this process and its forks: a test that migrates by hand names
its own file and gets the real migrations; a daemon forked by ``tests.support.forkserver``
finds the fork server's copy; a child started afresh (``PROMOTER_TEST_FORK=0``, or a
command run by ``subprocess``) migrates for itself;
under PostgreSQL the test's database comes from ``tests.support.databases`` instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.databases import connect_hook

NAME = "promoter.db"
_template: Path | None = None


def _before_connect(dialect: Any, _record: Any, args: Any, _params: Any) -> None:
    if _template is None or dialect.name != "sqlite" or not args:
        return
    target = str(args[0])
    if os.path.basename(target) != NAME or os.path.exists(target):
        return
    staged = f"{target}.template-{os.getpid()}-{id(_record)}"
    shutil.copyfile(_template, staged)
    try:
        os.link(staged, target)
    except FileExistsError:
        pass  # another connection put it there first: that one is the database
    finally:
        os.unlink(staged)  # our own copy, made just above


@contextmanager
def install() -> Iterator[Path]:
    """Migrate the template once for this process and hook new SQLite connections."""
    global _template
    from promoter.store.db import upgrade

    folder = Path(tempfile.mkdtemp(prefix="promoter-sqlite-template-"))
    template = folder / NAME
    upgrade(f"sqlite:///{template}")
    with connect_hook(_before_connect):
        _template = template
        try:
            yield template
        finally:
            _template = None
            shutil.rmtree(folder)  # made by mkdtemp above: ours alone
