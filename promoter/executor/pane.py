"""The sandboxed command's own pseudo-terminal, shown to the person through a filter.

``Pane`` makes a pseudo-terminal for ``promoter run``'s command
(protocol: runs#terminal-drawn-by-promoter): its stdout and stderr (and its stdin, when the person's
stdin is a terminal) are the pane's slave, sized like the person's terminal and resized with it; it
is the command's controlling terminal (``_CTTY_SHIM`` makes it so before the command is executed),
so ``/dev/tty`` and job control reach the pane, never the person's terminal. What the
command writes is read from the master and passed through
``promoter.executor.terminal.OutputFilter`` to promoter's stdout, a terminal or not; the
person's keystrokes are forwarded to the command while it runs (their terminal in
cbreak mode: no local echo or line editing, the pane does both; Ctrl-C, Ctrl-Z and
Ctrl-\\ still signal promoter). A stdin that is not a terminal (a pipe, a file,
``/dev/null``) is given to the command as it is.

The pump ends when the command has exited and every holder of the slave has closed it
(the caller's ``stop`` ends the command's process group first); a process outside the
group that keeps the slave open is given ``GRACE`` seconds, then the pane closes.

Deliberately not here: confinement (``promoter.executor.confine``), what counts as a
safe byte (``terminal.py``), a log file of the output, or a guard against an unconfined
command that opens the person's terminal device by its name (only confinement stops
that). bubblewrap's ``--new-session`` detaches a confined command from the pane's
session, so a confined command gets no ``SIGWINCH``; it reads the new size when it asks.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import tty
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType
from typing import Any

from promoter.executor.shims import FOLD
from promoter.executor.terminal import OutputFilter

__all__ = ["GRACE", "Pane"]

GRACE = 2.0  # seconds a process outside the command's group may hold the pane after it
_DEFAULT_SIZE = struct.pack("HHHH", 24, 80, 0, 0)
_PENDING_INPUT = 1 << 16  # keystrokes held for a command that is not reading
_READ = 1 << 16

# Run by the host's Python as the pane's session leader: the pane becomes its controlling
# terminal, then the command is executed; a failure to execute is reported on ``err``.
_CTTY_SHIM = (
    """\
import fcntl, os, sys, termios
err = int(sys.argv[1])
os.set_inheritable(err, False)
try:
    fcntl.ioctl(1, termios.TIOCSCTTY, 0)
except OSError:
    pass
"""
    + FOLD
    + """\
if is_shim(sys.argv[2:]):  # the next shim, in this interpreter (``shims.py``)
    run_shim(sys.argv[2:])
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    os.write(err, (exc.strerror or str(exc)).encode("utf-8", "replace"))
    os._exit(127)
