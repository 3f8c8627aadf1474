"""A real promoter daemon for tests: uvicorn on a free loopback port, in a thread.

The server is started with port 0 and the test synchronizes on ``ReadyServer.ready``;
requests go through httpx over real TCP. Crash tests use ``tests.support.process``.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from promoter.adapters.webhooks import daemon_services
from promoter.api.app import create_app
from promoter.api.connections import ClientBounds
from promoter.api.server import ReadyServer, make_server
from promoter.client.wire import pool_limits, tls_context
from promoter.config import RepositoryConfig, load_settings
from promoter.engine.services import Services


class PromptServer(ReadyServer):
    """uvicorn as the daemon runs it, but stopping at once when a test is done with it.

    uvicorn looks at ``should_exit`` every 0.1 s and, once out, waits a fixed 0.1 s for
    the connections it told to close: 0.15 s on average for every test that starts a
    daemon, spent waiting. A test sets ``should_exit`` from its own thread after closing
    its clients, so this server looks every 5 ms and, when no connection is open, goes
    straight to uvicorn's own wait for tasks and the lifespan's shutdown. With a
    connection still open it shuts down exactly as uvicorn does.
    """

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            await asyncio.sleep(0.005)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.server_state.connections or sockets:
            await super().shutdown(sockets)
            return
        for server in self.servers:
            server.close()
        await self._wait_tasks_to_complete()
        if not self.force_exit:
            await self.lifespan.shutdown()


@dataclass
class Daemon:
    url: str
    services: Services
    state_dir: Path
    app: FastAPI  # its routes: what a test enumerates (``tests/integration``)

    @property
    def orchestrator_token(self) -> str:
        return self.services.tokens["orchestrator"]

    @property
    def operator_token(self) -> str:
        return self.services.tokens["operator"]

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=60,
            verify=tls_context(self.url),
            limits=pool_limits(),  # idle connections reused well inside the keep-alive
        )

    def orchestrator(self) -> httpx.Client:
        return self.client(self.orchestrator_token)

    def operator(self) -> httpx.Client:
        return self.client(self.operator_token)

    def executor(self, run_id: str, ttl: int = 3600) -> httpx.Client:
        with self.orchestrator() as client:
            answer = client.post(
                "/v1/executor-tokens", json={"executor_run_id": run_id, "ttl_seconds": ttl}
            )
            assert answer.status_code == 201, answer.text
            return self.client(answer.json()["token"])


@contextmanager
def running_daemon(
    state_dir: Path,
    repositories: dict[str, Path | RepositoryConfig],
    *,
    primary: bool = True,
    **settings: Any,
) -> Iterator[Daemon]:
    """A daemon served in this process; ``primary=False``: as a worker of ``serve
    --workers N`` other than the first (no recovery scan, no webhook dispatcher)."""
    repos = {
        name: value if isinstance(value, RepositoryConfig) else RepositoryConfig(path=value)
        for name, value in repositories.items()
    }
    # the start-up rehearsal only saves the first promotion its statement compiling; a
    # test of it asks for it (tests/api/test_rehearsal.py), the others start sooner
    settings.setdefault("rehearse_at_start", False)
    config = load_settings(None, state_dir=state_dir, repositories=repos, **settings)
    services = daemon_services(config)
    app = create_app(config, services, primary=primary)
    server = make_server(
        app, "127.0.0.1", 0, server_type=PromptServer, bounds=ClientBounds.of(config)
    )
    thread = threading.Thread(target=server.run, name="promoter-test-server", daemon=True)
    thread.start()
    try:
        if not server.ready.wait(30):
            raise RuntimeError("the test daemon did not start")
        yield Daemon(f"http://127.0.0.1:{server.port}", services, state_dir, app)
    finally:
        # as a signal stops ``promoter serve`` (its ``on_exit``): waits end at their next
        # re-check, not at uvicorn's graceful-shutdown bound (``timeout_graceful_shutdown``)
        services.stopping.set()
        server.should_exit = True
        thread.join(30)
        services.close()


def serve_lab(tmp_path: Path, repo: Path, **config: Any) -> Iterator[Daemon]:
    """A daemon serving ``repo`` as repository ``lab`` with ``config``; iterate once to use."""
    with running_daemon(
        tmp_path / "state", {"lab": RepositoryConfig(path=repo, **config)}
    ) as daemon:
        yield daemon
