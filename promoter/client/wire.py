"""What both daemon clients share: retries, the problem translation, TLS, URL segments.

``Backoff`` says how idempotent calls are retried, ``retries`` what they are for one call
(whether a try's outcome is final is told without tenacity, so that a call answered at its
first try never loads it) and ``retry_policy`` gives the settings of the tenacity
controller (``Retrying``, ``AsyncRetrying``) that sends one call with those retries: a
connection error
(never a timeout), a 503 or a 429 (``too_many_requests``) answer is tried again, with
delays doubling from ``Backoff.first`` up to ``Backoff.cap`` (at least a 429's
``Retry-After``, within the cap), ``Backoff.attempts`` tries in all, and only for an
idempotent call whose body can be sent again (bytes or none: a streamed body is never
retried). After the last try the error is raised as it came and a 503 or 429 answer is
returned as it came (its problem raised by the caller). ``raise_for`` raises the promoter
error a problem+json answer stands for (``error_class(code)``, the problem's other
members as context); ``tls_context`` gives each client its TLS context without loading
the CA bundle more than once per process, and ``pool_options`` the rest of its pool's
settings (base URL, bearer token, timeout); ``segment`` makes a value one URL path
segment, never a way to another route. Deliberately not here: any call to the daemon
(``promoter.client.sync``, ``promoter.client.aio``).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import quote

from promoter.client.direct import REUSE_SECONDS, Answer
from promoter.errors import BadRequest, ConfigError, PromoterError, ServerUnavailable, error_class

if TYPE_CHECKING:
    import ssl

    import httpx
    from pydantic import BaseModel
    from tenacity import RetryCallState

    Response = httpx.Response | Answer  # httpx's, or the loopback pool's (``direct``)

MISSING_BATCH = 10_000  # digests per blobs:missing request (the server takes 100,000)
CHUNK = 1 << 20
_PROBLEM_MEMBERS = ("type", "title", "status", "detail", "code")
IDEMPOTENT_METHODS = ("GET", "HEAD", "PUT", "DELETE")
WATCH_WAIT = 30.0  # seconds one long-poll of ``watch`` waits
M = TypeVar("M", bound="BaseModel")


async def _asyncio_sleep(seconds: float) -> None:
    """``asyncio.sleep``, imported by the asynchronous client only when it first waits."""
    import asyncio

    await asyncio.sleep(seconds)


class Backoff(NamedTuple):  # no dataclass: made at every client command's import
    """Retries of idempotent calls: ``attempts`` in all, delays doubling from ``first``."""

    attempts: int = 4
    first: float = 0.25
    cap: float = 8.0
    sleep: Callable[[float], None] = time.sleep
    async_sleep: Callable[[float], Awaitable[None]] = _asyncio_sleep


DEFAULT_BACKOFF = Backoff()

Json = dict[str, Any]
BlobSource = bytes | Path | Iterable[bytes]


def file_chunks(path: Path, chunk_size: int = CHUNK) -> Iterator[bytes]:
    """The bytes of a file in chunks, without holding it whole."""
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_size):
            yield chunk


def raise_for(response: Response) -> None:
    """Raise the promoter error an unsuccessful answer stands for."""
    if response.is_success:
        return
    media = response.headers.get("content-type", "").split(";")[0].strip()
    problem: Any = None
    if media in ("application/problem+json", "application/json"):
        try:
            problem = json.loads(response.content)
        except ValueError:
            problem = None
    if isinstance(problem, dict) and isinstance(problem.get("code"), str):
        cls = error_class(problem["code"])
        detail = str(problem.get("detail") or problem.get("title") or "")
        context = {k: v for k, v in problem.items() if k not in _PROBLEM_MEMBERS}
        if cls is PromoterError:
            context.update(server_code=problem["code"], http_status=response.status_code)
        try:
            error = cls(detail, **context)
        except TypeError:  # a class with a narrower constructor: keep code and detail
            error = cls(detail)
        raise error
    # one line, whatever the other server sent: a page's line breaks would print as lines
    # of promoter's own message
    snippet = " ".join(response.text[:200].split())
    raise PromoterError(
        f"{response.request.method} {response.request.url.path} answered "
        f"{response.status_code} without a problem document: {snippet}",
        http_status=response.status_code,
    )


@functools.cache
def _verifying_tls() -> ssl.SSLContext:
    """httpx's default verifying context (certifi's bundle, or ``SSL_CERT_FILE``/``_DIR``),
    made once per process: loading the bundle takes about 50 ms of CPU."""
    import httpx

    return httpx.create_ssl_context()


def tls_context(url: str) -> ssl.SSLContext:
    """The TLS context a client of ``url`` is given.

    An ``https`` daemon gets the verifying context, shared by every client of the
    process. A plain ``http`` one (the loopback default) gets a context that trusts no
    certificate at all: no TLS is spoken to it, and were it ever (redirects are not
    followed), every handshake would fail. Either way no client loads the CA bundle for
    itself, which every CLI command and both clients of an orchestrator's flow paid.
    """
    if url.lower().startswith("https:"):
        return _verifying_tls()
    import ssl  # only for httpx's pool, which loads it itself

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, with no trust anchors


def pool_options(url: str, token: str | None, timeout: float, transport: Any) -> dict[str, Any]:
    """The keyword arguments of either client's httpx pool: base URL, bearer, TLS, and the
    pool's limits (``pool_limits``)."""
    return {
        "base_url": url,
        "headers": {"Authorization": f"Bearer {token}"} if token else {},
        "timeout": timeout,
        "transport": transport,
        "verify": tls_context(url),
        "limits": pool_limits(),
    }


