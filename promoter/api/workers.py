"""Worker threads for a request's blocking work: the shared pool, or the operator's own.

anyio runs blocking calls on worker threads under a capacity limiter, and by default every
request shares one (40 threads). ``run_in_threadpool`` (a drop-in for Starlette's) runs a
call under the limiter chosen for the request it serves: the operator's own pool of
``operator_workers`` threads once the request is known to be the operator's
(``use_operator_pool``, called when its token or console session is authenticated) or
for ``/readyz``, and the shared one otherwise. So requests of other roles that keep every
shared thread busy, or waiting on a lock, cannot delay the operator's routes
(protocol: api#work-bounded-per-caller). The choice lives in a context variable: it holds for the
rest of the request's task and for nothing else.

A token that may be a named operator's (``OPERATOR_TOKEN_PREFIX``) is looked up on the
operator's pool too; the lookup reads a folder's listing only, so a flood of made-up
tokens of that shape costs the pool microseconds each and waits on nothing.

Deliberately not here: which requests may start at all (``promoter.api.admission``), and
who a token is (``promoter.store.credentials``). FastAPI's own thread hops (a plain ``def``
route or dependency) stay on the shared pool: the operator's routes are coroutines.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar
from typing import ParamSpec, TypeVar

import anyio
import anyio.to_thread
from starlette.datastructures import State

P = ParamSpec("P")
T = TypeVar("T")
OPERATOR_TOKEN_PREFIX = "pop_"  # noqa: S105 (a prefix, no secret): ``credentials add`` makes it
_POOL: ContextVar[anyio.CapacityLimiter | None] = ContextVar("promoter_worker_pool", default=None)


def install(state: State, operator_workers: int) -> None:
    """Give the app (its ``state``) the operator's own pool of ``operator_workers`` threads."""
    state.operator_pool = anyio.CapacityLimiter(operator_workers)


def operator_pool(state: State) -> anyio.CapacityLimiter:
    pool: anyio.CapacityLimiter = state.operator_pool
    return pool


def use_operator_pool(state: State) -> None:
    """Run the rest of this request's blocking work on the operator's pool."""
    _POOL.set(operator_pool(state))


async def run_in_threadpool(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``func(*args, **kwargs)`` in a worker thread of the request's pool."""
    return await anyio.to_thread.run_sync(
        functools.partial(func, *args, **kwargs), limiter=_POOL.get()
    )


async def run_on_operator_pool(
    state: State, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``func(*args, **kwargs)`` on the operator's pool, whoever asks (``/readyz``)."""
    return await anyio.to_thread.run_sync(
        functools.partial(func, *args, **kwargs), limiter=operator_pool(state)
    )
