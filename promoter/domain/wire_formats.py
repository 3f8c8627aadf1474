"""Format checks of wire values a JSON Schema cannot say (protocol: documents#strict-models).

One function per format, shared by the pydantic models (``promoter.domain.models``) and
the validator that checks the same documents without them (``promoter.domain.wirecheck``),
so both refuse exactly the same values. Pure: no I/O, no pydantic.
"""

from __future__ import annotations

import re
from datetime import datetime

_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def check_timestamp(value: str) -> str:
    """``value`` unchanged when it is RFC 3339 UTC with whole seconds and a Z suffix."""
    if not _TIMESTAMP.match(value):
        raise ValueError("timestamp must be RFC 3339 UTC with whole seconds and a Z suffix")
    # an impossible date or time is refused as ``strptime`` would (second 60 too), without
    # loading ``_strptime`` (and ``calendar`` and ``locale``) into every command line
    try:
        datetime(
            int(value[0:4]), int(value[5:7]), int(value[8:10]),
            int(value[11:13]), int(value[14:16]), int(value[17:19]),
        )  # fmt: skip
    except ValueError as exc:
        raise ValueError(f"timestamp is not a date and time of the calendar: {exc}") from None
    return value


def blob_path(sha256: str) -> str:
    """Where a blob lives relative to the audit store root (protocol: documents#file-state)."""
    return f"blobs/sha256/{sha256[0:2]}/{sha256}"
