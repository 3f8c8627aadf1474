"""The SQL statements an engine runs (or compiles) inside a block, for tests that count them.

Deliberately not here: deciding which statements matter (each test filters the list).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, event
from sqlalchemy.engine.interfaces import CacheStats


@contextmanager
def statements(engine: Engine, *, compiled_only: bool = False) -> Iterator[list[str]]:
    """Every statement ``engine`` sends to its database inside the block, in order; with
    ``compiled_only``, only those it had to compile (not found in its statement cache)."""
    seen: list[str] = []

    def note(
        _conn: object, _cursor: object, statement: str, _p: object, context: object, *_: object
    ) -> None:
        if not compiled_only or getattr(context, "cache_hit", None) is CacheStats.CACHE_MISS:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


def selects_from(seen: list[str], table: str) -> list[str]:
    """The ``SELECT`` statements of ``seen`` that read ``table``."""
    return [s for s in seen if s.lstrip().upper().startswith("SELECT") and f"FROM {table}" in s]
