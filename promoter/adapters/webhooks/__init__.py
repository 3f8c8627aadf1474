"""Signed webhook deliveries of the watch feed, over HTTP: the dispatcher and its targets.

``dispatcher`` queues and sends (httpx on the event loop), ``targets`` decides where a
delivery may connect. ``daemon_services`` is the daemon's ``build_services`` with the
start-up check of the configured targets before it, and ``start`` makes, registers and
starts the dispatcher of the configured subscribers; the engine holds it only as its
``WebhookDeliveries`` port (``promoter.engine.services``). Deliberately not here: the
feed and the delivery queue's rows (``promoter.store.feed``, ``promoter.store.webhook_queue``).
"""

from __future__ import annotations

from prometheus_client.registry import CollectorRegistry

from promoter.adapters.webhooks.dispatcher import Dispatcher, WebhookGauges
from promoter.adapters.webhooks.targets import check_configured
from promoter.config import Settings
from promoter.engine.ports import Delivering
from promoter.engine.services import Services, build_services

__all__ = ["Dispatcher", "WebhookGauges", "check_configured", "daemon_services", "start"]


def daemon_services(settings: Settings, *, migrate: bool = True, claim: bool = False) -> Services:
    """``build_services``, after refusing a webhook target the policy refuses as written."""
    check_configured(settings)  # a refused webhook target stops the start, with its code
    return build_services(settings, migrate=migrate, claim=claim)


def start(services: Delivering, metrics: CollectorRegistry) -> Dispatcher | None:
    """The webhook dispatcher of the configured subscribers, started (none without any)."""
    if not services.settings.webhooks:
        return None
    dispatcher = Dispatcher(services.settings, services.db, services.stopping)
    services.webhooks = dispatcher
    metrics.register(WebhookGauges(services.db))
    dispatcher.start()
    return dispatcher
