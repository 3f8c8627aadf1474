"""The client's side of a connection, bounded: its request's head and body, its taking of
the answer, and how many.

uvicorn closes a connection idle between requests (``KEEP_ALIVE_SECONDS``), but nothing
of its own bounds a request that never ends: a process that opens connections and sends
a byte of a head every few seconds held each of them for ever, until the daemon's
descriptors ran out and its own files (journal, blobs, ledger) could not be opened.
``bounded_protocol`` makes uvicorn's httptools protocol with three deadlines and a cap:

- the head: a connection that has not completed its request's head within
  ``head_seconds`` of opening, or of the daemon's last answer on it, is closed;
- the body: a request's body silent for ``body_silence_seconds`` while the daemon reads
  it is closed (the route sees the connection gone: ``bad_request``, logged as such);
- the drain: an answer the client takes none of for ``drain_silence_seconds`` is closed
  (reset: what the kernel still holds for it is dropped). It is timed while the daemon
  waits on the client: writing paused (the transport's buffer past its high mark, so
  uvicorn's next ``send`` and the route's task wait for room), or bytes left unsent once
  the answer is complete (a closing transport waits for them for ever). Bytes taken
  within a bound time it again (a cut comes one to two bounds after the last byte
  taken), so a client that reads slowly but steadily is never cut;
- the cap: at most ``connection_cap`` connections are open, counted as they are
  accepted (``Gate``, ``GatedListener``: asyncio accepts a whole batch before any
  protocol is made). One past it closes the one silent the longest of those whose
  request is not yet whole (its head or body still coming, a pipelined request's too
  once the answer before it ended, or idle between requests, or accepted and its
  protocol not yet made: ``Seat``): the longest since its last byte
  received, or since the daemon last let it send (its accept, an answer's end, reading
  resumed) if later. An upload that keeps sending is never chosen while a silent
  connection is open, however old it is; nor is a client waiting for a ``100 Continue``
  (its reading paused until the route asks for the body). While those close (a few,
  ``slack``), or when every connection carries a request the daemon is answering or has
  stopped reading, a new one is closed as soon as it is accepted.

Every close of these is counted on ``/metrics`` by its reason (``Closes``: ``head``,
``body``, ``make_room``, ``at_accept``, ``drain``), a deadline's logged at info, and the
cap's at warning at most once every ``CAP_EVERY`` seconds, saying how many it closed
since.

Besides the drain, only the client's turn is timed: from the connection's opening or the
last answer taken until its request's body is in. The daemon's turn (a promotion's
``wait`` of up to 600 s, a route that has not yet read the body, a ``100 Continue`` not
yet sent, reading paused while a route catches up or a pipelined request waits) is never
cut. A cut is a plain close, not a 408: a client that stopped sending may well have
stopped reading, and an answer it never takes would hold the descriptor in the write
buffer.

Not here: a minimum rate of a body's bytes or of an answer's reading (a drip inside its
bound holds its connection until the cap needs it, or the answer ends), the kernel's
listen backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import struct
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from promoter.api import logs

if TYPE_CHECKING:
    from prometheus_client import Counter

log = logging.getLogger("promoter.api.connections")

HEAD = "head"
BODY = "body"
MAKE_ROOM = "make_room"  # closed at the cap, the silent longest not yet whole, for a new one
AT_ACCEPT = "at_accept"  # closed at the cap as soon as accepted: no room could be made
DRAIN = "drain"  # the client took none of its answer in time
REASONS = (HEAD, BODY, MAKE_ROOM, AT_ACCEPT, DRAIN)
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: a close resets, the unsent dropped
CAP_EVERY = 5.0  # seconds at least between two lines of the cap's closes


@dataclass(frozen=True)
class ClientBounds:
    """``head_seconds``: from a connection's opening or last answer to its request's head;
    ``body_silence_seconds``: the longest a body being read may stay silent;
    ``drain_silence_seconds``: the longest an answer may wait with none of it taken;
    ``max_connections``: the most open at once (``connection_cap`` lowers it)."""

    head_seconds: float = 30.0
    body_silence_seconds: float = 30.0
    drain_silence_seconds: float = 30.0
    max_connections: int = 1024

    @classmethod
    def of(cls, settings: Any) -> ClientBounds:
        return cls(
            head_seconds=settings.request_head_seconds,
            body_silence_seconds=settings.request_body_silence_seconds,
            drain_silence_seconds=settings.response_drain_silence_seconds,
            max_connections=settings.max_connections,
        )


def connection_cap(max_connections: int) -> int:
    """The connections a daemon serves at once: ``max_connections``, and never more than
    half its soft open-file limit, so that the other half stays for its own files."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, soft // 2))


