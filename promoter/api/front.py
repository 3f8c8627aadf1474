"""The daemon's one ASGI layer in front of its routes: every request's checks, in order.

``FrontDoor`` does, per HTTP request and in this order, what four layers did before:

1. the request id: the client's ``X-Request-ID`` when it is short and plain
   (``promoter.api.logs.safe_request_id``), else a fresh one, set in ``REQUEST_ID`` and
   echoed on the answer;
2. ``GET /healthz``, answered here with the route's own bytes (``observe.Recorder.alive``);
3. the ``Host`` allowlist (``promoter.api.hosts``): a refusal is answered ``421`` and is
   counted and logged like any answer;
4. the admission of costly reads (``promoter.api.admission``), once the ``Host`` passed;
5. the app (routing, dependencies, the route), whose answer is watched on its way out:
   its status, a small JSON answer's fields and the body bytes received, for the metrics
   and the one ``promoter.access`` line (``observe.Recorder``), written before the
   answer's last byte is sent, or when the app raised (the id stays set then, so the
   outer error handler's line carries it too).

With the debug switch on (``promoter.api.phases``), a promotion request's time by phase
is logged too. A websocket request passes the ``Host`` check only; lifespan messages go straight on.
Starlette's own outer error handler and inner exception handlers stay where they are.
Deliberately not here: what each check decides (the modules named above), bodies and
authentication of other routes (``promoter.api.deps``).
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from promoter.api import phases
from promoter.api.admission import Admission
from promoter.api.hosts import HostAllowlist
from promoter.api.logs import REQUEST_ID, safe_request_id
from promoter.api.observe import Recorder, Seen
from promoter.api.routes.health import HEALTHZ

_REQUEST_ID = b"x-request-id"


class FrontDoor:
    def __init__(
        self, app: ASGIApp, *, recorder: Recorder, hosts: HostAllowlist, admission: Admission
    ) -> None:
        self.app = app
        self.recorder = recorder
        self.hosts = hosts
        self.admission = admission
        self.phases = phases.install()  # the debug switch: a promotion's phases logged

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http":
            if kind == "websocket" and not self.hosts.permits(scope):
                await self.hosts.refuse(scope, send)
                return
            await self.app(scope, receive, send)
            return
        offered = None
        for name, value in scope["headers"]:
            if name == _REQUEST_ID:
                offered = value.decode("latin-1")
                break
        request_id = safe_request_id(offered)
        echoed = (_REQUEST_ID, request_id.encode())
        reset = REQUEST_ID.set(request_id)
        started = time.perf_counter()
        if scope["path"] == HEALTHZ and scope["method"] == "GET":
            await self.recorder.alive(scope, send, request_id, started)
            REQUEST_ID.reset(reset)
            return
        seen = Seen()
        recorded = False
        clock = (
            phases.start()
            if self.phases and scope["method"] == "POST" and scope["path"] in phases.PATHS
            else None
        )

        def record() -> None:  # once, before the last byte goes out: the line precedes the answer
            nonlocal recorded
            if not recorded:
                recorded = True
                self.recorder.record(scope, seen, time.perf_counter() - started)
                if clock is not None:
                    phases.finish(clock, scope["path"])

        async def counted_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen.received += len(message.get("body", b""))
            return message

        async def observed_send(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.body":
                seen.sent(message.get("body", b""))
                if not message.get("more_body", False):
                    record()
            elif kind == "http.response.start":
                seen.started(message)
                message = {**message, "headers": [*message.get("headers", ()), echoed]}
            await send(message)

        try:
            if self.hosts.permits(scope):
                await self.admission(self.app, scope, counted_receive, observed_send)
            else:
                await self.hosts.refuse(scope, observed_send)
        except BaseException:
            record()  # the id stays set: the outer error handler's line carries it too
            raise
        record()
        REQUEST_ID.reset(reset)
