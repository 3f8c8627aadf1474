"""``Closing``: a ``with`` block that ends in the object's own ``close``.

A class that holds something to release (a descriptor, a connection pool, a private
directory) defines ``close`` and takes ``with`` from here: entering answers the object,
leaving (normally or by an exception) calls ``close`` and lets any exception pass. A class
whose entering does work of its own overrides ``__enter__`` and keeps this ``__exit__``.
It does not decide what closing means, nor whether ``close`` may run twice: each class's
``close`` does.
"""

from __future__ import annotations

from abc import abstractmethod
from types import TracebackType
from typing import Self


class Closing:
    """``with obj:`` answers ``obj`` and calls ``obj.close()`` on the way out."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
