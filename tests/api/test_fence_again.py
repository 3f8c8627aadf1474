"""A fence of a host that is fenced already, through a real daemon and the CLI.

A fence asked again (a `promoter hosts fence` whose answer timed out, run once more) once
raised the epoch a second time, journaled a second fence with no operations and moved
``fenced_to`` to whatever host it named, though the operations stayed with the first.
Now the same handover asked again answers the fence on record (``already: true``, exit 0,
nothing changed), and a handover to another host is ``handover_refused`` naming the host
that has them. Neither un-fences the host nor loses the first fence's record.

The dead hosts are rows of the ledger whose host lease ran out long ago (no daemon of
theirs is needed: a fence reads the ledger); this daemon's own host takes over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from promoter.store import hosts, journal
from tests.support.daemon import Daemon

LONG_AGO = "2000-01-01T00:00:00Z"


def _register_dead(daemon: Daemon, *names: str) -> None:
    for name in names:
        with journal.unit_of_work(daemon.services.db) as session:
            hosts.register(session, name, {}, LONG_AGO)


def _cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env.update(PROMOTER_URL=daemon.url, PROMOTER_TOKEN=daemon.operator_token, COLUMNS="300")
    argv = [sys.executable, "-m", "promoter.cli.main", "hosts", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


def _row(daemon: Daemon, host: str) -> dict[str, Any]:
    with daemon.operator() as client:
        listed = {h["host_id"]: h for h in client.get("/v1/hosts").json()["hosts"]}
    return listed[host]


def test_the_same_fence_asked_again_changes_nothing_and_says_so(daemon: Daemon) -> None:
    here = daemon.services.owner.host
    _register_dead(daemon, "host-dead")
    first = _cli(daemon, "fence", "host-dead", "--to", here, "--json")
    assert first.returncode == 0, first.stderr
    fenced = json.loads(first.stdout)
    assert (fenced["epoch"], fenced["to"], fenced["already"]) == (2, here, False)
    before = _row(daemon, "host-dead")

    again = _cli(daemon, "fence", "host-dead", "--to", here)
    assert (again.returncode, again.stderr) == (0, ""), again.stderr
    assert again.stdout == (
        f"host host-dead was fenced already, at epoch 2 by operator at {fenced['fenced_at']}; "
        f"its 0 operations were handed to {here} then: nothing changed\n"
    )
    with daemon.operator() as client:
        answer = client.post("/v1/hosts/host-dead/fence", json={"to": here})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {**fenced, "already": True}
    after = _row(daemon, "host-dead")
    assert after == before  # the epoch, the status, who and when, one fence on record
    assert (after["status"], after["epoch"], after["fenced_to"]) == ("fenced", 2, here)
    assert [(f["epoch"], f["to"]) for f in after["fences"]] == [(2, here)]


def test_a_fence_again_to_another_host_is_refused_and_keeps_the_first(daemon: Daemon) -> None:
    here = daemon.services.owner.host
    _register_dead(daemon, "host-dead")
    first = _cli(daemon, "fence", "host-dead", "--to", here, "--json")
    assert first.returncode == 0, first.stderr
    with journal.unit_of_work(daemon.services.db) as session:  # another active host
        hosts.register(session, "host-other", {}, "2999-01-01T00:00:00Z")
    before = _row(daemon, "host-dead")

    other = _cli(daemon, "fence", "host-dead", "--to", "host-other")
    assert (other.returncode, other.stdout) == (75, "")
    assert other.stderr.startswith("error [handover_refused] host host-dead is fenced already")
    assert f"its operations were handed to {here}; nothing changed" in other.stderr
    with daemon.operator() as client:
        answer = client.post("/v1/hosts/host-dead/fence", json={"to": "host-other"})
    assert (answer.status_code, answer.json()["code"]) == (409, "handover_refused")
    assert (answer.json()["fenced_to"], answer.json()["epoch"]) == (here, 2)
    assert _row(daemon, "host-dead") == before  # never re-admitted, the first fence kept


def test_a_host_admitted_again_is_fenced_anew(daemon: Daemon) -> None:
    """Admitted, the host is active: a fence then is a new one (epoch 3, two on record)."""
    here = daemon.services.owner.host
    _register_dead(daemon, "host-dead")
    assert _cli(daemon, "fence", "host-dead", "--to", here).returncode == 0
    assert _cli(daemon, "admit", "host-dead").returncode == 0
    again = _cli(daemon, "fence", "host-dead", "--to", here, "--json")
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["epoch"], json.loads(again.stdout)["already"]) == (3, False)
    assert [f["epoch"] for f in _row(daemon, "host-dead")["fences"]] == [2, 3]
