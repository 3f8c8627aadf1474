"""Which client calls are tried again, how often, and after which delays.

A mock transport counts the tries and fails them as told; the ``Backoff`` records its
sleeps instead of sleeping. A connection error or a 503 is retried for an idempotent
call with a replayable body only (a 429 after its Retry-After); a timeout and a streamed
body never are.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from promoter.client.sync import AsyncPromoterClient, Backoff, PromoterClient
from promoter.errors import ConfigError, DatabaseBusy, DatabaseUnavailable, TooManyRequests

URL = "http://127.0.0.1:9"


class Tries:
    """A transport whose answers fail with ``fail`` (an exception class or a status)."""

    def __init__(
        self, fail: type[Exception] | int, failures: int = 100, code: str = "database_busy"
    ) -> None:
        self.fail, self.failures, self.count, self.code = fail, failures, 0, code

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.count += 1
        request.read()  # a streamed body is consumed as a real send would
        if self.count > self.failures:
            return httpx.Response(200, json={})
        if isinstance(self.fail, int):
            problem = {"type": "about:blank", "title": "busy", "status": self.fail}
            problem["code"] = self.code
            headers = {"Retry-After": "3"} if self.fail == 429 else {}
            return httpx.Response(self.fail, json=problem, headers=headers)
        raise self.fail("refused", request=request)


def recording(
    attempts: int = 4, first: float = 0.25, cap: float = 8.0
) -> tuple[Backoff, list[float]]:
    slept: list[float] = []

    async def async_sleep(delay: float) -> None:
        slept.append(delay)

    return Backoff(attempts, first, cap, sleep=slept.append, async_sleep=async_sleep), slept


def client(tries: Tries, backoff: Backoff) -> PromoterClient:
    return PromoterClient(URL, "t", transport=httpx.MockTransport(tries), backoff=backoff)


def test_an_idempotent_call_is_tried_attempts_times_with_doubling_delays() -> None:
    tries, (backoff, slept) = Tries(httpx.ConnectError), recording()
    with client(tries, backoff) as c, pytest.raises(ConfigError, match="cannot reach"):
        c._send("GET", "/v1/events")
    assert (tries.count, slept) == (4, [0.25, 0.5, 1.0])


def test_the_delay_stops_growing_at_the_cap() -> None:
    tries, (backoff, slept) = Tries(httpx.ConnectError), recording(6, 1.0, 3.0)
    with client(tries, backoff) as c, pytest.raises(ConfigError):
        c._send("DELETE", "/v1/x")
    assert (tries.count, slept) == (6, [1.0, 2.0, 3.0, 3.0, 3.0])


def test_a_success_after_failures_is_returned() -> None:
    tries, (backoff, slept) = Tries(httpx.ConnectError, failures=2), recording()
    with client(tries, backoff) as c:
        assert c._send("PUT", "/v1/x", content=b"again").status_code == 200
    assert (tries.count, slept) == (3, [0.25, 0.5])


def streamed() -> Iterator[bytes]:
    yield b"once"


@pytest.mark.parametrize(
    ("method", "kwargs"),
    [
        ("POST", {}),  # not idempotent
        ("PUT", {"idempotent": False}),
        ("PUT", {"content": streamed()}),  # a streamed body cannot be sent again
        ("GET", {"content": [b"a", b"b"]}),
    ],
)
def test_a_call_that_cannot_be_repeated_is_tried_once(method: str, kwargs: dict[str, Any]) -> None:
    tries, (backoff, slept) = Tries(httpx.ConnectError), recording()
    with client(tries, backoff) as c, pytest.raises(ConfigError):
        c._send(method, "/v1/x", **kwargs)
    assert (tries.count, slept) == (1, [])


def test_a_post_declared_idempotent_is_retried() -> None:
    tries, (backoff, slept) = Tries(httpx.ConnectError), recording()
    with client(tries, backoff) as c, pytest.raises(ConfigError):
        c._send("POST", "/v1/grants", content=b"{}", idempotent=True)
    assert (tries.count, slept) == (4, [0.25, 0.5, 1.0])


def test_a_timeout_is_never_retried() -> None:
    tries, (backoff, slept) = Tries(httpx.ReadTimeout), recording()
    with client(tries, backoff) as c, pytest.raises(ConfigError) as caught:
        c._send("GET", "/v1/events", timeout=2.5)
    assert (tries.count, slept) == (1, [])
    assert caught.value.detail == (
        f"the promoter server at {URL} did not answer GET /v1/events within 2.5 s"
    )


def test_a_503_the_caller_expects_is_returned_untried() -> None:
    tries, (backoff, slept) = Tries(503), recording()
    with client(tries, backoff) as c:
        assert c._send("GET", "/v1/x", ok_statuses=(503,)).status_code == 503
        with pytest.raises(DatabaseBusy):
            c._send("GET", "/v1/x")
    assert (tries.count, slept) == (1 + 4, [0.25, 0.5, 1.0])


def test_a_429_is_retried_after_its_retry_after_then_raised() -> None:
    tries, (backoff, slept) = Tries(429, code="too_many_requests"), recording()
    with client(tries, backoff) as c, pytest.raises(TooManyRequests) as refused:
        c._send("GET", "/v1/bundles/bnd_x/diff")
    assert (tries.count, slept) == (4, [3.0, 3.0, 3.0])  # Retry-After, over the doubling
    assert refused.value.code == "too_many_requests"
    tries = Tries(429, failures=1, code="too_many_requests")
    with client(tries, backoff) as c:
        assert c._send("GET", "/v1/bundles/bnd_x/diff").status_code == 200
    once = Tries(429, code="too_many_requests")
    with client(once, backoff) as c, pytest.raises(TooManyRequests):
        c._send("POST", "/v1/bundles", content=b"{}")
    assert once.count == 1  # a call that is not idempotent is never repeated


def test_no_attempts_is_one_try() -> None:
    tries, (backoff, slept) = Tries(httpx.ConnectError), recording(attempts=0)
    with client(tries, backoff) as c, pytest.raises(ConfigError):
        c._send("GET", "/v1/x")
    assert (tries.count, slept) == (1, [])


def test_the_async_client_retries_alike() -> None:
    connect, busy = Tries(httpx.ConnectError), Tries(503, failures=1)
    (backoff, slept) = recording(5, 0.5, 1.0)

    async def run() -> None:
        for tries in (connect, busy):
            transport = httpx.MockTransport(tries)
            async with AsyncPromoterClient(URL, "t", transport=transport, backoff=backoff) as c:
                if tries is connect:
                    with pytest.raises(ConfigError, match="cannot reach"):
                        await c._send("GET", "/v1/x")
                else:
                    assert (await c._send("GET", "/v1/x")).status_code == 200
        async with AsyncPromoterClient(
            URL, "t", transport=httpx.MockTransport(Tries(httpx.ConnectTimeout)), backoff=backoff
        ) as c:
            with pytest.raises(ConfigError, match="did not answer"):
                await c._send("GET", "/v1/x")

    asyncio.run(run())
    assert (connect.count, busy.count) == (5, 2)
    assert slept == [0.5, 1.0, 1.0, 1.0, 0.5]  # four for the refusals, one for the 503


def test_database_unavailable_is_retried_by_both_clients() -> None:
    tries, (backoff, slept) = Tries(503, code="database_unavailable"), recording()
    with client(tries, backoff) as c:
        with pytest.raises(DatabaseUnavailable):
            c._send("GET", "/v1/x")
        tries.count, tries.failures = 0, 2
        assert c._send("POST", "/v1/promotions", content=b"{}", idempotent=True).status_code == 200
    assert (tries.count, slept) == (3, [0.25, 0.5, 1.0, 0.25, 0.5])

    again = Tries(503, failures=1, code="database_unavailable")

    async def run() -> None:
        transport = httpx.MockTransport(again)
        async with AsyncPromoterClient(URL, "t", transport=transport, backoff=backoff) as c:
            assert (await c._send("GET", "/v1/x")).status_code == 200

    asyncio.run(run())
    assert again.count == 2


def test_a_first_try_kept_or_retried_loads_tenacity_only_for_a_second_try() -> None:
    """A call answered at its first try (or refused in a way no try repeats) never loads
    tenacity; the first refused try is the controller's first attempt (no extra try)."""
    probe = """
import sys
import httpx
from promoter.client.sync import Backoff, PromoterClient
from promoter.errors import PromoterError
counted = []
busy = [1]
def answer(request):
    counted.append(request.url.path)
    if request.url.path == "/v1/busy" and busy[0] > 0:
        busy[0] -= 1
        return httpx.Response(503, json={"code": "database_busy", "status": 503})
    if request.url.path == "/v1/bad":
        return httpx.Response(400, json={"code": "bad_request", "status": 400})
    return httpx.Response(200, json={})
slept = []
backoff = Backoff(4, 0.25, 8.0, sleep=slept.append)
with PromoterClient("http://127.0.0.1:9", "t", transport=httpx.MockTransport(answer), backoff=backoff) as c:
    c._send("GET", "/v1/x")
    try:
        c._send("GET", "/v1/bad")
    except PromoterError:
        pass
    try:
        c._send("POST", "/v1/busy", content=b"{}")  # not idempotent: its 503 is the answer
    except PromoterError as exc:
        print(exc.code, end=" ")
    loaded = "tenacity" in sys.modules
    counted.clear()
    busy[0] = 2
    c._send("GET", "/v1/busy")
print(loaded, "tenacity" in sys.modules, len(counted), slept)
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == "database_busy False True 3 [0.25, 0.5]\n", done.stderr
