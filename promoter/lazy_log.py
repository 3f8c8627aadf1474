"""A module's logger that loads ``logging`` only when it first has something to say.

``LazyLogger(name)`` stands where ``logging.getLogger(name)`` stood in a module a person's
command line imports (the sandbox, its removal, the relay, the group flush, the state
temps), all of which log only on rare paths: importing ``logging`` (with ``traceback``,
``string`` and ``threading``'s locks) cost about 3 ms of every ``promoter run``. Each call
goes to ``logging.getLogger(name)``, the record made as if the caller had called it
(``stacklevel``), so a record's origin, the levels and handlers set on the named logger
(``caplog`` among them) are the same.

Not here: handlers, levels or formats (the daemon's ``promoter.api.logs`` sets them; a
command line sets none), any logger other than by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging

__all__ = ["LazyLogger"]


class LazyLogger:
    """``logging.getLogger(name)``, made at the first message."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def logger(self) -> logging.Logger:
        import logging

        return logging.getLogger(self.name)

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        self.logger().debug(msg, *args, **_caller(kwargs))

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        self.logger().info(msg, *args, **_caller(kwargs))

    def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
        self.logger().warning(msg, *args, **_caller(kwargs))

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self.logger().error(msg, *args, **_caller(kwargs))

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        self.logger().exception(msg, *args, **_caller(kwargs))


def _caller(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the record's origin one frame further out: this module's caller."""
    return {**kwargs, "stacklevel": kwargs.get("stacklevel", 1) + 1}
