"""Admission of costly reads: bounded per role and per credential before they take a worker.

``Admission`` (asked by the daemon's one ASGI layer, ``promoter.api.front``, once the
``Host`` passed) authenticates the caller of a ``COSTLY`` read (or of a ``COSTLY_WITH``
route asked with its parameter, or a ``COSTLY_POSTS`` read asked by a POST) and asks ``Gate`` for a
place before the route runs, within ``admission_role_limits``,
``admission_credential_limits``, ``admission_wait_seconds`` and ``admission_queue``, else
``429`` (protocol: api#work-bounded-per-caller). What it found (the principal, or the
refusal) is kept in the scope (``PRINCIPAL_KEY``) so the route does not look the token up
again.

Not here: the bounds inside a read (``review_diff_concurrency``, the diff's byte limits),
bodies (``promoter.api.deps``), the operator's own threads (``promoter.api.workers``), and
any route's own answer.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from promoter.api.deps import PRINCIPAL_KEY, authenticate, token_of
from promoter.api.problems import problem_response
from promoter.config import (
    ADMISSION_CREDENTIAL_LIMITS,
    ADMISSION_ROLE_LIMITS,
    AdmissionRole,
    Settings,
)
from promoter.errors import PromoterError, TooManyRequests
from promoter.store.credentials import Principal

# the route templates of the costly reads; a path below the first two (a page of a
# diff, a trace's part) is one too
COSTLY_ROUTES = (
    "/v1/bundles/{bundle_id}/diff",
    "/v1/trace",
    "/v1/bundles/{bundle_id}",
    "/v1/bundles/{bundle_id}/verification",
    "/v1/bundles/{bundle_id}/verification.dsse",
    "/v1/blobs/sha256/{sha256}",
    "/v1/events",
    "/v1/repositories/{name}/snapshots",
    "/v1/repositories/{name}/snapshots/diff",
    "/v1/operations/{operation_id}/receipt",
    "/v1/operations/{operation_id}/receipt.dsse",
    "/v1/operations/{operation_id}/rollback-receipt.dsse",
    "/v1/grants/{grant_id}/base",
)
# the route templates that are costly reads only when asked with a query parameter (an
# operation with ``current``: every target read and hashed in the worktree)
COSTLY_WITH = {"/v1/operations/{operation_id}": "current"}
READS = frozenset({"GET", "HEAD"})
# the reads asked by a POST: a preflight re-reads every blob of its bundle and the worktree
COSTLY_POSTS = ("/v1/bundles/{bundle_id}/preflight",)
_FALSE = frozenset({"", "0", "off", "f", "false", "n", "no"})  # a query bool that is false


@dataclass(frozen=True)
class _Template:
    """A costly route's template (its label in logs and metrics) and its path pattern."""

    path: str
    pattern: re.Pattern[str]


def _compile(template: str, below: bool) -> _Template:
    pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template))
    return _Template(template, re.compile(pattern + ("(/.*)?" if below else "")))


COSTLY = tuple(_compile(t, below=n < 2) for n, t in enumerate(COSTLY_ROUTES))
COSTLY_IF = tuple((_compile(t, below=False), name) for t, name in COSTLY_WITH.items())
COSTLY_POST = tuple(_compile(t, below=False) for t in COSTLY_POSTS)


def _asked(query: bytes, name: str) -> bool:
    """Whether ``query`` sets the boolean parameter ``name`` true (any of its values)."""
    values = parse_qs(query.decode("latin-1"), keep_blank_values=True).get(name, [])
    return any(value.strip().lower() not in _FALSE for value in values)


def costly_route(
    method: str, path: str, query: bytes = b""
) -> tuple[_Template, dict[str, str]] | None:
    """The costly read's route and path parameters, or None for any other request."""
    if method == "POST":
        for route in COSTLY_POST:
            found = route.pattern.fullmatch(path)
            if found is not None:
                return route, {k: v for k, v in found.groupdict().items() if v is not None}
        return None
    if method not in READS:
        return None
    for route in COSTLY:
        found = route.pattern.fullmatch(path)
        if found is not None:
            return route, {k: v for k, v in found.groupdict().items() if v is not None}
    for route, name in COSTLY_IF:
        found = route.pattern.fullmatch(path)
        if found is not None and _asked(query, name):
            return route, {k: v for k, v in found.groupdict().items() if v is not None}
    return None


