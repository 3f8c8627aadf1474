"""The same engine on PostgreSQL (SPEC §4: another SQLAlchemy URL works unchanged).

Runs when ``PROMOTER_TEST_POSTGRES_URL`` names an empty database (for example
``postgresql+psycopg://promoter:pw@127.0.0.1/promoter`` with the ``psycopg`` driver
installed); skipped otherwise, since no database server is part of the test set-up.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.daemon import running_daemon
from tests.support.flows import init_repo
from tests.support.promotion import promote, submit

URL = os.environ.get("PROMOTER_TEST_POSTGRES_URL")


@pytest.mark.skipif(not URL, reason="PROMOTER_TEST_POSTGRES_URL is not set")
def test_promotion_and_rollback_on_postgresql(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "w", {"a.txt": b"1\n"})
    with running_daemon(tmp_path / "s", {"w": repo}, database_url=URL) as daemon:
        identity = daemon.services.registry.by_name("w").identity
        _, bundle, receipt = submit(
            daemon,
            repo,
            identity,
            [("a.txt", b"1\n", b"2\n"), ("n/new.txt", None, b"x")],
            grant_id=f"grt_pg_{os.getpid()}",
        )
        view = promote(daemon, bundle, receipt).json()
        assert (view["status"], view["events_verified"]) == ("completed", True)
        assert (repo / "a.txt").read_bytes() == b"2\n"
        with daemon.operator() as operator:
            answer = operator.post(f"/v1/operations/{view['operation_id']}/rollback")
        assert answer.json()["status"] == "rolled_back"
        assert (repo / "a.txt").read_bytes() == b"1\n"
        assert not (repo / "n").exists()
