"""The suite's one family of fixtures: repositories, daemons, bubblewrap.

Registered by ``tests/conftest.py``. ``repos`` makes repositories below the test's
directory (``tests.support.repos``); ``repo`` is one of them, as the module's
``pytest.mark.repo(name, files, ...)`` says (default: ``work`` with a README and
``src/app.py``; ``shape=`` names another ``Repos`` method, or is the module's own
function of the path); ``serve`` starts in-process daemons on loopback
(``tests.support.daemon``) and ``spawn`` daemons in processes of their own
(``tests.support.process``), each stopped when the test ends; ``daemon`` serves ``repo``
under its directory's name, as ``pytest.mark.daemon(state=..., repository={...},
**settings)`` says; ``gated`` is a repository under the approval gate and its daemon
(``pytest.mark.gated(files, **settings)``); ``bwrap`` is the bubblewrap binary or a skip
(``tests.support.bwrap``). The database each daemon opens is chosen by
``tests/conftest.py``, not here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import pytest

from promoter.config import RepositoryConfig
from tests.support import bwrap as bubblewrap
from tests.support.daemon import Daemon, running_daemon
from tests.support.process import DaemonProcess
from tests.support.repos import Repos


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "repo(name='work', files=None, shape=None, **how): the shape of the `repo` fixture",
        "daemon(state='state', name=None, repository=None, **settings): the `daemon` fixture",
        "gated(files=None, **settings): the `gated` fixture's repository and settings",
    ):
        config.addinivalue_line("markers", line)


class Serve(Protocol):
    def __call__(
        self,
        repositories: Mapping[str, Path | RepositoryConfig],
        state: str = "state",
        **settings: Any,
    ) -> Daemon: ...


class Spawn(Protocol):
    def __call__(
        self, repositories: dict[str, Path], state: str = "state", **options: Any
    ) -> DaemonProcess: ...


class Gated(NamedTuple):
    """A repository whose every promotion awaits the operator's approval, and its daemon."""

    daemon: Daemon
    repo: Path
    identity: str


def _mark(request: pytest.FixtureRequest, name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    mark = request.node.get_closest_marker(name)
    return (mark.args, dict(mark.kwargs)) if mark else ((), {})


@pytest.fixture
def repos(tmp_path: Path) -> Repos:
    return Repos(tmp_path)


@pytest.fixture
def repo(request: pytest.FixtureRequest, repos: Repos) -> Path:
    args, kwargs = _mark(request, "repo")
    shape = kwargs.pop("shape", None)
    if callable(shape):  # the module's own shape, made at the test's ``work`` (or ``name``)
        made: Path = shape(repos.root / kwargs.pop("name", "work"), *args, **kwargs)
        return made
    return getattr(repos, shape or "__call__")(*args, **kwargs)  # type: ignore[no-any-return]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    with ExitStack() as stack:

        def start(
            repositories: Mapping[str, Path | RepositoryConfig],
            state: str = "state",
            **settings: Any,
        ) -> Daemon:
            return stack.enter_context(
                running_daemon(tmp_path / state, dict(repositories), **settings)
            )

        yield start


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    started: list[DaemonProcess] = []

    def start(repositories: dict[str, Path], state: str = "state", **options: Any) -> DaemonProcess:
        started.append(DaemonProcess(tmp_path / state, repositories, **options))
        return started[-1]

    try:
        yield start
    finally:
        for process in started:
            process.kill()


@pytest.fixture
def daemon(request: pytest.FixtureRequest, serve: Serve, repo: Path) -> Daemon:
    _, settings = _mark(request, "daemon")
    state = settings.pop("state", "state")
    name = settings.pop("name", None) or repo.name
    repository = RepositoryConfig(path=repo, **settings.pop("repository", {}))
    return serve({name: repository}, state, **settings)


@pytest.fixture
def identity(daemon: Daemon, repo: Path) -> str:
    return daemon.services.registry.by_name(repo.name).identity


def under_gate(
    repos: Repos,
    serve: Serve,
    files: Mapping[str, bytes] | None = None,
    *,
    where: str = "gated",
    name: str = "gated",
    state: str = "gstate",
    **settings: Any,
) -> Gated:
    """Repository ``where`` under the approval gate, served as ``name`` from ``state``."""
    repo = repos(where, files)
    config = RepositoryConfig(path=repo, approval="required")
    daemon = serve({name: config}, state, **settings)
    return Gated(daemon, repo, daemon.services.registry.by_name(name).identity)


@pytest.fixture
def gated(request: pytest.FixtureRequest, repos: Repos, serve: Serve) -> Gated:
    args, settings = _mark(request, "gated")
    return under_gate(repos, serve, *args, **settings)


@pytest.fixture
def bwrap() -> str:
    return bubblewrap.required()
