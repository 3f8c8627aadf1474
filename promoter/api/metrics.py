"""The daemon's Prometheus metrics, one ``CollectorRegistry`` per app, or one set across
the workers of ``serve --workers N``.

``Metrics`` owns the registry and every metric the daemon exports: HTTP requests by
route template and status, promotion outcomes by code, promotion and verification
durations, files and bytes written, blob intake bytes, repository lock waits, the
connections closed on the client's side (``promoter.api.connections``), and the
host (``promoter_host_info``, set once services exist). Two
gauges (operations needing recovery or reconciliation) are read from the database at
scrape time by ``OperationGauges``, so they are right after a restart too; while the
database does not answer they keep the last values read. ``HostGauges`` reads this
daemon's memory of its host (``promoter.engine.host_state``) at scrape time, never the
database, so a scrape answers through an outage: ``promoter_database_up``,
``promoter_database_outage_seconds_total``, ``promoter_host_fenced`` and
``promoter_host_epoch``.

With several workers (``promoter.api.fleet``) each worker's counters and histograms live
in prometheus_client's multiprocess files in the daemon's shared directory
(``promoter.api.metrics_dir``; the library reads ``PROMETHEUS_MULTIPROC_DIR``, set by the
parent before the worker starts), and a scrape sums every worker's, ended ones too, with
``MultiProcessCollector``: whichever worker answers, the counts are the daemon's. The
scrape-time gauges are still collected by the worker that answers: the operation counts
from the database (the same from every worker), the host gauges from that worker's
memory of its host. ``promoter_host_info`` is a collector (``HostInfo``), not the
library's ``Info``, which multiprocess mode does not support. With one process (and in
tests) no file is written: the counters live in the app's registry.

It does not decide what to observe or when (``promoter.api.observe`` does) and never
touches the global ``prometheus_client.REGISTRY``: several apps in one process do not
share or collide on counters. The library's ``*_created`` samples are switched off (a
process-wide switch of the library; the daemon is the only user in its process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from promoter.engine.host_state import HostState

CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_LOCK_SECONDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0)
WAITING = ("needs_recovery", "needs_reconciliation")

CountStatuses = Callable[[], dict[str, int] | None]  # None: the database did not answer


class OperationGauges(Collector):
    """Operations waiting for a person, counted from the database at each scrape (the last
    counts read while it does not answer)."""

    def __init__(self, count: CountStatuses) -> None:
        self._count = count
        self._last: dict[str, int] = {}

    def collect(self) -> Iterable[Metric]:
        counts = self._count()
        if counts is None:
            counts = self._last
        else:
            self._last = counts
        family = GaugeMetricFamily(
            "promoter_operations_waiting",
            "Operations that wait for recovery or an operator's reconciliation, by status.",
            labels=["status"],
        )
        for status in WAITING:
            family.add_metric([status], counts.get(status, 0))
        yield family

    def describe(self) -> Iterable[Metric]:
        return []  # collected lazily: no database query at registration


class HostGauges(Collector):
    """This host and its database as the daemon last saw them, read from memory."""

    def __init__(self, host: Callable[[], HostState | None]) -> None:
        self._host = host

    def collect(self) -> Iterable[Metric]:
        state = self._host()
        if state is None:
            return
        up = GaugeMetricFamily(
            "promoter_database_up",
            "1 when the database answered this daemon's last query of it, else 0.",
        )
        up.add_metric([], 1 if state.database_up else 0)
        yield up
        outage = CounterMetricFamily(
            "promoter_database_outage_seconds",
            "Seconds the database was seen not answering, over the daemon's life.",
        )
        outage.add_metric([], state.outage_seconds())
        yield outage
        fenced = GaugeMetricFamily(
            "promoter_host_fenced",
            "1 once this daemon's host was fenced off by an operator (it writes nothing).",
        )
        fenced.add_metric([], 1 if state.fenced else 0)
        yield fenced
        epoch = GaugeMetricFamily(
            "promoter_host_epoch",
            "The epoch this daemon registered its host at (a fence raises the ledger's).",
        )
        epoch.add_metric([], state.epoch or 0)
        yield epoch

    def describe(self) -> Iterable[Metric]:
        return []


class HostInfo(Collector):
    """``promoter_host_info{host_id=…} 1`` once the host is named (none before)."""

    def __init__(self) -> None:
        self.host_id: str | None = None

    def collect(self) -> Iterable[Metric]:
        if self.host_id is None:
            return
        family = InfoMetricFamily("promoter_host", "The host this daemon serves as.")
        family.add_metric([], {"host_id": self.host_id})
        yield family

    def describe(self) -> Iterable[Metric]:
        return []


class Metrics:
    """Every metric of one app: in the app's own registry, or, with ``shared`` (the
    workers' directory, the process's ``PROMETHEUS_MULTIPROC_DIR``), in its files and
    scraped as the sum over every worker's."""

    def __init__(self, shared: Path | None = None) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created families
        self.registry = CollectorRegistry(auto_describe=False)
        # the counters' own registry; with ``shared`` none: the scrape reads the files
        r: CollectorRegistry | None = self.registry
        if shared is not None:
            MultiProcessCollector(self.registry, str(shared))  # type: ignore[no-untyped-call]
            r = None
        self.http_requests = Counter(
            "promoter_http_requests",
            "HTTP requests answered, by method, route template and status code.",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_duration = Histogram(
            "promoter_http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template.",
            ["method", "route"],
            buckets=_SECONDS,
            registry=r,
        )
        self.promotions = Counter(
            "promoter_promotions",
            "Promotion attempts that ended, by outcome (operation status) and code.",
            ["outcome", "code"],
            registry=r,
        )
        self.promotion_duration = Histogram(
            "promoter_promotion_duration_seconds",
            "Time from a promotion attempt's start to its end, by outcome.",
            ["outcome"],
            buckets=_SECONDS,
            registry=r,
        )
        self.verification_duration = Histogram(
            "promoter_verification_duration_seconds",
            "Time to verify and store a submitted bundle (POST /v1/bundles), by status code.",
            ["status"],
            buckets=_SECONDS,
            registry=r,
        )
        self.files_written = Counter(
            "promoter_files_written",
            "Worktree paths changed by completed promotions, by step operation.",
            ["operation"],
            registry=r,
        )
        self.bytes_written = Counter(
            "promoter_bytes_written",
            "Content bytes written into worktrees by completed promotions.",
            registry=r,
        )
        self.blob_bytes = Counter(
            "promoter_blob_intake_bytes",
            "Bytes of blob bodies received by PUT /v1/blobs and POST /v1/blobs:batchUpdate, "
            "by status code (a batch's blobs each under their own).",
            ["status"],
            registry=r,
        )
        self.connections_closed = Counter(
            "promoter_connections_closed",
            "Connections the daemon closed on the client's side, by reason: its request's "
            "head or body late, at the connection cap (make_room, at_accept), or its "
            "answer not taken (drain).",
            ["reason"],
            registry=r,
        )
        self.host = HostInfo()
        self.registry.register(self.host)
        self.lock_wait = Histogram(
            "promoter_lock_wait_seconds",
            "Time spent waiting for a repository lock before holding it.",
            ["repository"],
            buckets=_LOCK_SECONDS,
            registry=r,
        )

    def name_host(self, host_id: str) -> None:
        """Export ``promoter_host_info{host_id=…} 1``: the host these metrics are of."""
        self.host.host_id = host_id

    def watch_operations(self, count: CountStatuses) -> None:
        self.registry.register(OperationGauges(count))

    def watch_host(self, host: Callable[[], HostState | None]) -> None:
        self.registry.register(HostGauges(host))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
