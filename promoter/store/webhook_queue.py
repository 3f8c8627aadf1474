"""The webhook delivery queue in the database: subscribers' places and pending deliveries.

Each subscriber has a place in the feed; ``fill`` queues the feed entries after it as
deliveries (at most ``limit`` pending, the feed holds the rest), ``head`` is the oldest
pending delivery of a live subscriber, ``record`` the outcome of one attempt (delivered,
or retried at a later due time, and the subscriber paused after ``max_failures`` in a
row), ``gauges`` what the metrics show. Functions take an open ``Session``.
Deliberately not here: sending, signing and the retry clock (``promoter.adapters.webhooks``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from promoter.domain.canonical import rfc3339, utcnow
from promoter.store import feed
from promoter.store.tables import FeedRow, WebhookDeliveryRow, WebhookSubscriberRow

PENDING, DELIVERED = "pending", "delivered"


@dataclass(frozen=True)
class Head:
    """A subscriber's oldest pending delivery."""

    subscriber: str
    delivery_id: str
    body: str
    due: float


def _now() -> str:
    return rfc3339(utcnow())


def _pending(session: Session, name: str) -> int:
    count = session.scalar(
        select(func.count())
        .select_from(WebhookDeliveryRow)
        .where(WebhookDeliveryRow.subscriber == name)
        .where(WebhookDeliveryRow.status == PENDING)
    )
    return int(count or 0)


def fill(
    session: Session,
    name: str,
    kinds: Collection[str] | None,
    limit: int,
    delivery: Callable[[int, dict[str, Any]], tuple[str, str]],
    due: float,
) -> int:
    """Queue the feed entries after ``name``'s place, up to ``limit`` pending; the place
    it leaves (the feed position of the last entry queued or passed over).

    A new subscriber starts at the end of the feed. ``delivery(position, entry)`` gives
    the delivery id and body of a feed entry (its wire form).
    """
    row = session.get(WebhookSubscriberRow, name, with_for_update=True)
    if row is None:
        end = session.scalar(select(func.max(FeedRow.position))) or 0
        session.add(
            WebhookSubscriberRow(name=name, position=end, failures=0, paused=0, updated_at=_now())
        )
        return end
    room = limit - _pending(session, name)
    if room <= 0:
        return row.position
    entries = feed.after(session, row.position, room)
    for entry in entries:
        if kinds is None or entry.kind in kinds:
            ident, body = delivery(entry.position, feed.as_wire(entry))
            session.add(
                WebhookDeliveryRow(
                    delivery_id=ident,
                    subscriber=name,
                    position=entry.position,
                    body=body,
                    status=PENDING,
                    attempts=0,
                    next_attempt_at=due,
                    created_at=_now(),
                )
            )
    if entries:
        row.position = entries[-1].position
        row.updated_at = _now()
    return row.position


def head(session: Session, name: str) -> Head | None:
    """The oldest pending delivery of ``name`` (None: none, or the subscriber is paused)."""
    row = session.get(WebhookSubscriberRow, name)
    if row is None or row.paused:
        return None
    first = session.scalars(
        select(WebhookDeliveryRow)
        .where(WebhookDeliveryRow.subscriber == name)
        .where(WebhookDeliveryRow.status == PENDING)
        .order_by(WebhookDeliveryRow.position)
        .limit(1)
    ).first()
    if first is None:
        return None
    return Head(name, first.delivery_id, first.body, first.next_attempt_at)


def record(
    session: Session,
    name: str,
    ident: str,
    error: str | None,
    *,
    retry_at: Callable[[int], float],
    max_failures: int,
) -> None:
    """One attempt's outcome; ``retry_at(attempts)`` is the next due time after a failure."""
    row = session.get(WebhookDeliveryRow, ident)
    subscriber = session.get(WebhookSubscriberRow, name)
    if row is None or subscriber is None:
        return
    row.attempts += 1
    row.last_error = error
    if error is None:
        row.status = DELIVERED
        subscriber.failures = 0
    else:
        row.next_attempt_at = retry_at(row.attempts)
        subscriber.failures += 1
        if subscriber.failures >= max_failures:
            subscriber.paused = 1
    subscriber.updated_at = _now()


def gauges(session: Session) -> list[tuple[str, int, int]]:
    """(subscriber, paused, pending) of every subscriber on record."""
    return [
        (row.name, row.paused, _pending(session, row.name))
        for row in session.scalars(select(WebhookSubscriberRow))
    ]
