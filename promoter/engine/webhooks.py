"""Signed webhook deliveries of the watch feed, from a bounded queue in the database.

Each subscriber (``Settings.webhooks``: the operator's config, never a bundle's) has a
place in the feed (``promoter.store.feed``); ``Dispatcher.enqueue`` turns the feed
entries after it into delivery rows, at most ``webhook_queue_max`` pending per
subscriber (the feed itself holds the rest, so nothing is dropped), in one transaction
with the place. ``Dispatcher.run`` delivers each subscriber's oldest pending delivery, in
feed order: a POST of the JSON body to the configured URL only, redirects not followed,
with ``Promoter-Delivery`` (the delivery id, the same on every retry: receivers
deduplicate by it), ``Promoter-Timestamp`` and ``Promoter-Signature: t=<ts>,v1=<hex>``
(HMAC-SHA256 with the subscriber's secret over ``<ts>.<body>``). A 2xx answer delivers
it; anything else is retried after a delay doubling from ``webhook_backoff_seconds``,
measured on ``clock`` (replaceable in tests), and a subscriber whose ``max_failures``
attempts in a row failed is paused (``webhook_gauges`` shows it in the metrics).
``verify`` is the receiver's check. Deliberately not here: the feed's order, resuming a
paused subscriber (an operator's change of config and restart does not yet unpause).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpx
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool

from promoter.config import WebhookConfig
from promoter.domain.canonical import canonical_bytes
from promoter.engine.services import Services
from promoter.errors import PromoterError
from promoter.store import webhook_queue
from promoter.store.wakeup import COMMITS

RECHECK_SECONDS = 1.0
LOG = logging.getLogger("promoter.webhooks")
SEND_TIMEOUT = 10.0


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, header: str, body: bytes, now: float, tolerance: float = 300) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` at a time within ``tolerance``."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    stamp, mac = parts.get("t", ""), parts.get("v1", "")
    if not stamp.isdigit() or abs(now - int(stamp)) > tolerance:
        return False
    return hmac.compare_digest(signature(secret, int(stamp), body), f"t={stamp},v1={mac}")


def delivery_id(subscriber: str, position: int) -> str:
    digest = hashlib.sha256(f"{subscriber}\0{position}".encode()).hexdigest()
    return "whd_" + digest[:32]


class Dispatcher:
    def __init__(self, services: Services, clock: Callable[[], float] = time.time) -> None:
        self.services = services
        self.clock = clock
        self.subscribers: dict[str, WebhookConfig] = dict(services.settings.webhooks)
        self._task: asyncio.Task[None] | None = None
        self.recorded = threading.Condition()  # notified after each attempt is recorded
        self.attempts = 0

    # --- the queue (worker threads) -----------------------------------------------------

    def enqueue(self) -> None:
        """Queue the feed entries after each subscriber's place, up to the bound."""
        limit = self.services.settings.webhook_queue_max
        with self.services.db.session() as session:
            for name, config in self.subscribers.items():
                webhook_queue.fill(
                    session,
                    name,
                    config.kinds,
                    limit,
                    functools.partial(self._delivery, name),
                    self.clock(),
                )

    def _delivery(self, name: str, position: int, entry: dict[str, Any]) -> tuple[str, str]:
        ident = delivery_id(name, position)
        body = {"delivery_id": ident, "subscriber": name, "entry": entry}
        return ident, canonical_bytes(body).decode()

    def heads(self) -> list[tuple[str, str, str, float]]:
        """(subscriber, delivery id, body, due time) of each live subscriber's oldest delivery."""
        with self.services.db.session() as session:
            found = [webhook_queue.head(session, name) for name in self.subscribers]
        return [(h.subscriber, h.delivery_id, h.body, h.due) for h in found if h is not None]

    def record(self, name: str, ident: str, error: str | None) -> None:
        """The outcome of one attempt: delivered, or retried later (or the subscriber paused)."""
        settings = self.services.settings

        def retry_at(attempts: int) -> float:
            delay = settings.webhook_backoff_seconds * 2 ** (attempts - 1)
            return float(self.clock() + min(delay, settings.webhook_backoff_max_seconds))

        with self.services.db.session() as session:
            webhook_queue.record(
                session,
                name,
                ident,
                error,
                retry_at=retry_at,
                max_failures=self.subscribers[name].max_failures,
            )
        with self.recorded:
            self.attempts += 1
            self.recorded.notify_all()

    def wait_recorded(self, attempts: int, timeout: float) -> bool:
        """Wait until ``attempts`` attempts of this dispatcher are recorded (for tests)."""
        with self.recorded:
            return self.recorded.wait_for(lambda: self.attempts >= attempts, timeout)

    # --- delivering (the event loop) ----------------------------------------------------

    async def send(self, client: httpx.AsyncClient, name: str, ident: str, body: str) -> str | None:
        """POST one delivery; ``None`` when delivered, else what went wrong."""
        config = self.subscribers[name]
        data = body.encode()
        stamp = int(self.clock())
        headers = {
            "Content-Type": "application/json",
            "Promoter-Delivery": ident,
            "Promoter-Timestamp": str(stamp),
            "Promoter-Signature": signature(config.secret, stamp, data),
        }
        try:
            answer = await client.post(config.url, content=data, headers=headers)
        except httpx.HTTPError as exc:
            return f"{exc.__class__.__name__}: {exc}"[:500]
        return None if answer.is_success else f"answered {answer.status_code}"

    async def run(self) -> None:
        async with httpx.AsyncClient(follow_redirects=False, timeout=SEND_TIMEOUT) as client:
            while not self.services.stopping.is_set():
                seen = COMMITS.generation
                try:
                    wake = await self._round(client)
                except PromoterError as exc:  # e.g. database_busy: the next round retries
                    LOG.warning("webhook round failed: %s: %s", exc.code, exc.detail)
                    wake = RECHECK_SECONDS
                if wake > 0:
                    await COMMITS.wait(seen, wake)

    async def _round(self, client: httpx.AsyncClient) -> float:
        """Queue and send what is due; how long until the next look (0: look again now)."""
        await run_in_threadpool(self.enqueue)
        wake = RECHECK_SECONDS
        for name, ident, body, due in await run_in_threadpool(self.heads):
            now = self.clock()
            if due > now:
                wake = min(wake, due - now)
                continue
            error = await self.send(client, name, ident, body)
            await run_in_threadpool(self.record, name, ident, error)
            wake = 0.0
        return wake

    def kick(self) -> None:
        """Look at the queue now (after a test moved ``clock``)."""
        COMMITS.notify()

    def start(self) -> None:
        self.enqueue()  # every subscriber has its place before the daemon serves
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class WebhookGauges(Collector):
    """Pending deliveries and paused subscribers, read from the database at each scrape."""

    def __init__(self, services: Services) -> None:
        self._services = services

    def collect(self) -> Iterable[Metric]:
        paused = GaugeMetricFamily(
            "promoter_webhook_paused",
            "1 for a subscriber paused after failing.",
            labels=["subscriber"],
        )
        pending = GaugeMetricFamily(
            "promoter_webhook_pending", "Deliveries waiting, by subscriber.", labels=["subscriber"]
        )
        with self._services.db.session() as session:
            for name, is_paused, waiting in webhook_queue.gauges(session):
                paused.add_metric([name], is_paused)
                pending.add_metric([name], waiting)
        yield paused
        yield pending

    def describe(self) -> Iterable[Metric]:
        return []
