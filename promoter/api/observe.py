"""What the operator sees of each request and each promotion: log lines and metrics.

``install(app)`` gives the app its ``Metrics`` and wraps its lifespan. Per request the
daemon's one ASGI layer (``promoter.api.front``) takes or makes the request id
(``X-Request-ID``, echoed on the response) and ``Recorder`` counts the request by route
template and status, times bundle submissions, counts blob intake bytes, and writes one
``promoter.access`` line (before the answer's last byte is sent, so a client that has
the answer has the line) with the
route, the HTTP status and, from a small JSON answer, only the fields ``operation_id``,
``bundle_id``, ``repository``, ``status`` and ``code``. So a refusal answered with HTTP
200 still shows ``status=refused code=target_drift``.

At start-up the lifespan puts an ``ObservedRunner`` in place of the engine's default
runner: when an attempt ends it logs one ``promoter.outcome`` line (with the request id
that started it) and counts the outcome, its duration, files and bytes written. A
repository lock observer (``promoter.fs.lock.OBSERVERS``) feeds the lock-wait histogram.

``GET /healthz`` is answered by that layer itself (``Recorder.alive``), with the route's own bytes
(``health.ALIVE``): the same status, headers, request id, access line and metrics, but
none of the routing, dependency and response machinery behind it, whose CPU a client
polling liveness would otherwise take from the interpreter lock a worker thread needs.

It does not log headers, tokens, request bodies or blob content, and does not change
any answer except for adding the ``X-Request-ID`` header.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.types import Message, Scope, Send

from promoter.api.logs import REQUEST_ID, event
from promoter.api.metrics import WAITING, Metrics
from promoter.api.routes.health import ALIVE, HEALTHZ
from promoter.domain.canonical import rfc3339, utcnow
from promoter.domain.records import Ticket
from promoter.engine import queries
from promoter.engine.host_state import HostState
from promoter.engine.operation.runner import Runner
from promoter.engine.ports import Attempting, Repositories
from promoter.engine.services import Services
from promoter.errors import DatabaseBusy, DatabaseUnavailable
from promoter.fs import lock as fs_lock

access_log = logging.getLogger("promoter.access")
outcome_log = logging.getLogger("promoter.outcome")

_CAPTURE = 64 * 1024
_JSON_TYPES = (b"application/json", b"application/problem+json")
_ANSWER_FIELDS = ("operation_id", "bundle_id", "repository", "status", "code")
_PATH_FIELDS = ("operation_id", "bundle_id", "name")
_EVENT_LOGS = {
    "decision": logging.getLogger("promoter.decision"),
    "action": logging.getLogger("promoter.action"),
}
_EVENT_FIELDS = ("allowed", "code", "detail", "fence", "target_count", "check_changed")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
BUNDLES = "/v1/bundles"
BLOB_PUT = "/v1/blobs/sha256/{sha256}"
BLOB_BATCH = "/v1/blobs:batchUpdate"
_ALIVE_HEADERS = (
    (b"content-length", str(len(ALIVE)).encode()),
    (b"content-type", b"application/json"),
)


def _answer_fields(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(document, dict):
        return {}
    return {k: document[k] for k in _ANSWER_FIELDS if isinstance(document.get(k), str)}


class Recorder:
    """A request's metrics and its access line; the metric children of each route,
    method and status are looked up once and kept (their label values are bounded)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._http: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def _http_children(self, method: str, route: str, status: str) -> tuple[Any, Any]:
        key = (method, route, status)
        children = self._http.get(key)
        if children is None:
            m = self.metrics
            children = self._http[key] = (
                m.http_requests.labels(method, route, status),
                m.http_duration.labels(method, route),
            )
        return children

    def record(self, scope: Scope, seen: Seen, elapsed: float, route: str | None = None) -> None:
        route = route or str(getattr(scope.get("route"), "path", "unmatched"))
        method = scope.get("method", "")
        method = method if method in _METHODS else "other"  # bounded label values
        code = seen.status
        status = str(code)
        requests, duration = self._http_children(method, route, status)
        requests.inc()
        duration.observe(elapsed)
        m = self.metrics
        if method == "POST":
            if route == BUNDLES:
                m.verification_duration.labels(status).observe(elapsed)
            elif route == BLOB_BATCH:
                for blob_status, size in (scope.get("state") or {}).get("blob_intake", []):
                    m.blob_bytes.labels(str(blob_status)).inc(size)
        elif method == "PUT" and route == BLOB_PUT:
            m.blob_bytes.labels(status).inc(seen.received)
        level = logging.ERROR if code >= 500 else logging.INFO
        if not access_log.isEnabledFor(level):
            return
        params = scope.get("path_params") or {}
        fields = {k: params[k] for k in _PATH_FIELDS if isinstance(params.get(k), str)}
        if "name" in fields:
            fields["repository"] = fields.pop("name")
        if seen.capture and seen.body:
            fields.update(_answer_fields(seen.body))
        event(
            access_log,
            f"{method} {route} {status}",
            level,
            method=method,
            path=scope.get("path", ""),
            route=route,
            http_status=code,
            duration_ms=round(elapsed * 1000, 1),
            **fields,
        )

    async def alive(self, scope: Scope, send: Send, request_id: str, started: float) -> None:
        """The ``/healthz`` route's answer, sent from here (see the module docstring)."""
        headers = [*_ALIVE_HEADERS, (b"x-request-id", request_id.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        seen = Seen(status=200, capture=True, body=bytes(ALIVE))
        self.record(scope, seen, time.perf_counter() - started, HEALTHZ)
        await send({"type": "http.response.body", "body": ALIVE})


class Seen:
    """What a request's answer showed so far: its status, the body bytes received, and
    a small JSON answer's bytes (``capture``) for the access line's fields."""

    __slots__ = ("body", "capture", "received", "status")

    def __init__(self, status: int = 500, capture: bool = False, body: bytes = b"") -> None:
        self.status = status
        self.received = 0
        self.capture = capture
        self.body = body

    def started(self, message: Message) -> None:
        self.status = int(message["status"])
        for name, value in message.get("headers", ()):
            if name == b"content-type":
                self.capture = value.split(b";")[0].strip() in _JSON_TYPES
                break

    def sent(self, chunk: bytes) -> None:
        if self.capture and chunk:
            body = self.body + chunk
            if len(body) > _CAPTURE:
                self.capture, body = False, b""
            self.body = body


class ObservedRunner(Runner):
    """The engine's runner, plus one outcome line and the outcome metrics per attempt.

    ``submit`` and ``future`` hand out a future that completes only after the attempt's
    outcome is counted and logged, so whoever waits on an attempt sees its metrics.
    """

    def __init__(self, services: Attempting, metrics: Metrics) -> None:
        super().__init__(services)
        self._observed_services = services
        self._metrics = metrics
        self._observed: dict[str, Future[None]] = {}
        self._observed_lock = threading.Lock()

    def submit(self, ticket: Ticket) -> Future[None]:
        operation_id = ticket.operation_id
        request_id = REQUEST_ID.get()
        started = time.perf_counter()
        observed: Future[None] = Future()
        with self._observed_lock:
            self._observed[operation_id] = observed

        def ended(attempt: Future[None]) -> None:
            reset = REQUEST_ID.set(request_id)
            try:
                self._ended(seen, time.perf_counter() - started)
            except Exception:
                outcome_log.exception("cannot observe the end of %s", operation_id)
            finally:
                REQUEST_ID.reset(reset)
                _settle(observed, attempt)

        with queries.watch(operation_id) as seen:  # the attempt runs in a copy of this context
            attempt = super().submit(ticket)
        attempt.add_done_callback(ended)
        return observed

    def future(self, operation_id: str) -> Future[None] | None:
        with self._observed_lock:
            return self._observed.get(operation_id)

    def _ended(self, seen: queries.Witness, elapsed: float) -> None:
        operation_id = seen.operation_id
        found = queries.outcome(self._observed_services.db, seen)
        if found is None:
            return
        row, files, written = found.operation, found.files, found.written
        status, code, kind = row.status, row.code, row.kind
        bundle_id, repository, attempt = row.bundle_id, row.repository_name, row.attempt
        for told in found.events:
            if told.kind in _EVENT_LOGS:
                payload = told.payload if isinstance(told.payload, dict) else {}
                event(
                    _EVENT_LOGS[told.kind],
                    f"{kind} {told.kind}" + _allowed(payload),
                    operation_id=operation_id,
                    bundle_id=bundle_id,
                    repository=repository,
                    event=told.kind,
                    seq=told.seq,
                    **{k: payload[k] for k in _EVENT_FIELDS if _scalar(payload.get(k))},
                )
        m = self._metrics
        if kind == "promotion":
            m.promotions.labels(status, code or "").inc()
            m.promotion_duration.labels(status).observe(elapsed)
        for operation, count in files.items():
            m.files_written.labels(operation).inc(count)
        m.bytes_written.inc(written)
        event(
            outcome_log,
            f"{kind} {status}" + (f" [{code}]" if code else ""),
            logging.WARNING if status in WAITING else logging.INFO,
            operation_id=operation_id,
            kind=kind,
            bundle_id=bundle_id,
            repository=repository,
            status=status,
            code=code,
            attempt=attempt,
            files=sum(files.values()),
            bytes=written,
            duration_ms=round(elapsed * 1000, 1),
        )


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def _allowed(payload: dict[str, Any]) -> str:
    allowed = payload.get("allowed")
    return "" if not isinstance(allowed, bool) else (": allowed" if allowed else ": refused")


def _settle(observed: Future[None], attempt: Future[None]) -> None:
    if attempt.cancelled():
        observed.cancel()
    elif (error := attempt.exception()) is not None:
        observed.set_exception(error)
    else:
        observed.set_result(None)


def _services_of(app: FastAPI) -> Callable[[], Services | None]:
    ref = weakref.ref(app)

    def services() -> Services | None:
        live = ref()
        return getattr(live.state, "services", None) if live is not None else None

    return services


def _waiting_counter(app: FastAPI) -> Callable[[], dict[str, int] | None]:
    """The waiting operations, counted at scrape time; None when the database does not
    answer (noted in the host's state: the scrape is itself a probe of the database)."""
    services_of = _services_of(app)

    def count() -> dict[str, int] | None:
        services = services_of()
        if services is None:
            return {}
        try:
            counts = queries.count_by_status(services.db, WAITING)
        except (DatabaseUnavailable, DatabaseBusy) as exc:
            services.host.database_failed(f"{exc.code}: {exc.detail}")
            return None
        services.host.database_answered(rfc3339(utcnow()))
        return counts

    return count


def _host_of(app: FastAPI) -> Callable[[], HostState | None]:
    services_of = _services_of(app)

    def host() -> HostState | None:
        services = services_of()
        return None if services is None else services.host

    return host


def _lock_observer(services: Repositories, metrics: Metrics) -> fs_lock.LockObserver:
    names = {os.path.realpath(r.layout.common_dir): r.name for r in services.registry.all()}

    def observe(common_dir: str, waited: float) -> None:
        name = names.get(common_dir)
        if name is not None:
            metrics.lock_wait.labels(name).observe(waited)

    return observe


def install(app: FastAPI, shared: Path | None = None) -> Metrics:
    """Add the start-up wiring to ``app``; returns its ``Metrics`` (``Recorder`` counts
    into them, from ``promoter.api.front``); ``shared``: the workers' metrics directory."""
    metrics = Metrics(shared)
    metrics.watch_operations(_waiting_counter(app))  # first: the scrape's database probe
    metrics.watch_host(_host_of(app))  # read after it, from memory
    app.state.metrics = metrics
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(target: Any) -> AsyncIterator[Any]:
        async with inner(target) as state:
            services: Services = app.state.services
            metrics.name_host(services.owner.host)
            if services.runner is None:
                services.runner = ObservedRunner(services, metrics)
            observer = _lock_observer(services, metrics)
            fs_lock.OBSERVERS.append(observer)
            try:
                yield state
            finally:
                fs_lock.OBSERVERS.remove(observer)

    app.router.lifespan_context = lifespan
    return metrics
