"""A promotion and its rollback on PostgreSQL (protocol: storage#database: another SQLAlchemy URL
works).

Runs in the PostgreSQL pass of the suite (``PROMOTER_TEST_DATABASE=postgresql``), where
the test's own fresh database is in ``PROMOTER_DATABASE_URL``; it checks that this is
really PostgreSQL, so the pass cannot silently fall back to SQLite.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.daemon import running_daemon
from tests.support.flows import init_repo
from tests.support.promotion import promote, submit


@pytest.mark.postgresql_only
def test_promotion_and_rollback_on_postgresql(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "w", {"a.txt": b"1\n"})
    with running_daemon(tmp_path / "s", {"w": repo}) as daemon:
        assert daemon.services.db.engine.dialect.name == "postgresql"
        assert os.environ["PROMOTER_DATABASE_URL"].startswith("postgresql")
        assert not (tmp_path / "s" / "promoter.db").exists()
        identity = daemon.services.registry.by_name("w").identity
        _, bundle, receipt = submit(
            daemon, repo, identity, [("a.txt", b"1\n", b"2\n"), ("n/new.txt", None, b"x")]
        )
        view = promote(daemon, bundle, receipt).json()
        assert (view["status"], view["events_verified"]) == ("completed", True)
        assert (repo / "a.txt").read_bytes() == b"2\n"
        with daemon.operator() as operator:
            answer = operator.post(f"/v1/operations/{view['operation_id']}/rollback")
        assert answer.json()["status"] == "rolled_back"
        assert (repo / "a.txt").read_bytes() == b"1\n"
        assert not (repo / "n").exists()