def _uncounted() -> None:
    pass


class Closes:
    """The connections one server closed, by reason: counted on ``counter`` (the daemon's
    ``promoter_connections_closed_total``, each reason's child looked up once), and those
    closed at the cap logged on ``promoter.api.connections`` at warning: the first at
    once, then at most one line every ``CAP_EVERY`` seconds, saying how many were closed
    since the last line (a flood is a line a while, not a line a connection)."""

    def __init__(
        self, cap: int, counter: Counter | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._cap = cap
        self._clock = clock
        self._count: dict[str, Callable[[], None]] = {
            reason: _uncounted if counter is None else counter.labels(reason).inc
            for reason in REASONS
        }
        self._said_at: float | None = None  # when the cap's last line was logged
        self._room = self._accept = 0  # closed at the cap since that line

    def closed(self, reason: str) -> None:
        """A connection was closed for ``reason`` (one of ``REASONS``)."""
        self._count[reason]()
        if reason == MAKE_ROOM:
            self._room += 1
        elif reason == AT_ACCEPT:
            self._accept += 1
        else:
            return
        now = self._clock()
        if self._said_at is not None and now - self._said_at < CAP_EVERY:
            return
        since = "" if self._said_at is None else " since the last line"
        room, accept = self._room, self._accept
        self._said_at, self._room, self._accept = now, 0, 0
        logs.event(
            log,
            f"at the cap of {self._cap} connections: closed {room} to make room and "
            f"{accept} at accept{since}",
            logging.WARNING,
            cap=self._cap,
            make_room=room,
            at_accept=accept,
        )


class Seat:
    """One connection's place in its gate, from its accept: its protocol is made a turn of
    the loop later (``connection``), and that protocol's connection a turn after that.
    Closed to make room in between, it is aborted as soon as its connection is made."""

    __slots__ = ("closed", "connection")

    def __init__(self) -> None:
        # weak, as the gate's ``open``: a protocol whose transport failed to start is gone
        self.connection: weakref.ref[BoundedHttpToolsProtocol] | None = None
        self.closed = False

    def close(self) -> None:
        """Closed to make room: at once if its connection is made, else when it is."""
        self.closed = True
        connection = None if self.connection is None else self.connection()
        if connection is not None and connection.transport is not None:
            connection.close()


class Gate:
    """The connections of one server, counted from their accept to their loss: at most
    ``cap`` held, and ``slack`` more while the ones closed to make room go; ``closes``
    counts those it closes.

    ``waiting`` holds the seats of the connections in the client's turn whose reading is
    not paused, the one silent the longest first: a seat enters at the back at its
    accept (a batch is accepted before any of its protocols is made: those are silent
    too), and again when a turn of the client begins or its reading resumes; it moves to
    the back at each read of its bytes (``heard``: a lookup and a move, no clock), and
    leaves when the daemon's turn begins or its connection is lost. The order is that of
    the events themselves, so no two are tied, and those that sent nothing are in the
    order they were accepted. Choosing is taking the front: O(1)."""

    def __init__(self, cap: int, closes: Closes | None = None) -> None:
        self.cap = cap
        self.closes = closes or Closes(cap)
        self.slack = max(1, cap // 8)
        self.accepted: deque[Seat] = deque()  # accepted, their protocol not yet made
        # made, not yet lost (weak: a protocol whose transport failed to start is gone)
        self.open: weakref.WeakSet[BoundedHttpToolsProtocol] = weakref.WeakSet()
        self.waiting: OrderedDict[Seat, None] = OrderedDict()

    def heard(self, connection: BoundedHttpToolsProtocol) -> None:
        """Bytes of ``connection`` read: if it is waiting, it is now the least silent."""
        if connection.seat in self.waiting:
            self.waiting.move_to_end(connection.seat)

    def admit(self) -> bool:
        """Whether a connection just accepted may stay (room made for it when needed)."""
        held = len(self.accepted) + len(self.open)
        if held >= self.cap:
            if held >= self.cap + self.slack or not self.waiting:
                return False
            self.waiting.popitem(last=False)[0].close()
            self.closes.closed(MAKE_ROOM)
        seat = Seat()
        self.accepted.append(seat)
        self.waiting[seat] = None
        return True

    def made(self, connection: BoundedHttpToolsProtocol) -> Seat:
        """``connection``'s protocol made: its seat, the next accepted (asyncio makes them
        in the order it accepted them), counted as open from now."""
        seat = self.accepted.popleft() if self.accepted else Seat()  # else: not through a gate
        seat.connection = weakref.ref(connection)
        self.open.add(connection)
        return seat


class GatedListener(socket.socket):
    """A listening socket whose accepts pass its server's ``Gate``: a connection it does
    not admit is closed at once (asyncio's loop never sees it)."""

    gate: Gate

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            conn, address = super().accept()  # BlockingIOError: none left
            if self.gate.admit():
                return conn, address
            conn.close()
            self.gate.closes.closed(AT_ACCEPT)


def gated(sock: socket.socket, gate: Gate) -> GatedListener:
    """``sock``'s descriptor as a ``GatedListener`` (``sock`` is left detached)."""
    listener = GatedListener(sock.family, sock.type, sock.proto, fileno=sock.detach())
    listener.gate = gate
    return listener


class _Flow(FlowControl):
    """uvicorn's flow control of one connection, which leaves its gate's ``waiting`` while
    its reading is paused (a body the route has not yet taken or asked for, a pipelined
    request: the daemon's delay, not the client's silence) and comes back at the back
    when it resumes."""

    def __init__(self, transport: asyncio.Transport, connection: BoundedHttpToolsProtocol):
        super().__init__(transport)
        self._connection = connection

    def pause_reading(self) -> None:
        super().pause_reading()
        self._connection.gate.waiting.pop(self._connection.seat, None)

    def resume_reading(self) -> None:
        paused = self.read_paused
        super().resume_reading()
        connection = self._connection
        if paused and connection.clients_turn and not connection.transport.is_closing():
            connection.resumed()


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the client's side bounded (the module docstring).
    ``bounds`` and ``gate`` are set on the class ``bounded_protocol`` makes."""

    bounds = ClientBounds()
    gate = Gate(1024)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # made: counted as open from now (its connection is made a turn of the loop later)
        self.seat = self.gate.made(self)
        self._deadline: asyncio.TimerHandle | None = None
        self._timing: str | None = None  # HEAD or BODY while a deadline runs
        # from the opening or an answer's end until the request is whole (the gate's
        # ``waiting`` while its reading is not paused); False: the daemon's turn, or gone
        self.clients_turn = False
        self._drain: asyncio.TimerHandle | None = None  # while the daemon waits on the client
        self._unsent = 0  # bytes the transport held when the drain was last timed

    def close(self) -> None:
        """Closed to make room, at once (nothing buffered for it is sent)."""
        self._daemons_turn()
        self.transport.abort()

    # the turns

    def _arm(self, kind: str) -> None:
        self._disarm()
        seconds = self.bounds.head_seconds if kind == HEAD else self.bounds.body_silence_seconds
        self._deadline = self.loop.call_later(seconds, self._expired, kind)
        self._timing = kind

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
            self._timing = None

    def _clients_turn(self) -> None:
        self.clients_turn = True
        if not self.flow.read_paused:
            self.gate.waiting[self.seat] = None
            self.gate.waiting.move_to_end(self.seat)
        self._arm(HEAD)

    def _bodys_turn(self) -> None:
        """The answer before a pipelined request ended with that request's body still
        coming, and its reading resumed: the client's turn, like any body still coming
        (a candidate to close to make room, the least silent), its bound timed from now;
        or, its client waiting for a ``100 Continue``, paused again until the route asks
        for the body (``on_headers_complete``)."""
        self.clients_turn = True
        if self.cycle.waiting_for_100_continue:
            self.flow.pause_reading()
        elif not self.flow.read_paused:
            self.gate.waiting[self.seat] = None
            self.gate.waiting.move_to_end(self.seat)
        self._arm(BODY)

    def resumed(self) -> None:
        """Its reading resumed in the client's turn: the daemon lets it send from now (the
        least silent, a body's bound timed again)."""
        self.gate.waiting[self.seat] = None
        if self._timing == BODY:
            self._arm(BODY)

    def _daemons_turn(self) -> None:
        """The daemon's turn, or gone: not one to close to make room."""
        self.clients_turn = False
        self.gate.waiting.pop(self.seat, None)

    def _expired(self, kind: str) -> None:
        self._deadline = self._timing = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        daemons_turn = (
            self.flow.read_paused
            or self.transport.get_write_buffer_size() > 0  # an answer not yet taken: the drain's
            or (
                cycle is not None
                and not cycle.response_complete
                and (cycle.waiting_for_100_continue or (kind == BODY and cycle.response_started))
            )
        )
        if daemons_turn:  # not the client's delay: timed again from now
            self._arm(kind)
            return
        logs.event(
            log,
            f"{_peer(self.client)}: closed, its request's {kind} did not arrive in time",
            client=_peer(self.client),
            waited_for=kind,
        )
        self.gate.closes.closed(kind)
        self._daemons_turn()  # gone: not one to close again to make room
        self.transport.abort()

    # the drain

    def _time_drain(self) -> None:
        """Time the client's taking of the answer from now, while the daemon waits on it."""
        if self._drain is not None:
            self._drain.cancel()
            self._drain = None
        self._unsent = self.transport.get_write_buffer_size()
        if self._unsent or self.flow.write_paused:
            self._drain = self.loop.call_later(self.bounds.drain_silence_seconds, self._drained)

    def _drained(self) -> None:
        self._drain = None
        unsent = self.transport.get_write_buffer_size()
        cycle = self.cycle
        writing = cycle is not None and not cycle.response_complete and not self.flow.write_paused
        if not unsent or writing:  # all taken, or the route may write on: paused again if full
            return
        if unsent < self._unsent:  # some taken: timed again from now
            self._time_drain()
            return
        logs.event(
            log,
            f"{_peer(self.client)}: closed, it took none of its answer in "
            f"{self.bounds.drain_silence_seconds:g} s",
            client=_peer(self.client),
            waited_for=DRAIN,
        )
        self.gate.closes.closed(DRAIN)
        self._daemons_turn()  # gone: not one to close again to make room
        sock = self.transport.get_extra_info("socket")
        if sock is not None:  # nothing more of it sent: the kernel drops what it holds
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self.transport.abort()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._time_drain()  # the buffer past its high mark: the client is not keeping up

    def resume_writing(self) -> None:
        super().resume_writing()
        self._time_drain()  # taken down to the low mark: timed again, if any is left

    # uvicorn's protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = _Flow(transport, self)  # before any request's cycle is given it
        if self.seat.closed:  # closed to make room before its connection was made
            self.transport.abort()
            return
        self.clients_turn = True  # since its accept: its seat keeps its place in ``waiting``
        if self.seat not in self.gate.waiting:  # not accepted through a gate
            self.gate.waiting[self.seat] = None
        self._arm(HEAD)

    def data_received(self, data: bytes) -> None:
        self.gate.heard(self)  # before the parser: a request it completes is the daemon's
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._drain is not None:
            self._drain.cancel()
            self._drain = None
        self._daemons_turn()
        self.gate.open.discard(self)
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.waiting_for_100_continue and not self.flow.read_paused:
            # the client waits for the daemon: not read, not waiting, until the route asks
            # for the body (uvicorn's ``receive`` sends the ``100 Continue`` and resumes)
            self.flow.pause_reading()
        self._arm(BODY)  # disarmed at once by a request without a body

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        if self._timing == BODY:  # not the head's deadline of a request answered early
            self._arm(BODY)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm()  # the daemon's turn until it answers
            self._daemons_turn()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if self.transport.is_closing():
            pass
        elif not pipelined:
            self._clients_turn()
        elif self.cycle is not None and self.cycle.more_body:
            self._bodys_turn()  # reading resumed in a pipelined request's body
        if self.transport.get_write_buffer_size():  # its end still unsent, closing or not
            self._time_drain()  # from now: an answer added since the last pause is not silence


def _peer(client: tuple[str, int] | None) -> str:
    return "a client" if client is None else f"{client[0]}:{client[1]}"


def bounded_protocol(
    bounds: ClientBounds, closed: Counter | None = None
) -> type[BoundedHttpToolsProtocol]:
    """The protocol class one server runs, with its own ``Gate``: ``bounds``, and the cap
    of this process's open-file limit as it is now (raise it first: ``fd_limit``); the
    connections it closes counted on ``closed`` (``Metrics.connections_closed``)."""
    cap = connection_cap(bounds.max_connections)
    return type(
        "BoundedHttpToolsProtocol",
        (BoundedHttpToolsProtocol,),
        {"bounds": bounds, "gate": Gate(cap, Closes(cap, closed))},
    )
