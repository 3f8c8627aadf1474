"""Format checks of wire values a JSON Schema cannot say (protocol: documents#strict-models).

One function per format, shared by the pydantic models (``promoter.domain.models``) and
the validator that checks the same documents without them (``promoter.domain.wirecheck``),
so both refuse exactly the same values. Pure: no I/O, no pydantic.
"""

from __future__ import annotations

import re

_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def check_timestamp(value: str) -> str:
    """``value`` unchanged when it is RFC 3339 UTC with whole seconds and a Z suffix."""
    if not _TIMESTAMP.match(value):
        raise ValueError("timestamp must be RFC 3339 UTC with whole seconds and a Z suffix")
    # an impossible date or time is refused as ``strptime`` would (second 60 too), in
    # ``datetime``'s own words and order, without loading ``datetime`` or ``_strptime``
    # (and ``calendar`` and ``locale``) into every command line
    problem = _calendar_problem(
        int(value[0:4]), int(value[5:7]), int(value[8:10]),
        int(value[11:13]), int(value[14:16]), int(value[17:19]),
    )  # fmt: skip
    if problem is not None:
        raise ValueError(f"timestamp is not a date and time of the calendar: {problem}")
    return value


_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _calendar_problem(
    year: int, month: int, day: int, hour: int, minute: int, second: int
) -> str | None:
    """What ``datetime(year, ...)`` would refuse, as its message says it; ``None``: a date
    and time of the calendar (the years 1 to 9999 of four digits)."""
    if year < 1:
        return f"year {year} is out of range"
    if not 1 <= month <= 12:
        return "month must be in 1..12"
    leap = month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not 1 <= day <= _DAYS[month - 1] + leap:
        return "day is out of range for month"
    if hour > 23:
        return "hour must be in 0..23"
    if minute > 59:
        return "minute must be in 0..59"
    if second > 59:
        return "second must be in 0..59"
    return None


def blob_path(sha256: str) -> str:
    """Where a blob lives relative to the audit store root (protocol: documents#file-state)."""
    return f"blobs/sha256/{sha256[0:2]}/{sha256}"