def pool_limits() -> httpx.Limits:
    """httpx's default limits, but an idle connection kept ``REUSE_SECONDS`` only, as the
    loopback pool keeps one (``promoter.client.direct``): httpx's own 5 s is the daemon's
    keep-alive timeout, and a request written as the daemon closes its connection is
    answered by nothing."""
    import httpx  # the pool is httpx's: loaded with it

    return httpx.Limits(
        max_connections=100, max_keepalive_connections=20, keepalive_expiry=REUSE_SECONDS
    )


def _may_retry(
    method: str, content: bytes | Iterable[bytes] | None, idempotent: bool | None
) -> bool:
    """Whether a call may be sent again: idempotent, with a body that can be replayed."""
    if idempotent is None:
        idempotent = method in IDEMPOTENT_METHODS
    return idempotent and (content is None or isinstance(content, bytes))


def transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of httpx's transport errors (the loopback pool raises them
    too; httpx is loaded whenever one was raised)."""
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(exc, httpx.TransportError)


def dropped(exc: BaseException) -> bool:
    """Whether ``exc`` is a request the server closed the connection on before answering:
    it was sent, and may have begun its work."""
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError)


def _is_answer(result: Any) -> bool:
    """Whether a call's result is an answer (httpx's, or the loopback pool's)."""
    httpx = sys.modules.get("httpx")
    return isinstance(result, Answer) or (httpx is not None and isinstance(result, httpx.Response))


def _connection_error(exc: BaseException) -> bool:
    """A transport error worth another try; a timeout is not (it already waited)."""
    if not transport_error(exc):
        return False
    import httpx

    return not isinstance(exc, httpx.TimeoutException)


def _last_outcome(state: RetryCallState) -> Any:
    """After the last try: the answer it got (a 503, raised by the caller) or its error."""
    assert state.outcome is not None
    return state.outcome.result()


class Retries(NamedTuple):  # no dataclass: made at every client command's import
    """The retries ``backoff`` allows one call: ``attempts`` tries in all, an answer whose
    status is in ``again`` or a connection error tried again. ``final`` tells a first try's
    outcome the call keeps without tenacity (loaded only for a second try);
    ``settings`` are its controller's."""

    backoff: Backoff
    attempts: int
    again: frozenset[int]

    def final(self, error: BaseException | None, result: Any) -> bool:
        """Whether a try's outcome (``error`` raised, else ``result``) is the call's, as the
        controller decides: no try left, an error not of the connection, or an answer
        not to be tried again."""
        if self.attempts <= 1:
            return True
        if error is not None:
            return not _connection_error(error)
        return not self.busy(result)

    def busy(self, response: Any) -> bool:
        """Whether ``response`` is an answer to try again (a 503, a 429 not expected)."""
        return _is_answer(response) and response.status_code in self.again

    def settings(self) -> dict[str, Any]:
        """The tenacity controller's settings; the caller gives the sleep
        (``Backoff.sleep``, or ``async_sleep`` on the loop)."""
        return _settings(self)


