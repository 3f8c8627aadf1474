"""A request never answers again the failure of an attempt that had already ended.

An attempt whose failure could not even be recorded (the database was unreachable) leaves
a failed future in the runner; a later request for the same operation answers the
operation's recorded status rather than that stale error, while a request that waits on an
attempt still running gets its failure as before.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, cast

import pytest

from promoter.engine.operation import runner
from promoter.engine.services import Services
from promoter.errors import DatabaseUnavailable


class OneRunner:
    """Just enough of ``Services`` for ``wait_for``: the runner holding ``future``."""

    def __init__(self, future: Future[None]) -> None:
        self._future = future

    def future(self, _operation_id: str) -> Future[None]:
        return self._future

    def once(self, _name: str, _make: Any) -> OneRunner:
        return self


def services_with(future: Future[None]) -> Services:
    return cast(Services, OneRunner(future))


def test_an_attempt_that_already_failed_is_not_replayed() -> None:
    failed: Future[None] = Future()
    failed.set_exception(DatabaseUnavailable("the database cannot be reached"))
    runner.wait_for(services_with(failed), "op", timeout=5)  # returns, raises nothing


class FailsWhileWaited(Future[None]):
    """An attempt still running when looked up, which fails once it is waited for."""

    def result(self, timeout: float | None = None) -> None:
        self.set_exception(DatabaseUnavailable("the database cannot be reached"))
        return super().result(timeout)


def test_an_attempt_failing_while_waited_for_raises_its_error() -> None:
    running = FailsWhileWaited()
    running.set_running_or_notify_cancel()
    with pytest.raises(DatabaseUnavailable):
        runner.wait_for(services_with(running), "op", timeout=30)
