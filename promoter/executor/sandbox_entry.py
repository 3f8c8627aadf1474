"""The first process inside a confined sandbox: the daemon's port, then the command.

Run by bubblewrap as ``python -I -S -c <this file's text> SOCKET PORT [FD] -- CMD ARGS...``
(``promoter.executor.confine``), so it uses the standard library only and imports
nothing of promoter; it takes the interpreter's own low-level modules (``_socket``,
``_thread``, ``_signal``, ``os.posix_spawnp``) rather than ``socket``, ``threading`` and
``subprocess``, whose imports cost it more than all it does. With a SOCKET (no network),
it listens on ``127.0.0.1:PORT`` in the sandbox's own network namespace and forwards
every connection to SOCKET, the Unix socket ``promoter run`` serves outside, which
reaches only the daemon. With an FD, it waits there for the step's own variables (a
length, a newline, then ``NAME=VALUE`` entries separated by NULs: ``confine.Stem.start``)
and adds them to its environment; without all of them (the run ended before its
command) it exits 125 and runs nothing. Then it runs the command as ``subprocess.call`` would (no
descriptor but 0–2 passed on, the signals Python ignores back to their defaults) and
exits with its status (128 + the signal's number when a signal ended it).

It deliberately checks nothing and holds no credential: what crosses is what the
command sends, authorised by the daemon with the run's executor token alone.
"""

import _signal  # type: ignore[import-not-found]  # signal's constants, without its enums
import _socket
import _thread
import os
import sys


def _pipe(source: _socket.socket, sink: _socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:  # noqa: SIM105 (contextlib would be one more import)
            sink.shutdown(_socket.SHUT_WR)
        except OSError:
            pass


def _forward(client: _socket.socket, path: str) -> None:
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        return
    _thread.start_new_thread(_pipe, (upstream, client))
    _pipe(client, upstream)


def _serve(listener: _socket.socket, path: str) -> None:
    while True:
        fd, _ = listener._accept()  # type: ignore[attr-defined]  # not inherited by the command
        client = _socket.socket(fileno=fd)
        _thread.start_new_thread(_forward, (client, path))


def _spawn(command: list[str]) -> int:
    """``subprocess.call(command)``: the command's status, negative for a signal."""
    for fd in _inherited():
        os.set_inheritable(fd, False)  # as subprocess's close_fds: 0, 1 and 2 only
    names = ("SIGPIPE", "SIGXFZ", "SIGXFSZ")  # those Python ignores, as subprocess resets
    defaults = [getattr(_signal, name) for name in names if hasattr(_signal, name)]
    pid = os.posix_spawnp(command[0], command, os.environ, setsigdef=defaults)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _inherited() -> list[int]:
    """This process's descriptors above 2 that a command it starts would inherit."""
    try:
        candidates = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every descriptor number
        candidates = list(range(3, os.sysconf("SC_OPEN_MAX")))
    found = []
    for fd in candidates:
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    found.append(fd)
            except OSError:
                pass  # not open (the listing's own descriptor, closed already)
    return found


def _step_env(fd: int) -> bool:
    """The step's own variables read from ``fd`` to its end and added to the environment;
    False when they did not all come."""
    data = b""
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        os.close(fd)
    except OSError:
        return False
    head, newline, body = data.partition(b"\n")
    if not newline or not head.isdigit() or int(head) != len(body):
        return False
    for item in body.split(b"\0") if body else ():
        name, equals, value = item.partition(b"=")
        if not equals or not name:
            return False
        os.environb[name] = value
    return True


def main(argv: list[str]) -> int:
    path, port = argv[0], int(argv[1])
    step = None if argv[2] == "--" else int(argv[2])
    command = argv[3:] if step is None else argv[4:]
    if path:
        listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        _thread.start_new_thread(_serve, (listener, path))
    if step is not None and not _step_env(step):
        return 125  # the run ended before its command: nothing runs
    try:
        code = _spawn(command)
    except OSError as exc:
        sys.stderr.write(f"promoter run: cannot start {command[0]}: {exc.strerror}\n")
        return 127
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
