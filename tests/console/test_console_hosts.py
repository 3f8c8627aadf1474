"""The console's hosts page: a fence form only for a host whose lease ran out.

The daemon's own host is live (its heartbeat renews its lease); a second host of the
ledger is registered with a lease that ran out long ago (a host that died). The page offers
the fence form for the dead one only; a post without the CSRF token, or fencing the live
host, changes nothing; fencing the dead one raises its epoch and records the session's
credential as who fenced. Admitting it again (operator only) keeps the raised epoch.
"""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from promoter.cli.main import app
from promoter.store import hosts
from tests.console.support import hidden, login
from tests.support.daemon import Daemon

Gated = tuple[Daemon, Path, str]
LONG_AGO = "2000-01-01T00:00:00Z"


def _ledger(daemon: Daemon) -> dict[str, dict[str, object]]:
    with daemon.operator() as op:
        return {h["host_id"]: h for h in op.get("/v1/hosts").json()["hosts"]}


def test_console_fences_only_a_dead_host_and_never_without_csrf(gated: Gated) -> None:
    daemon, _, identity = gated
    me = daemon.services.owner.host
    with daemon.services.db.session() as session:
        hosts.register(session, "host-dead", [identity], LONG_AGO)
    with login(daemon) as client:
        page = client.get("/ui/hosts")
        assert page.status_code == 200
        assert 'id="fence-host-dead"' in page.text
        assert f'id="fence-{me}"' not in page.text  # live: no form
        csrf = hidden(page.text)
        forged = client.post("/ui/hosts/host-dead/fence", data={"to": me})
        assert forged.status_code == 403
        live = client.post(f"/ui/hosts/{me}/fence", data={"csrf": csrf, "to": "host-dead"})
        assert live.status_code == 409 and "host_live" in live.text
    with daemon.operator() as op:
        refused = op.post(f"/v1/hosts/{me}/fence", json={"to": "host-dead"}).json()
    assert re.fullmatch(
        rf"host {me} still holds a live lease \(its host lease runs until "
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ; a running daemon renews it every third of "
        r"owner_lease_seconds\): fence it once it has run out, `promoter hosts list` shows it",
        refused["detail"],
    ), refused["detail"]
    with login(daemon) as client:
        csrf = hidden(client.get("/ui/hosts").text)
        assert {h: (r["status"], r["epoch"]) for h, r in _ledger(daemon).items()} == {
            me: ("active", 1),
            "host-dead": ("active", 1),
        }
        fenced = client.post("/ui/hosts/host-dead/fence", data={"csrf": csrf, "to": me})
        assert fenced.status_code == 303 and fenced.headers["location"] == "/ui/hosts"
        assert "fence-host-dead" not in client.get("/ui/hosts").text
    dead = _ledger(daemon)["host-dead"]
    assert (dead["status"], dead["epoch"], dead["fenced_to"]) == ("fenced", 2, me)
    assert dead["fenced_by"] == "operator"
    with daemon.orchestrator() as orch:
        refused = orch.post("/v1/hosts/host-dead/admit")
        assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    said = CliRunner().invoke(app, ["hosts", "admit", "host-dead"], env=env, terminal_width=300)
    assert said.exit_code == 0, said.output
    assert said.output == (
        "host host-dead is active at epoch 2: restart its daemon to write again "
        "(until then it serves reads and writes nothing)\n"
    )
    admitted = _ledger(daemon)["host-dead"]
    assert (admitted["status"], admitted["epoch"]) == ("active", 2)  # the raised epoch
    with daemon.operator() as op:
        unknown = op.post("/v1/hosts/host-nobody/admit")
        assert (unknown.status_code, unknown.json()["code"]) == (404, "host_unknown")