def retries(
    backoff: Backoff,
    method: str,
    content: bytes | Iterable[bytes] | None,
    idempotent: bool | None,
    ok_statuses: tuple[int, ...] = (),
) -> Retries:
    """The retries ``backoff`` allows one call (``Retries``)."""
    again = frozenset(status for status in (503, 429) if status not in ok_statuses)
    attempts = max(backoff.attempts, 1) if _may_retry(method, content, idempotent) else 1
    return Retries(backoff, attempts, again)


def retry_policy(
    backoff: Backoff,
    method: str,
    content: bytes | Iterable[bytes] | None,
    idempotent: bool | None,
    ok_statuses: tuple[int, ...] = (),
) -> dict[str, Any]:
    """The tenacity controller's settings for one call with the retries ``backoff`` allows
    it; the caller gives the sleep (``Backoff.sleep``, or ``async_sleep`` on the loop)."""
    return retries(backoff, method, content, idempotent, ok_statuses).settings()


def _settings(plan: Retries) -> dict[str, Any]:
    from tenacity import (
        retry_any,
        retry_if_exception,
        retry_if_result,
        stop_after_attempt,
        wait_exponential,
    )

    backoff = plan.backoff
    exponential = wait_exponential(multiplier=backoff.first, exp_base=2, max=backoff.cap)

    def wait(state: RetryCallState) -> float:
        """The doubling delay, or longer when a 429 asked for it (``Retry-After``, capped)."""
        delay = float(exponential(state))
        outcome = state.outcome
        if outcome is not None and not outcome.failed:
            response = outcome.result()
            if _is_answer(response) and response.status_code == 429:
                asked = response.headers.get("retry-after", "")
                if asked.isdigit():
                    delay = max(delay, min(float(asked), backoff.cap))
        return delay

    return {
        "stop": stop_after_attempt(plan.attempts),
        "wait": wait,
        "retry": retry_any(retry_if_exception(_connection_error), retry_if_result(plan.busy)),
        "retry_error_callback": _last_outcome,
    }


def unreachable(
    url: str, method: str, path: str, timeout: float, exc: Exception, *, sent_by: str = ""
) -> ConfigError:
    """The error a transport error of httpx's (``exc``) stands for: ``server_unavailable``
    (exit 69) when the daemon could not be had (no connection, no answer in time, the
    connection closed before the answer), ``config_error`` (78) when the URL or the
    request could not be used at all (a scheme httpx does not speak, a request it could
    not form): the configuration is wrong, not the daemon down
    (docs/decisions/an-unreachable-daemon-is-unavailable.md). ``sent_by``: the daemon
    whose 421 sent the request to ``url``, the owner's base URL."""
    import httpx  # loaded already: ``exc`` is one of its errors

    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
        return ConfigError(f"cannot use the promoter server URL {url}: {exc}", url=url)
    if isinstance(exc, httpx.TimeoutException):
        return ServerUnavailable(
            f"the promoter server at {url} did not answer {method} {path} within {timeout:g} s",
            url=url,
        )
    if dropped(exc):  # the request went out: the server may have begun its work
        return ServerUnavailable(
            f"the promoter server at {url} closed the connection before answering {method} "
            f"{path} ({exc}): it may have stopped in the middle of it. What it began is "
            "journaled: once it serves again, `promoter ops list` shows the operation",
            url=url,
            reason=str(exc),
        )
    hint = (
        f"{sent_by} sent the request there, to the host that owns the answer; "
        "`promoter hosts list` shows that host's status"
        if sent_by
        else "promoter status says what is wrong"
    )
    return ServerUnavailable(
        f"cannot reach the promoter server at {url}: {exc}; {hint}",
        url=url,
        reason=str(exc),
    )


def wait_params(wait: float | None, status: str | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if wait:
        params["wait"] = f"{wait:g}"
    if status:
        params["status"] = status
    return params


def feed_params(
    after: str | None, wait: float | None, repository: str | None, status: str | None
) -> dict[str, str]:
    pairs = (("after", after), ("repository", repository), ("status", status))
    return {**{k: v for k, v in pairs if v}, **wait_params(wait, None)}


def model_of(model: type[M], response: Response) -> M:
    return model.model_validate_json(response.content)


def segment(value: str) -> str:
    """A value placed in a URL path: one segment, never a way to reach another route."""
    if not value or value in (".", "..") or any(ord(c) < 0x21 or c == "/" for c in value):
        raise BadRequest(f"{value!r} cannot be used as one segment of a URL path")
    return quote(value, safe="")
