"""Running the app under uvicorn and announcing the bound address once ready.

``ReadyServer`` sets ``ready`` (a ``threading.Event``) and records the bound port after
uvicorn has started listening, so callers (``promoter serve``, tests) synchronize on an
event or on the announcement line instead of polling. uvicorn's own logging set-up and
access line are off: ``promoter serve`` configures logging once, and
``promoter.api.observe`` writes the access line. ``listen`` binds the daemon's socket
before anything else starts, so a taken port is refused before a migration or a key is
published (``AddressInUse``); ``on_ready`` runs once the server listens, before the
announcement. The server parses with httptools, its connections bounded on the client's
side (a request's head and body within their deadlines, at most a cap of them, counted
as they are accepted: ``promoter.api.connections``).
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import anyio
import uvicorn

from promoter.api.connections import BoundedHttpToolsProtocol, ClientBounds, bounded_protocol, gated
from promoter.engine.fencing import publish_address
from promoter.errors import AddressInUse, ConfigError

# seconds a connection may stay idle before the daemon closes it (uvicorn's default, named:
# a client reuses an idle connection for well under it, ``promoter.client.direct``)
KEEP_ALIVE_SECONDS = 5


class ReadyServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        *,
        announce: bool = False,
        on_exit: Callable[[], None] | None = None,
        on_ready: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._on_exit = on_exit
        self._on_ready = on_ready
        self.ready = threading.Event()
        self.port: int | None = None
        self._announce = announce

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._on_exit is not None:
            self._on_exit()  # tell running attempts first, then shut down gracefully
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        protocol = self.config.http
        if isinstance(protocol, type) and issubclass(protocol, BoundedHttpToolsProtocol):
            # its connections counted as they are accepted (``promoter.api.connections``)
            if sockets is None:
                sockets = [listen(self.config.host, self.config.port)]
            sockets = [gated(sock, protocol.gate) for sock in sockets]
        await super().startup(sockets)
        if self.should_exit:
            return
        for server in self.servers:
            for sock in server.sockets:
                self.port = int(sock.getsockname()[1])
                break
        state = getattr(self.config.app, "state", None)
        services = getattr(state, "services", None)
        if services is not None:  # this host's address, published in the ledger
            address = services.settings.public_url or f"http://{self.config.host}:{self.port}"
            services.host.address = address.rstrip("/")
            await anyio.to_thread.run_sync(publish_address, services, services.host.address)
        if self._on_ready is not None:
            self._on_ready(f"http://{self.config.host}:{self.port}")
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
    on_ready: Callable[[str], None] | None = None,
    server_type: type[ReadyServer] = ReadyServer,
    bounds: ClientBounds | None = None,
) -> ReadyServer:
    """The daemon's server; ``bounds``: the client's side of its connections
    (``promoter.api.connections``; the cap is taken from the open-file limit now in force,
    so a caller raises it first), its closes counted on the app's metrics."""
    metrics = getattr(getattr(app, "state", None), "metrics", None)
    closed = getattr(metrics, "connections_closed", None)  # counted there, when the app has it
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=None,  # the caller configures logging (``promoter.api.logs.configure``)
        access_log=False,  # ``promoter.access`` writes one richer line per request
        lifespan="on",
        # httptools (C parsing: a third of a small request's CPU under h11), its client's
        # side bounded
        http=bounded_protocol(bounds or ClientBounds(), closed),
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=10,
    )
    return server_type(config, announce=announce, on_exit=on_exit, on_ready=on_ready)


# set by the Makefile's ``serve``: a taken port is then chosen with ``make serve PORT=N``
STARTED_BY = "PROMOTER_STARTED_BY"
_OTHER_PORT = {
    "make": "stop it, or start it with make serve PORT=N, or PORT=0 for any free port",
}


def listen(host: str, port: int) -> socket.socket:
    """The daemon's listening socket on ``host``:``port``, bound now (port 0: any free one).

    A port another process holds is ``AddressInUse``, whose detail names how to choose
    another: ``--port N``, or ``make serve PORT=N`` when the Makefile started the daemon
    (``PROMOTER_STARTED_BY=make``); an address this machine does not have, or may not
    bind, is ``ConfigError``. Nothing else has started when either is raised.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r} is not an address of this machine: {exc}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not SO_REUSEPORT
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            other = _OTHER_PORT.get(
                os.environ.get(STARTED_BY, ""),
                "stop it, or pass --port N, or --port 0 for any free port",
            )
            raise AddressInUse(
                f"{host}:{port} is in use by another process; nothing was started ({other})",
                host=host,
                port=port,
            ) from exc
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(False)
    return sock
