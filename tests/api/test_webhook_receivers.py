"""Webhook receivers that attack the daemon, and targets the policy must refuse (TESTS S6).

Real receivers on loopback ports (``tests.support.webhook_receivers``), allowed by name in
the daemon's config (the policy refuses loopback otherwise). A receiver answering 1 GiB
is cut off after the response cap, with the daemon's peak RSS read from ``/proc``; a
dripping receiver never finishes, and the verdict is that another subscriber gets every
entry while it still hangs, or that the delivery's one deadline ends it; targets on
loopback, link-local, metadata and private addresses are refused with
``webhook_target_refused``, also when a name only resolves to one at delivery time; and
a receiver verifies a delivery with the off-the-shelf ``standardwebhooks`` library.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from standardwebhooks import Webhook

from promoter.adapters.webhooks.dispatcher import Dispatcher
from promoter.adapters.webhooks.targets import TargetPolicy
from promoter.config import WebhookConfig
from promoter.errors import WebhookTargetRefused
from promoter.store.tables import WebhookDeliveryRow
from tests.support.daemon import Daemon, running_daemon
from tests.support.process import DaemonProcess, prepare_promotion
from tests.support.promotion import promote, submit
from tests.support.webhook_receivers import BOUND, GIB, Drip, Hose, Recorder

SECRET = "whsec_" + "k" * 32
LOOPBACK = ["127.0.0.1"]
CHANGE = [("src/app.py", b"print('v1')\n", b"print('v2')\n")]
MIB = 1024 * 1024


def _feed(daemon: Daemon) -> list[dict[str, Any]]:
    with daemon.orchestrator() as orch:
        return list(orch.get("/v1/events").json()["events"])


def _errors(daemon: Daemon, subscriber: str) -> list[str | None]:
    with daemon.services.db.session() as session:
        rows = session.scalars(
            select(WebhookDeliveryRow)
            .where(WebhookDeliveryRow.subscriber == subscriber)
            .order_by(WebhookDeliveryRow.position)
        )
        return [row.last_error for row in rows]


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    running = Recorder()
    try:
        yield running
    finally:
        running.close()


def test_a_one_gib_answer_is_cut_off_and_the_daemons_memory_stays_bounded(
    tmp_path: Path, repo: Path
) -> None:
    hose = Hose()
    env = {
        "PROMOTER_WEBHOOKS": json.dumps({"orch": {"url": hose.url, "secret": SECRET}}),
        "PROMOTER_WEBHOOK_ALLOWED_TARGETS": json.dumps(LOOPBACK),
    }
    daemon = DaemonProcess(tmp_path / "state", {"work": repo}, extra_env=env)
    try:
        body = prepare_promotion(daemon, repo, CHANGE)
        before = _peak_rss(daemon.proc.pid)
        with daemon.client() as orch:
            assert orch.post("/v1/promotions", json=body).json()["status"] == "completed"
            entries = orch.get("/v1/events").json()["events"]
        hose.wait(lambda: len(hose.ends) >= len(entries))
        after = _peak_rss(daemon.proc.pid)
        # the receiver saw its connection end before the daemon recorded the delivery:
        # the gauge is read until it says so (each read a request; bounded)
        drained = 'promoter_webhook_pending{subscriber="orch"} 0.0'
        with daemon.client() as anyone:
            deadline = time.monotonic() + BOUND
            metrics = anyone.get("/metrics").text
            while drained not in metrics and time.monotonic() < deadline:
                time.sleep(0.02)
                metrics = anyone.get("/metrics").text
    finally:
        daemon.stop()
        hose.close()
    assert len(hose.requests) == len(entries)  # each answered 200 once: delivered
    for sent, closed in hose.ends:
        assert closed, "the daemon read the whole 1 GiB"
        assert sent < 64 * MIB < GIB
    assert after - before < 64 * MIB, (before, after)
    assert drained in metrics, metrics


def test_a_dripping_receiver_does_not_delay_another_subscriber(
    tmp_path: Path, repo: Path, identity: str, recorder: Recorder
) -> None:
    drip = Drip()
    hooks = {
        "slow": WebhookConfig(url=drip.url, secret=SECRET),
        "fast": WebhookConfig(url=recorder.url, secret=SECRET),
    }
    try:
        with running_daemon(
            tmp_path / "state",
            {"work": repo},
            webhooks=hooks,
            webhook_allowed_targets=LOOPBACK,
            webhook_timeout_seconds=600,  # the slow delivery outlives the test
        ) as daemon:
            _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
            assert promote(daemon, bundle, receipt).json()["status"] == "completed"
            entries = _feed(daemon)
            drip.wait(lambda: drip.hanging == 1)
            drip.drip(3)
            recorder.wait(lambda: len(recorder.requests) >= len(entries))
            # every entry reached the healthy receiver while the first slow one still hangs
            assert drip.hanging == 1 and drip.ended == []
            assert len(drip.requests) == 1
            assert [json.loads(r.body)["entry"] for r in recorder.requests] == entries
            assert json.loads(drip.requests[0].body)["entry"] == entries[0]
            with daemon.client() as anyone:  # the daemon itself is not held up either
                assert anyone.get("/healthz").status_code == 200
            assert drip.hanging == 1
    finally:
        drip.done.set()
        drip.close()


def test_a_dripping_receiver_is_cut_off_at_the_deliverys_one_deadline(
    tmp_path: Path, repo: Path, identity: str
) -> None:
    drip = Drip()
    hook = WebhookConfig(url=drip.url, secret=SECRET, max_failures=1)

    def keep_dripping() -> None:  # a byte far more often than the deadline: no read stalls
        while not drip.done.wait(0.02):
            drip.drip()

    dripper = threading.Thread(target=keep_dripping, daemon=True)
    dripper.start()
    try:
        with running_daemon(
            tmp_path / "state",
            {"work": repo},
            webhooks={"slow": hook},
            webhook_allowed_targets=LOOPBACK,
            webhook_timeout_seconds=0.5,
        ) as daemon:
            dispatcher: Dispatcher = daemon.services.webhooks
            _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
            assert promote(daemon, bundle, receipt).json()["status"] == "completed"
            assert dispatcher.wait_recorded(1, BOUND)
            drip.wait(lambda: drip.ended == ["closed by the sender"])
            first = _errors(daemon, "slow")[0]
            assert first is not None and first.startswith("deadline: no answer within 0.5 s")
            with daemon.client() as anyone:
                assert (
                    'promoter_webhook_paused{subscriber="slow"} 1.0' in anyone.get("/metrics").text
                )
    finally:
        drip.done.set()
        dripper.join(BOUND)
        drip.close()


REFUSED = [
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata (link-local)
    "http://127.0.0.1:5432/",  # the database on loopback
    "http://[::1]:22/",
    "http://localhost:8080/hook",
    "http://10.1.2.3/hook",  # RFC 1918
    "http://192.168.0.1/hook",
    "http://100.100.100.200/",  # shared address space (a metadata service lives here)
    "http://[fe80::1]/hook",
    "http://[fd00:ec2::254]/",  # unique local (a metadata service lives here)
    "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped loopback
    "http://0.0.0.0:8787/",
    "http://224.0.0.1/",
    "http://[2002:7f00:1::]:8787/",  # 6to4 of 127.0.0.1
    "http://[2002:a9fe:a9fe::]/latest",  # 6to4 of the metadata address
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
    "http://[64:ff9b::a9fe:a9fe]/latest",  # NAT64 of the metadata address
    "http://[64:ff9b:1::7f00:1]/",  # local-use NAT64 of loopback
    "http://192.0.0.8/",  # IANA special-purpose
]


@pytest.mark.parametrize("url", REFUSED)
def test_a_subscriber_on_a_refused_address_stops_the_start_with_its_code(
    tmp_path: Path, repo: Path, url: str
) -> None:
    hook = WebhookConfig(url=url, secret=SECRET)
    with (
        pytest.raises(WebhookTargetRefused) as refused,
        running_daemon(tmp_path / "state", {"work": repo}, webhooks={"hook": hook}),
    ):
        pass
    assert refused.value.code == "webhook_target_refused"
    assert refused.value.context["subscriber"] == "hook"


def test_serve_refuses_a_metadata_target_with_the_code_and_exit_status(
    tmp_path: Path, repo: Path
) -> None:
    config = tmp_path / "promoter.toml"
    config.write_text(
        '[webhooks.meta]\nurl = "http://169.254.169.254/latest"\n' f'secret = "{SECRET}"\n',
        encoding="utf-8",
    )
    argv = [sys.executable, "-m", "promoter.cli.main", "serve", "--state-dir"]
    argv += [str(tmp_path / "state"), "--port", "0", "--config", str(config)]
    argv += ["--repo", f"work={repo}"]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    assert done.returncode == 78, done.stderr
    assert b"[webhook_target_refused]" in done.stderr
    assert (
        b"subscriber meta: the webhook target 169.254.169.254 is a link-local address; nothing "
        b"is served. A receiver of your own there is allowed by listing it: "
        b'webhook_allowed_targets = ["169.254.169.254"]'
    ) in b" ".join(done.stderr.split())


def test_an_allowed_loopback_port_is_served_but_only_that_network(
    tmp_path: Path, repo: Path
) -> None:
    hooks = {
        "db": WebhookConfig(url="http://127.0.0.1:5432/", secret=SECRET),
        "ssh": WebhookConfig(url="http://[::1]:22/", secret=SECRET),
    }
    with (
        pytest.raises(WebhookTargetRefused) as refused,
        running_daemon(
            tmp_path / "state",
            {"work": repo},
            webhooks=hooks,
            webhook_allowed_targets=["127.0.0.0/8"],
        ),
    ):
        pass
    assert refused.value.context["subscriber"] == "ssh"


def _rebinding(addresses: list[str]) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        del port
        assert host == "hooks.example"
        return addresses

    return resolve


def test_a_name_that_resolves_to_loopback_at_delivery_is_refused(
    tmp_path: Path, repo: Path, identity: str, recorder: Recorder
) -> None:
    url = f"http://hooks.example:{recorder.port}/hook"
    hook = WebhookConfig(url=url, secret=SECRET, max_failures=1)
    with running_daemon(tmp_path / "state", {"work": repo}, webhooks={"hook": hook}) as daemon:
        dispatcher: Dispatcher = daemon.services.webhooks
        # the name answered a public address when it was configured; now it answers loopback
        dispatcher.policy = TargetPolicy([], _rebinding(["93.184.216.34", "127.0.0.1"]))
        _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        assert dispatcher.wait_recorded(1, BOUND)
        first = _errors(daemon, "hook")[0]
        assert first == (
            "webhook_target_refused: the webhook target hooks.example resolves to "
            "127.0.0.1, a loopback address"
        )
        with daemon.client() as anyone:
            assert 'promoter_webhook_paused{subscriber="hook"} 1.0' in anyone.get("/metrics").text
    assert recorder.requests == []


def test_this_machines_own_name_resolving_to_loopback_is_refused(
    tmp_path: Path, repo: Path, identity: str, recorder: Recorder
) -> None:
    name = socket.gethostname()
    try:
        found = {info[4][0] for info in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    except OSError:
        found = set()
    if not found or not all(a.startswith("127.") or a == "::1" for a in found):
        pytest.skip(f"{name} does not resolve to loopback here")
    hook = WebhookConfig(url=f"http://{name}:{recorder.port}/hook", secret=SECRET, max_failures=1)
    with running_daemon(tmp_path / "state", {"work": repo}, webhooks={"hook": hook}) as daemon:
        dispatcher: Dispatcher = daemon.services.webhooks
        _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        assert dispatcher.wait_recorded(1, BOUND)
        first = _errors(daemon, "hook")[0]
        assert first is not None and first.startswith("webhook_target_refused: ")
    assert recorder.requests == []


def test_a_delivery_goes_to_the_checked_address_with_the_names_host_and_verifies(
    tmp_path: Path, repo: Path, identity: str, recorder: Recorder
) -> None:
    hook = WebhookConfig(url=f"http://hooks.example:{recorder.port}/hook", secret=SECRET)
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        webhooks={"hook": hook},
        webhook_allowed_targets=["127.0.0.0/8"],
    ) as daemon:
        dispatcher: Dispatcher = daemon.services.webhooks
        dispatcher.policy = TargetPolicy(["127.0.0.0/8"], _rebinding(["127.0.0.1"]))
        _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        entries = _feed(daemon)
        recorder.wait(lambda: len(recorder.requests) >= len(entries))
    receiver = Webhook(SECRET.encode())  # the key is the secret's bytes
    for request, entry in zip(recorder.requests, entries, strict=True):
        assert request.head == "POST /hook HTTP/1.1"
        assert request.headers["host"] == f"hooks.example:{recorder.port}"
        delivered = receiver.verify(request.body, request.headers)
        assert delivered["entry"] == entry
        assert delivered["delivery_id"] == request.headers["webhook-id"]
        assert request.headers["promoter-delivery"] == request.headers["webhook-id"]
    tampered = dict(recorder.requests[0].headers, **{"webhook-id": "whd_other"})
    with pytest.raises(Exception, match="No matching signature"):
        receiver.verify(recorder.requests[0].body, tampered)
