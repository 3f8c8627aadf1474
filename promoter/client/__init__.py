"""Clients of the promoter daemon (SPEC §7): synchronous, asynchronous, and what they share.

``from promoter.client import PromoterClient`` (or ``AsyncPromoterClient``) is the public
face; the modules beside this one are the parts. Not here: anything the daemon itself runs.
"""

from promoter.client.aio import AsyncPromoterClient
from promoter.client.sync import PromoterClient

__all__ = ["AsyncPromoterClient", "PromoterClient"]
