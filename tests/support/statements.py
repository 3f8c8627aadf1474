"""The SQL statements an engine runs inside a block, for tests that count reads.

Deliberately not here: deciding which statements matter (each test filters the list).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, event


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every statement ``engine`` sends to its database inside the block, in order."""
    seen: list[str] = []

    def note(_conn: object, _cursor: object, statement: str, *_rest: object) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


def selects_from(seen: list[str], table: str) -> list[str]:
    """The ``SELECT`` statements of ``seen`` that read ``table``."""
    return [s for s in seen if s.lstrip().upper().startswith("SELECT") and f"FROM {table}" in s]