def is_costly(method: str, path: str, query: bytes = b"") -> bool:
    """Whether a request is a costly read that ``Gate`` admits."""
    return costly_route(method, path, query) is not None


def may_be_costly(method: str, path: str) -> bool:
    """Whether a request of this route can be a costly read (with some query)."""
    if is_costly(method, path):
        return True
    return method in READS and any(r.pattern.fullmatch(path) for r, _ in COSTLY_IF)


@dataclass
class _Counts:
    running: Counter[str] = field(default_factory=Counter)  # by role
    by_credential: Counter[tuple[str, str]] = field(default_factory=Counter)
    waiting: Counter[str] = field(default_factory=Counter)  # by role


class Gate:
    """The places of costly reads, per role and per credential; used on the event loop only.

    ``enter`` takes a place or raises ``TooManyRequests``; ``leave`` gives it back and
    wakes every waiter to look again (at most ``admission_queue`` per role).
    """

    def __init__(self, settings: Settings) -> None:
        self.role_limits = {**ADMISSION_ROLE_LIMITS, **settings.admission_role_limits}
        self.credential_limits = {
            **ADMISSION_CREDENTIAL_LIMITS,
            **settings.admission_credential_limits,
        }
        self.queue = settings.admission_queue
        self.wait = settings.admission_wait_seconds
        self.retry_after = settings.admission_retry_after_seconds
        self.counts = _Counts()
        self._waiters: list[asyncio.Future[None]] = []

    def _fits(self, role: AdmissionRole, key: tuple[str, str]) -> bool:
        return (
            self.counts.running[role] < self.role_limits[role]
            and self.counts.by_credential[key] < self.credential_limits[role]
        )

    def _refuse(self, role: str, why: str) -> TooManyRequests:
        return TooManyRequests(
            f"too many costly requests of the {role} role at once ({why}); "
            f"try again after {self.retry_after} s",
            retry_after=self.retry_after,
        )

    async def enter(self, principal: Principal) -> None:
        role, key = principal.role, (principal.role, principal.name)
        if not self._fits(role, key):
            await self._queue(role, key)
        self.counts.running[role] += 1
        self.counts.by_credential[key] += 1

    async def _queue(self, role: AdmissionRole, key: tuple[str, str]) -> None:
        if self.counts.waiting[role] >= self.queue:
            raise self._refuse(role, "the queue is full")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        self.counts.waiting[role] += 1
        try:
            while not self._fits(role, key):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise self._refuse(role, f"none ended within {self.wait} s")
                woken: asyncio.Future[None] = loop.create_future()
                self._waiters.append(woken)
                try:
                    await asyncio.wait({woken}, timeout=remaining)
                finally:
                    if woken in self._waiters:
                        self._waiters.remove(woken)
        finally:
            self.counts.waiting[role] -= 1

    def leave(self, principal: Principal) -> None:
        key = (principal.role, principal.name)
        self.counts.running[principal.role] -= 1
        self.counts.by_credential[key] -= 1
        if not self.counts.by_credential[key]:
            del self.counts.by_credential[key]
        waiters, self._waiters = self._waiters, []
        for woken in waiters:
            if not woken.done():
                woken.set_result(None)


class Admission:
    """Admit each costly read through ``gate`` before the app sees it (module docstring)."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def __call__(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Run ``app`` on an HTTP request: at once, or once a costly read is admitted."""
        found = costly_route(scope["method"], scope["path"], scope.get("query_string", b""))
        if found is None:
            await app(scope, receive, send)
            return
        app_state = scope["app"].state
        try:
            principal = await authenticate(app_state, app_state.services, token_of(scope))
        except PromoterError as refused:
            scope.setdefault("state", {})[PRINCIPAL_KEY] = refused  # the route answers it
            await app(scope, receive, send)
            return
        scope.setdefault("state", {})[PRINCIPAL_KEY] = principal
        try:
            await self.gate.enter(principal)
        except TooManyRequests as refused:
            scope["route"], scope["path_params"] = found  # counted and logged under its route
            response = problem_response(refused.to_problem(), Request(scope))
            await response(scope, receive, send)
            return
        try:
            await app(scope, receive, send)
        finally:
            self.gate.leave(principal)
