"""Clients of the promoter daemon (protocol: api#http-errors): synchronous, asynchronous, and what
they share.

``from promoter.client import PromoterClient`` (or ``AsyncPromoterClient``) is the public
face; the modules beside this one are the parts. Each is imported when first asked for:
a command line that makes one synchronous call never loads the asynchronous client.
Not here: anything the daemon itself runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from promoter.client.aio import AsyncPromoterClient
    from promoter.client.sync import PromoterClient

__all__ = ["AsyncPromoterClient", "PromoterClient"]
_HOMES = {"AsyncPromoterClient": "promoter.client.aio", "PromoterClient": "promoter.client.sync"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
