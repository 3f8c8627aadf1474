"""The many-hosts benchmark runs: hosts started together on an empty ledger all come up,
and daemons sharing one ledger each promote into their own worktree, exactly.

A smoke test of ``bench.many_hosts`` on a throwaway PostgreSQL cluster of its own
(``tests.support.own_postgres``): a small round of each part, checking what the bench
reports (no speed is asserted). Skipped when PostgreSQL is not installed here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.many_hosts import starts_round, throughput_round
from promoter.store.db import head_revision
from tests.support.own_postgres import binaries, own_postgres

BIN = binaries()


@pytest.mark.slow
@pytest.mark.postgresql_only
def test_hosts_started_together_on_an_empty_ledger_all_come_up_and_promote_exactly(
    tmp_path: Path,
) -> None:
    if BIN is None:
        pytest.skip("no PostgreSQL initdb installed here")
    with own_postgres(BIN) as cluster:
        starts = starts_round(cluster, tmp_path / "starts", 3, 0)
        assert (starts["up"], starts["failed"], starts["hosts_registered"]) == (3, [], 3)
        url = cluster.url.rsplit("/", 1)[0] + "/starts_3_0"
        assert starts["revision"] == head_revision(url)
        flows = throughput_round(cluster, tmp_path / "throughput", 2, 4, 0)
    assert flows["statuses"] == {"completed": 4}  # and every worktree holds its files exactly
