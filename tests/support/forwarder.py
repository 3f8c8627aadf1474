"""A TCP forwarder on loopback between one daemon and PostgreSQL: a partition on one machine.

``Forwarder(port)`` listens on a free port of 127.0.0.1 and pipes every connection it
accepts to ``127.0.0.1:port`` (one thread a direction); ``url(database_url)`` is that
URL sent through it. A daemon given that URL reaches the ledger only through the
forwarder, so the test can take the database away from that host alone while the
others keep it:

- ``pause()``: no byte moves either way; what is sent waits (in the kernel's buffers) and
  new connections wait to be passed on: a link that stalls. ``heal()`` lets it all go on.
- ``cut("reset")``: every connection is reset toward the daemon (a TCP RST: ``SO_LINGER``
  0) and closed toward the server, which ends its sessions (their transactions rolled
  back, their locks released); a new connection is reset as soon as it is accepted.
- ``cut("drop")``: a black hole. The server side is closed at once (as the server's own
  keepalive would end it after a partition); the daemon's side stays open and silent:
  what it sends is swallowed, nothing ever answers, a new connection is accepted and
  never answered. The daemon waits until its own timeouts say otherwise.
- ``heal()``: new connections pass again. A connection that was dropped is reset then,
  as the server's answer to its first packet after a partition heals would be.

Every change is synchronous: when ``pause``, ``cut`` or ``heal`` returns, no byte is in
flight through the forwarder, the connections it ended are ended, and every byte after it
follows the new state. Nothing here waits for time: the test drives each change, and
waits on what the forwarder counts (``until_swallowed``: bytes the black hole took;
``until_stalled``: sends and connections the pause held), bounded so that a broken test
fails instead of hanging.

Deliberately not here: which daemon uses it (the URL the test gives it), slowing a link
by a delay, any address but loopback.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

from sqlalchemy.engine import make_url

__all__ = ["Forwarder"]

OPEN, PAUSED, RESET, DROPPED = "open", "paused", "reset", "dropped"
_LOOPBACK = "127.0.0.1"
_CHUNK = 1 << 16
_BOUND = 60.0  # seconds a change may take before the test fails instead of hanging


@dataclass(eq=False)
class _Link:
    """One daemon connection and its server connection (None: never connected)."""

    client: socket.socket
    server: socket.socket | None
    dead: bool = False  # cut or ended: no byte of it is passed on any more
    ended: bool = False  # ended by the server: the daemon is told with a FIN, not a reset
    client_closed: bool = False
    server_closed: bool = False
    threads: list[threading.Thread] = field(default_factory=list)


class Forwarder:
    """Connections from a daemon to ``127.0.0.1:target_port``, which the test can pause,
    cut and heal; a context manager that closes it (every connection reset)."""

    def __init__(self, target_port: int) -> None:
        self.target = (_LOOPBACK, target_port)
        self._listener = socket.create_server((_LOOPBACK, 0))
        self.port = int(self._listener.getsockname()[1])
        self._cond = threading.Condition()
        self._state = OPEN
        self._inflight = 0  # sends begun under the open state and not yet done
        self._links: list[_Link] = []
        self._closing = False
        self.accepted = 0  # connections accepted, for the test to see that the daemon tried
        self.swallowed = 0  # bytes the black hole swallowed (``cut("drop")``)
        self.stalled = 0  # sends and new connections of the daemon the pause held
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    @classmethod
    def to(cls, database_url: str) -> Forwarder:
        """A forwarder to the server of ``database_url`` (on loopback)."""
        parsed = make_url(database_url)
        assert parsed.host in (_LOOPBACK, "localhost"), "loopback only"
        return cls(parsed.port or 5432)

    def url(self, database_url: str) -> str:
        """``database_url`` sent through this forwarder."""
        parsed = make_url(database_url).set(host=_LOOPBACK, port=self.port)
        return parsed.render_as_string(hide_password=False)

    @property
    def state(self) -> str:
        return self._state

    def until_stalled(self, more_than: int) -> None:
        """Wait until the pause held more than ``more_than`` sends or new connections of
        the daemon (bounded)."""
        with self._cond:
            self._until(lambda: self.stalled > more_than)

    def until_swallowed(self, more_than: int) -> None:
        """Wait until the black hole swallowed more than ``more_than`` bytes: the daemon
        sent something into the partition (bounded)."""
        with self._cond:
            self._until(lambda: self.swallowed > more_than)

    # -- the test's changes ----------------------------------------------------------------

    def pause(self) -> None:
        with self._cond:
            self._state = PAUSED
            self._settle()

    def cut(self, how: Literal["reset", "drop"]) -> None:
        with self._cond:
            self._state = RESET if how == "reset" else DROPPED
            links = [link for link in self._links if not link.dead]
            for link in links:
                link.dead = True
                if link.server is not None:
                    _shut(link.server, socket.SHUT_RDWR)  # the server ends the session
                if how == "reset":
                    _shut(link.client, socket.SHUT_RD)  # wakes its reader, which resets it
            self._cond.notify_all()
            self._settle()
            self._until(
                lambda: all(
                    (link.server is None or link.server_closed)
                    and (how == "drop" or link.client_closed)
                    for link in links
                )
            )

    def heal(self) -> None:
        with self._cond:
            self._state = OPEN
            dropped = [link for link in self._links if link.dead and not link.client_closed]
            for link in dropped:
                _shut(link.client, socket.SHUT_RD)  # its reader resets it
            self._cond.notify_all()
            self._until(lambda: all(link.client_closed for link in dropped))

    def close(self) -> None:
        with self._cond:
            self._closing = True
        self.cut("reset")
        # wake the acceptor, which sees ``_closing`` and ends
        with socket.create_connection((_LOOPBACK, self.port)):
            pass
        self._acceptor.join(_BOUND)
        self._listener.close()
        with self._cond:
            threads = [t for link in self._links for t in link.threads]
        for thread in threads:
            thread.join(_BOUND)

    def __enter__(self) -> Forwarder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- inside ----------------------------------------------------------------------------

    def _until(self, done: object) -> None:
        """Wait (holding ``_cond``) until ``done()``; bounded, so a broken test fails."""
        assert callable(done)
        if not self._cond.wait_for(done, _BOUND):
            raise AssertionError(f"the forwarder did not settle ({self._state})")

    def _settle(self) -> None:
        """Wait until no send begun under the open state is still going."""
        self._until(lambda: self._inflight == 0)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                with self._cond:
                    if self._closing:  # the listener went away under a closing forwarder
                        return
                raise
            with self._cond:
                if self._closing:
                    _reset(client)
                    return
                self.accepted += 1
                if self._state == PAUSED:
                    self.stalled += 1
                    self._cond.notify_all()
                self._cond.wait_for(lambda: self._state != PAUSED or self._closing)
                state = self._state
            if state == RESET or self._closing:
                _reset(client)
                continue
            server = None
            if state == OPEN:
                try:
                    server = socket.create_connection(self.target)
                except OSError:
                    _reset(client)  # the server itself is gone: as it would answer
                    continue
            link = _Link(client, server, dead=server is None)
            with self._cond:
                self._links.append(link)
                link.threads = [threading.Thread(target=self._up, args=(link,), daemon=True)]
                if server is not None:
                    link.threads.append(
                        threading.Thread(target=self._down, args=(link,), daemon=True)
                    )
            for thread in link.threads:
                thread.start()

    def _up(self, link: _Link) -> None:
        """The daemon's bytes to the server; this thread alone closes the daemon's side."""
        while True:
            data = _recv(link.client)
            with self._cond:
                if self._state == PAUSED and not link.dead:
                    self.stalled += 1
                    self._cond.notify_all()
                self._cond.wait_for(lambda: self._state != PAUSED or link.dead)
                if link.dead:
                    if data and self._state == DROPPED and not link.ended:
                        self.swallowed += len(data)  # the black hole swallows it
                        self._cond.notify_all()
                        continue
                    if link.ended:
                        link.client.close()
                    else:
                        _reset(link.client)
                    link.client_closed = True
                    self._cond.notify_all()
                    return
                if not data:  # the daemon closed it: pass the end on
                    link.dead = True
                    link.client.close()
                    link.client_closed = True
                    if link.server is not None:
                        _shut(link.server, socket.SHUT_RDWR)
                    self._cond.notify_all()
                    return
                self._inflight += 1
            assert link.server is not None
            try:
                link.server.sendall(data)
            except OSError:
                pass  # the server side ended: its reader says so
            finally:
                with self._cond:
                    self._inflight -= 1
                    self._cond.notify_all()

    def _down(self, link: _Link) -> None:
        """The server's bytes to the daemon; this thread alone closes the server's side."""
        assert link.server is not None
        while True:
            data = _recv(link.server)
            with self._cond:
                self._cond.wait_for(lambda: self._state != PAUSED or link.dead)
                if link.dead or not data:
                    if not link.dead:  # the server ended it: the daemon is told the same
                        link.dead = link.ended = True
                        _shut(link.client, socket.SHUT_RDWR)  # a FIN; wakes its reader
                    link.server.close()
                    link.server_closed = True
                    self._cond.notify_all()
                    return
                self._inflight += 1
            try:
                link.client.sendall(data)
            except OSError:
                pass  # the daemon's side ended: its reader says so
            finally:
                with self._cond:
                    self._inflight -= 1
                    self._cond.notify_all()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(_CHUNK)
    except OSError:
        return b""


def _shut(sock: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):  # not connected any more
        sock.shutdown(how)


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset (no FIN, unsent bytes dropped)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
