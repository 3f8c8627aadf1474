"""Signed webhook deliveries of the watch feed, from a bounded queue in the database.

``Dispatcher.enqueue`` turns the feed entries after each subscriber's place
(``promoter.store.feed``) into delivery rows, at most ``webhook_queue_max`` pending, in one
transaction with the place; ``Dispatcher.run`` runs one worker per subscriber that
delivers, signs, bounds, retries and pauses as protocol: api#webhook-deliveries says, to
the address ``promoter.adapters.webhooks.targets`` permitted. ``Dispatcher`` is the
engine's ``WebhookDeliveries`` port; signatures and delivery ids are
``promoter.engine.webhooks``'.

Not here: the feed's order, the target policy, resuming a paused subscriber (a change of
config and a restart does not yet unpause).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpx
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool

from promoter.adapters.webhooks.targets import TargetPolicy
from promoter.config import Settings, WebhookConfig
from promoter.domain.canonical import canonical_bytes
from promoter.engine.webhooks import delivery_id, signature, standard_signature
from promoter.errors import PromoterError, WebhookTargetRefused
from promoter.store import webhook_queue
from promoter.store.db import Database
from promoter.store.wakeup import COMMITS

RECHECK_SECONDS = 1.0
LOG = logging.getLogger("promoter.webhooks")


class Dispatcher:
    """The deliveries of ``settings.webhooks``, queued in ``db``; the workers end once
    ``stopping`` is set (the daemon's SIGTERM)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        stopping: threading.Event,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.db = db
        self.stopping = stopping
        self.clock = clock
        self.subscribers: dict[str, WebhookConfig] = dict(settings.webhooks)
        self._task: asyncio.Task[None] | None = None
        self.recorded = threading.Condition()  # notified after each attempt is recorded
        self.attempts = 0
        self.queued = threading.Condition()  # notified after each enqueue has committed
        self.places: dict[str, int] = {}  # each subscriber's place as its last enqueue left it
        self.policy = TargetPolicy(settings.webhook_allowed_targets)

    # --- the queue (worker threads) -----------------------------------------------------

    def enqueue(self, names: Iterable[str] | None = None) -> None:
        """Queue the feed entries after each subscriber's place (or ``names``'), to the bound."""
        limit = self.settings.webhook_queue_max
        places: dict[str, int] = {}
        with self.db.session() as session:
            for name in self.subscribers if names is None else names:
                places[name] = webhook_queue.fill(
                    session,
                    name,
                    self.subscribers[name].kinds,
                    limit,
                    functools.partial(self._delivery, name),
                    self.clock(),
                )
        with self.queued:
            self.places.update(places)
            self.queued.notify_all()

    def _delivery(self, name: str, position: int, entry: dict[str, Any]) -> tuple[str, str]:
        ident = delivery_id(name, position)
        body = {"delivery_id": ident, "subscriber": name, "entry": entry}
        return ident, canonical_bytes(body).decode()

    def head(self, name: str) -> tuple[str, str, float] | None:
        """(delivery id, body, due time) of ``name``'s oldest delivery (None: none or paused)."""
        with self.db.session() as session:
            found = webhook_queue.head(session, name)
        return None if found is None else (found.delivery_id, found.body, found.due)

    def record(self, name: str, ident: str, error: str | None) -> None:
        """The outcome of one attempt: delivered, or retried later (or the subscriber paused)."""
        settings = self.settings

        def retry_at(attempts: int) -> float:
            delay = settings.webhook_backoff_seconds * 2 ** (attempts - 1)
            return float(self.clock() + min(delay, settings.webhook_backoff_max_seconds))

        with self.db.session() as session:
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

    def wait_queued(self, name: str, position: int, timeout: float) -> bool:
        """Wait until an enqueue of this dispatcher has taken ``name``'s place to feed
        ``position`` (every entry up to it queued or passed over; for tests)."""
        with self.queued:
            return self.queued.wait_for(lambda: self.places.get(name, -1) >= position, timeout)

    # --- delivering (the event loop) ----------------------------------------------------

    async def send(self, client: httpx.AsyncClient, name: str, ident: str, body: str) -> str | None:
        """POST one delivery within the deadline; ``None`` when delivered, else what failed."""
        settings = self.settings
        try:
            async with asyncio.timeout(settings.webhook_timeout_seconds):
                return await self._post(client, name, ident, body)
        except WebhookTargetRefused as exc:
            return f"{exc.code}: {exc.detail}"[:500]
        except TimeoutError:
            return f"deadline: no answer within {settings.webhook_timeout_seconds} s"
        except (httpx.HTTPError, OSError) as exc:  # OSError: the name did not resolve
            return f"{exc.__class__.__name__}: {exc}"[:500]

    async def _post(
        self, client: httpx.AsyncClient, name: str, ident: str, body: str
    ) -> str | None:
        config = self.subscribers[name]
        target = await self.policy.resolve(config.url)
        data = body.encode()
        stamp = int(self.clock())
        headers = {
            "Host": target.host,
            "Content-Type": "application/json",
            "webhook-id": ident,
            "webhook-timestamp": str(stamp),
            "webhook-signature": standard_signature(config.secret, ident, stamp, data),
            "Promoter-Delivery": ident,
            "Promoter-Timestamp": str(stamp),
            "Promoter-Signature": signature(config.secret, stamp, data),
        }
        extensions = {} if target.server_name is None else {"sni_hostname": target.server_name}
        cap = self.settings.webhook_max_response_bytes
        request = client.build_request(
            "POST", target.url, content=data, headers=headers, extensions=extensions
        )
        answer = await client.send(request, stream=True)
        try:
            read = 0
            if cap > 0:
                async for chunk in answer.aiter_raw():
                    read += len(chunk)
                    if read >= cap:
                        break  # the rest is never read: closing drops the connection
        finally:
            await answer.aclose()
        return None if answer.is_success else f"answered {answer.status_code}"

    async def run(self) -> None:
        """One worker per subscriber: a slow or dead receiver holds up only its own queue."""
        async with asyncio.TaskGroup() as group:
            for name in self.subscribers:
                group.create_task(self._worker(name), name=f"webhook {name}")

    async def _worker(self, name: str) -> None:
        async with httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: connect to the checked address
            # ``send``'s deadline bounds the whole delivery; this only backs it up
            timeout=2 * self.settings.webhook_timeout_seconds,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        ) as client:
            while not self.stopping.is_set():
                seen = COMMITS.generation
                try:
                    wake = await self._round(client, name)
                except PromoterError as exc:  # e.g. database_busy: the next round retries
                    LOG.warning("webhook round of %s failed: %s: %s", name, exc.code, exc.detail)
                    wake = RECHECK_SECONDS
                except Exception:  # a bug must not end this worker, nor any other's
                    LOG.exception("webhook round of %s failed", name)
                    wake = RECHECK_SECONDS
                if wake > 0:
                    await COMMITS.wait(seen, wake)

    async def _round(self, client: httpx.AsyncClient, name: str) -> float:
        """Queue and send what is due to ``name``; how long until the next look (0: now)."""
        await run_in_threadpool(self.enqueue, [name])
        head = await run_in_threadpool(self.head, name)
        if head is None:
            return RECHECK_SECONDS
        ident, body, due = head
        now = self.clock()
        if due > now:
            return min(RECHECK_SECONDS, due - now)
        error = await self.send(client, name, ident, body)
        await run_in_threadpool(self.record, name, ident, error)
        return 0.0

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

    def __init__(self, db: Database) -> None:
        self._db = db

    def collect(self) -> Iterable[Metric]:
        paused = GaugeMetricFamily(
            "promoter_webhook_paused",
            "1 for a subscriber paused after failing.",
            labels=["subscriber"],
        )
        pending = GaugeMetricFamily(
            "promoter_webhook_pending", "Deliveries waiting, by subscriber.", labels=["subscriber"]
        )
        with self._db.session() as session:
            for name, is_paused, waiting in webhook_queue.gauges(session):
                paused.add_metric([name], is_paused)
                pending.add_metric([name], waiting)
        yield paused
        yield pending

    def describe(self) -> Iterable[Metric]:
        return []
