"""The console's one translation of a refusal into the page the person sees.

A console route is declared ``@shown(...)``: any ``PromoterError`` it raises is answered
with the error's HTTP status as ``error.html``, which shows the error's ``code`` and
``detail`` under a heading, "Refused" or, for a 503, "Unavailable for now", to the
session the route answered for (``web.answering``: none before a form proved its CSRF
token). A route may name its own page for some errors
(``shown(Page(MergeConflict, page))``); the first ``Page`` whose error class matches is
used. So a new refusal code needs no edit here or in a route: the page shows its code.

Deliberately not here: which errors are raised (the engine's), the API's problem documents
(``promoter.api.problems``), and any other error, which goes on to the API's handlers.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from promoter.api.problems import RETRY_AFTER
from promoter.api.ui.web import answering, render
from promoter.errors import PromoterError

Route = Callable[..., Awaitable[Response]]
# routes declared ``@shown``: every console route that may refuse is one (tests/console)
SHOWN: set[Route] = set()


@dataclass(frozen=True)
class Page:
    """A route's own page for refusals of ``kind``: ``answer(request, error)``."""

    kind: type[PromoterError]
    answer: Callable[[Request, PromoterError], Response]


# a page's heading by its status; any other is "Refused" (``error.html``): a 503 refuses
# nothing of the request, the service (the ledger not answering or locked) is away a while
HEADINGS = {503: "Unavailable for now"}


def error_page(request: Request, exc: PromoterError) -> Response:
    """``error.html`` with the error's status, its heading (``HEADINGS``), code and detail,
    and the ``Retry-After`` the API's problem document would carry
    (``promoter.api.problems.RETRY_AFTER``)."""
    page = render(
        "error.html",
        exc.http_status,
        answering(request),
        heading=HEADINGS.get(exc.http_status),
        code=exc.code,
        detail=exc.detail,
    )
    return with_retry_after(page, exc)


def with_retry_after(page: Response, exc: PromoterError) -> Response:
    """``page`` with the ``Retry-After`` the API's problem document for ``exc`` carries."""
    retry_after = RETRY_AFTER.get(exc.code)
    if retry_after is None and type(exc.context.get("retry_after")) is int:
        retry_after = str(exc.context["retry_after"])
    if retry_after is not None:
        page.headers["Retry-After"] = retry_after
    return page


def shown(*pages: Page) -> Callable[[Route], Route]:
    """Declare a console route: its refusals are answered by ``pages``, else ``error_page``.

    The route must take the request as a parameter named ``request``.
    """

    def declare(route: Route) -> Route:
        @functools.wraps(route)
        async def answered(*args: Any, **kwargs: Any) -> Response:
            try:
                return await route(*args, **kwargs)
            except PromoterError as exc:
                request: Request = kwargs["request"]
                page = next((p.answer for p in pages if isinstance(exc, p.kind)), error_page)
                return page(request, exc)

        SHOWN.add(answered)
        return answered

    return declare
