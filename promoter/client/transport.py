"""One connection pool to one daemon with one bearer token, and the retrying send.

``Transport`` is the base of ``PromoterClient``: it opens the pool
(``promoter.client.direct``, HTTP/1.1 of its own to a loopback origin and httpx's client for
any other, when no transport is given and the environment names no proxies; otherwise an
httpx client, its settings and TLS context from ``pool_options``), sends a request with
the retries ``Backoff`` allows for idempotent calls with a replayable body
(``promoter.client.wire.retries``; tenacity loaded for a second try only), follows
a 421 to the owning host of the same cluster once (``promoter.client.follow``; the
cluster is the hosts list this daemon answers, or for a credential that may not read it,
an executor's, the list the client that made it read: ``cluster``) and says where it was
sent (``followed``), raises a problem answer as its promoter error, and reads a JSON
object answer. Deliberately not here: the endpoints (``promoter.client.sync`` and
``promoter.client.blobs``), the async client (``promoter.client.aio``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from promoter.client.direct import DirectClient
from promoter.client.follow import Origin, cluster_origins, location, owner, replayable, within
from promoter.client.http1 import MAX_BODY
from promoter.client.wire import (
    DEFAULT_BACKOFF,
    Backoff,
    Json,
    Retries,
    dropped,
    pool_options,
    raise_for,
    retries,
    transport_error,
    unreachable,
)
from promoter.domain.closing import Closing
from promoter.errors import PromoterError

if TYPE_CHECKING:
    import httpx

    from promoter.client.wire import Response


def proxied() -> bool:
    """Whether the environment names proxies, as ``urllib.request.getproxies`` (which
    httpx reads them with) answers; where that reads only the environment, a variable
    named ``*_proxy`` with a value is looked for first, so urllib.request is imported only
    when there is one."""
    if sys.platform not in ("darwin", "win32") and not any(
        value and name.lower().endswith("_proxy") for name, value in os.environ.items()
    ):
        return False
    from urllib.request import getproxies

    return bool(getproxies())


def _tried(plan: Retries, call: Callable[..., Response], *args: Any, **kwargs: Any) -> Response:
    """``call``'s outcome with the retries ``plan`` allows it. The first try is made here;
    only when its outcome is to be tried again is tenacity's controller made, its first
    attempt that outcome, so that the waits and the tries left are exactly the
    controller's."""
    first: Response | None = None
    failed: Exception | None = None
    try:
        first = call(*args, **kwargs)
    except Exception as exc:
        if plan.final(exc, None):
            raise
        failed = exc
    else:
        if plan.final(None, first):
            return first
    from tenacity import Retrying

    replayed = False
    sent: Exception | None = failed if failed is not None and dropped(failed) else None

    def again(*args: Any, **kwargs: Any) -> Response:
        nonlocal replayed, sent
        if replayed:
            try:
                return call(*args, **kwargs)
            except Exception as exc:
                sent = sent or (exc if dropped(exc) else None)
                raise
        replayed = True
        if failed is not None:
            raise failed
        assert first is not None
        return first

    try:
        answer: Response = Retrying(sleep=plan.backoff.sleep, **plan.settings())(
            again, *args, **kwargs
        )
    except Exception as exc:
        if sent is not None and exc is not sent and transport_error(exc):
            # a try the server dropped may have begun the work: that, not the later
            # refused connection, is what the caller must hear
            raise sent from exc
        raise
    return answer


class Transport(Closing):
    """One connection pool to one daemon, with one bearer token (or none)."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
        cluster: frozenset[Origin] | None = None,
        max_body: int = MAX_BODY,
    ) -> None:
        """``cluster``: the origins of the cluster's hosts as another client of the same
        caller read them, for a credential that may not read the hosts list itself;
        ``max_body``: the bytes of an answer's body the loopback pool reads at most
        (``promoter.client.http1.MAX_BODY``: a daemon's answers under its default
        limits)."""
        self.url = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._transport = transport
        self._backoff = backoff
        self._cluster = cluster
        self._max_body = max_body
        self.followed: str | None = None  # the host the last 421 followed sent a request to
        self._http: httpx.Client | DirectClient
        if transport is None and not proxied():
            bearer = {"Authorization": f"Bearer {token}"} if token else {}
            self._http = DirectClient(
                self.url, bearer, timeout, self._httpx_client, max_body=max_body
            )
        else:
            self._http = self._httpx_client()

    def _httpx_client(self) -> httpx.Client:
        """The httpx pool: for a transport given, proxies, and the origins other than a
        loopback daemon the direct pool sends a request to."""
        import httpx

        return httpx.Client(**pool_options(self.url, self._token, self._timeout, self._transport))

    @property
    def token(self) -> str | None:
        """The credential this client sends (for a second client of the same caller)."""
        return self._token

    def close(self) -> None:
        self._http.close()

    # --- transport ------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | Iterable[bytes] | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        ok_statuses: tuple[int, ...] = (),
        idempotent: bool | None = None,
        timeout: float | None = None,
    ) -> Response:
        limit = timeout or self._timeout
        plan = retries(self._backoff, method, content, idempotent, ok_statuses)
        # a call not tried again is never written on an idle loopback connection, which
        # the daemon's keep-alive may be closing as it arrives (``promoter.client.direct``)
        once = (
            {"reuse": False} if plan.attempts <= 1 and isinstance(self._http, DirectClient) else {}
        )

        def send(*args: Any, **kwargs: Any) -> Response:
            return _tried(plan, self._http.request, *args, **once, **kwargs)

        try:
            response: Response = send(
                method,
                path,
                json=json_body,
                content=content,
                params=params,
                headers=headers,
                timeout=limit,
            )
        except Exception as exc:
            if not transport_error(exc):
                raise
            raise unreachable(self.url, method, path, limit, exc) from exc
        target = location(response) if replayable(content) else None
        if target is not None and self._in_cluster(target):
            misdirected = response
            try:  # once: the owner's answer is the answer (protocol: hosts#answers-that-route)
                response = send(
                    method,
                    target,
                    json=json_body,
                    content=content,
                    headers=headers,
                    timeout=limit,
                )
            except Exception as exc:
                if not transport_error(exc):
                    raise
                where = owner(misdirected, target)
                raise unreachable(where, method, path, limit, exc, sent_by=self.url) from exc
            self.followed = owner(misdirected, target)
        if response.status_code not in ok_statuses:
            raise_for(response)
        return response

    def in_cluster(self, target: str) -> bool:
        """Whether ``target`` is another host of this daemon's cluster, one this client
        may send its credential to (the rule a 421 is followed by)."""
        return self._in_cluster(target)

    def _in_cluster(self, target: str) -> bool:
        """Whether ``target`` is another host the ledger lists (asked of this daemon; for
        a credential that may not ask, the list given at construction)."""
        try:
            answer = self._http.get("/v1/hosts", timeout=self._timeout)
        except Exception as exc:
            if not transport_error(exc):
                raise
            return False
        if answer.status_code == 200:
            self._cluster = cluster_origins(answer.json())
        elif answer.status_code != 403 or self._cluster is None:
            return False
        return within(target, self.url, self._cluster)

    def _json(self, method: str, path: str, **kwargs: Any) -> Json:
        response = self._send(method, path, **kwargs)
        try:
            body = response.json()
        except ValueError as exc:
            raise PromoterError(
                f"{method} {path} answered with a body that is not JSON",
                http_status=response.status_code,
            ) from exc
        if not isinstance(body, dict):
            raise PromoterError(
                f"{method} {path} answered with JSON that is not an object",
                http_status=response.status_code,
            )
        return body