"""
)


class Pane:
    """A pseudo-terminal for one command; use it as a context manager around the run."""

    def __init__(self) -> None:
        self._keys = 0 if os.isatty(0) else None  # the person's keystrokes, forwarded
        self._size_fd = next((fd for fd in (1, 0, 2) if os.isatty(fd)), None)
        self._filter = OutputFilter(ascii_only=not _utf8_locale())
        self._master, self._slave = -1, -1
        self._report_r, self._report_w = -1, -1
        self._report_number = -1  # the command's descriptor of ``_report_w``, kept when closed
        self._saved_mode: list[Any] | None = None
        self._saved_winch: Any = None
        self._out_broken = False

    def __enter__(self) -> Pane:
        self._master, self._slave = os.openpty()
        try:
            fcntl.ioctl(self._slave, termios.TIOCSWINSZ, self._size())
            if not os.isatty(1):  # a log or a pipe: lines end in "\n" as the command wrote
                attrs = termios.tcgetattr(self._slave)
                attrs[1] &= ~termios.ONLCR
                termios.tcsetattr(self._slave, termios.TCSANOW, attrs)
            os.set_blocking(self._master, False)
            self._report_r, self._report_w = os.pipe()
            self._report_number = self._report_w
            sys.stdout.flush()  # what promoter printed comes before the command's output
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._close()

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command`` behind the shim that makes the pane its controlling terminal."""
        python = getattr(sys, "_base_executable", None) or sys.executable
        return [python, "-I", "-S", "-c", _CTTY_SHIM, str(self._report_number), *command]

    def popen_args(self) -> dict[str, Any]:
        """The standard streams and the kept descriptor for ``subprocess.Popen``."""
        stdin = self._slave if self._keys is not None else None
        return {
            "stdin": stdin,
            "stdout": self._slave,
            "stderr": self._slave,
            "pass_fds": (self._report_w,),
            "start_new_session": True,
        }

    def handed(self) -> None:
        """After ``Popen``: the slave and the report's write end are the command's alone."""
        for name in ("_slave", "_report_w"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    def resized(self) -> None:
        """The pane sized like the person's terminal now (a command started early)."""
        self._resized(signal.SIGWINCH, None)

    def started(self) -> None:
        """Once the command is on its way: an exec failure is raised (``handed`` first)."""
        self.handed()
        chunks = []
        while chunk := os.read(self._report_r, 4096):
            chunks.append(chunk)
        if chunks:
            reason = b"".join(chunks).decode("utf-8", "replace")
            raise OSError(errno.ENOEXEC, reason)

    def pump(
        self, process: subprocess.Popen[bytes], timeout: float, stop: Callable[[], None]
    ) -> int:
        """Show the command's output until it ends; its exit status.

        ``subprocess.TimeoutExpired`` past ``timeout`` seconds (the caller ends it).
        """
        deadline = time.monotonic() + timeout
        with self._person_mode():
            exit_fd = _pidfd(process.pid)
            try:
                self._loop(process, deadline, timeout, exit_fd, stop)
            finally:
                if exit_fd is not None:
                    os.close(exit_fd)
        self._show(self._filter.finish())
        return process.wait()

    def _loop(
        self,
        process: subprocess.Popen[bytes],
        deadline: float,
        timeout: float,
        exit_fd: int | None,
        stop: Callable[[], None],
    ) -> None:
        pending = bytearray()
        reading, keys_open = True, self._keys is not None
        ended_at: float | None = None
        while reading or ended_at is None:
            now = time.monotonic()
            if ended_at is None and now >= deadline:
                raise subprocess.TimeoutExpired(process.args, timeout)
            if ended_at is not None and now >= ended_at + GRACE:
                return  # something outside the command's group holds the pane: closed
            wanted = [self._master] if reading else []
            if ended_at is None and exit_fd is not None:
                wanted.append(exit_fd)
            if keys_open and len(pending) < _PENDING_INPUT and ended_at is None:
                wanted.append(0)
            writable = [self._master] if pending and reading and ended_at is None else []
            limit = (deadline if ended_at is None else ended_at + GRACE) - now
            if exit_fd is None and ended_at is None:
                limit = min(limit, 0.05)  # no pidfd: the exit is polled
            ready, can_write, _ = select.select(wanted, writable, [], max(limit, 0.0))
            if ended_at is None and (
                (exit_fd is not None and exit_fd in ready) or (exit_fd is None and _exited(process))
            ):
                stop()  # the command's group ends; the slave closes with it
                ended_at = time.monotonic()
            if self._master in ready:
                reading = self._read_master()
            if 0 in ready:
                keys = _read(0)
                if keys:
                    # a resize made before these keys reaches the command before them,
                    # whenever the SIGWINCH handler runs (the kernel signals no one when
                    # the size is unchanged)
                    self._resized(signal.SIGWINCH, None)
                    pending += keys
                elif keys is not None:
                    keys_open = False
            if self._master in can_write:
                with contextlib.suppress(BlockingIOError):
                    del pending[: os.write(self._master, pending)]

    def _read_master(self) -> bool:
        """Show what the command wrote; False once every holder of the slave closed it."""
        try:
            data = os.read(self._master, _READ)
        except BlockingIOError:
            return True
        except OSError as exc:
            if exc.errno == errno.EIO:
                return False
            raise
        if not data:
            return False
        self._show(self._filter.feed(data))
        return True

    def _show(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self._out_broken:
            try:
                view = view[os.write(1, view) :]
            except BlockingIOError:
                select.select([], [1], [])
            except OSError:
                self._out_broken = True  # nowhere to show it: the command still runs

    @contextlib.contextmanager
    def _person_mode(self) -> Any:
        """The person's terminal in cbreak mode and resizes followed, restored after."""
        if self._keys is not None:
            with contextlib.suppress(termios.error):
                self._saved_mode = termios.tcgetattr(self._keys)
                tty.setcbreak(self._keys, termios.TCSANOW)
        follow = self._size_fd is not None and threading.current_thread() is threading.main_thread()
        if follow:
            self._saved_winch = signal.signal(signal.SIGWINCH, self._resized)
        try:
            yield
        finally:
            if follow:
                signal.signal(signal.SIGWINCH, self._saved_winch or signal.SIG_DFL)
            if self._keys is not None and self._saved_mode is not None:
                with contextlib.suppress(termios.error):
                    termios.tcsetattr(self._keys, termios.TCSADRAIN, self._saved_mode)

    def _resized(self, signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):
            fcntl.ioctl(self._master, termios.TIOCSWINSZ, self._size())

    def _size(self) -> bytes:
        if self._size_fd is None:
            return _DEFAULT_SIZE
        try:
            return bytes(fcntl.ioctl(self._size_fd, termios.TIOCGWINSZ, _DEFAULT_SIZE))
        except OSError:
            return _DEFAULT_SIZE

    def _close(self) -> None:
        for name in ("_master", "_slave", "_report_r", "_report_w"):
            fd = getattr(self, name)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, -1)


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether ``process`` ended, left unreaped (``WNOWAIT``): its number stays its own
    until ``stop`` has killed its group and reaped it."""
    if process.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _read(fd: int) -> bytes | None:
    """Up to 4 KiB from ``fd``; None when nothing was there after all, b"" at its end."""
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _utf8_locale() -> bool:
    """Whether text may reach the terminal as UTF-8: unless the locale names another charset."""
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = os.environ.get(name)
        if value:
            if value in ("C", "POSIX") or "." not in value:
                return True
            charset = value.split(".", 1)[1].split("@", 1)[0].lower().replace("-", "")
            return charset == "utf8"
    return True
