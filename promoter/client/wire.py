"""What both daemon clients share: retries, the problem translation, TLS, URL segments.

``Backoff`` says how idempotent calls are retried; ``raise_for`` raises the promoter
error a problem+json answer stands for (``error_class(code)``, the problem's other
members as context); ``tls_context`` gives each client its TLS context without loading
the CA bundle more than once per process; ``segment`` makes a value one URL path
segment, never a way to another route. Deliberately not here: any call to the daemon
(``promoter.client.sync``, ``promoter.client.aio``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from promoter.errors import BadRequest, ConfigError, PromoterError, error_class

MISSING_BATCH = 10_000  # digests per blobs:missing request (the server takes 100,000)
CHUNK = 1 << 20
_PROBLEM_MEMBERS = ("type", "title", "status", "detail", "code")
IDEMPOTENT_METHODS = ("GET", "HEAD", "PUT", "DELETE")
WATCH_WAIT = 30.0  # seconds one long-poll of ``watch`` waits
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Backoff:
    """Retries of idempotent calls: ``attempts`` in all, delays doubling from ``first``."""

    attempts: int = 4
    first: float = 0.25
    cap: float = 8.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    async_sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)

    def delays(self) -> Iterator[float]:
        """The delay before each retry (``attempts - 1`` of them)."""
        for retry in range(max(self.attempts, 1) - 1):
            yield min(self.first * (2**retry), self.cap)


DEFAULT_BACKOFF = Backoff()

Json = dict[str, Any]
BlobSource = bytes | Path | Iterable[bytes]


def file_chunks(path: Path, chunk_size: int = CHUNK) -> Iterator[bytes]:
    """The bytes of a file in chunks, without holding it whole."""
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_size):
            yield chunk


def raise_for(response: httpx.Response) -> None:
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
    snippet = response.text[:200].strip()
    raise PromoterError(
        f"{response.request.method} {response.request.url.path} answered "
        f"{response.status_code} without a problem document: {snippet}",
        http_status=response.status_code,
    )


@functools.cache
def _verifying_tls() -> ssl.SSLContext:
    """httpx's default verifying context (certifi's bundle, or ``SSL_CERT_FILE``/``_DIR``),
    made once per process: loading the bundle takes about 50 ms of CPU."""
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
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, with no trust anchors


def retry_delays(
    backoff: Backoff,
    method: str,
    content: bytes | Iterable[bytes] | None,
    idempotent: bool | None,
    ok_statuses: tuple[int, ...] = (),
) -> Iterator[float]:
    """The delays of the retries a call may make (none for a call that is not idempotent)."""
    if idempotent is None:
        idempotent = method in IDEMPOTENT_METHODS
    replayable = content is None or isinstance(content, bytes)
    return backoff.delays() if idempotent and replayable else iter(())


def unreachable(
    url: str, method: str, path: str, timeout: float, exc: httpx.TransportError
) -> ConfigError:
    if isinstance(exc, httpx.TimeoutException):
        return ConfigError(
            f"the promoter server at {url} did not answer {method} {path} within {timeout:g} s",
            url=url,
        )
    return ConfigError(f"cannot reach the promoter server at {url}: {exc}", url=url)


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


def model_of(model: type[M], response: httpx.Response) -> M:
    return model.model_validate_json(response.content)


def segment(value: str) -> str:
    """A value placed in a URL path: one segment, never a way to reach another route."""
    if not value or value in (".", "..") or any(ord(c) < 0x21 or c == "/" for c in value):
        raise BadRequest(f"{value!r} cannot be used as one segment of a URL path")
    return quote(value, safe="")
