"""Running the app under uvicorn and announcing the bound address once ready.

``ReadyServer`` sets ``ready`` (a ``threading.Event``) and records the bound port after
uvicorn has started listening, so callers (``promoter serve``, tests) synchronize on an
event or on the announcement line instead of polling. uvicorn's own logging set-up and
access line are off: ``promoter serve`` configures logging once, and
``promoter.api.observe`` writes the access line.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn


class ReadyServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        *,
        announce: bool = False,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._on_exit = on_exit
        self.ready = threading.Event()
        self.port: int | None = None
        self._announce = announce

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._on_exit is not None:
            self._on_exit()  # tell running attempts first, then shut down gracefully
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:
            return
        for server in self.servers:
            for sock in server.sockets:
                self.port = int(sock.getsockname()[1])
                break
        state = getattr(self.config.app, "state", None)
        services = getattr(state, "services", None)
        if services is not None:  # this host's address, for ``GET /v1/hosts``
            services.host.address = f"http://{self.config.host}:{self.port}"
        if self._announce:
            print(
                f"promoter: ready on http://{self.config.host}:{self.port}",
                file=sys.stderr,
                flush=True,
            )
        self.ready.set()


def make_server(
    app: Any,
    host: str,
    port: int,
    *,
    log_level: str = "warning",
    announce: bool = False,
    on_exit: Callable[[], None] | None = None,
    server_type: type[ReadyServer] = ReadyServer,
) -> ReadyServer:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=None,  # the caller configures logging (``promoter.api.logs.configure``)
        access_log=False,  # ``promoter.access`` writes one richer line per request
        lifespan="on",
        http="httptools",  # C parsing: a third of a small request's CPU under h11
        timeout_graceful_shutdown=10,
    )
    return server_type(config, announce=announce, on_exit=on_exit)
