"""The first process inside a confined sandbox: the daemon's port, then the command.

Run by bubblewrap as ``python -I -S -c <this file's text> SOCKET PORT -- CMD ARGS...``
(``promoter.executor.confine``), so it uses the standard library only and imports
nothing of promoter. With a SOCKET (no network), it listens on ``127.0.0.1:PORT`` in
the sandbox's own network namespace and forwards every connection to SOCKET, the Unix
socket ``promoter run`` serves outside, which reaches only the daemon. Then it runs the
command and exits with its status (128 + the signal's number when a signal ended it).

It deliberately checks nothing and holds no credential: what crosses is what the
command sends, authorised by the daemon with the run's executor token alone.
"""

import contextlib
import socket
import subprocess
import sys
import threading


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _forward(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        return
    threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
    _pipe(client, upstream)


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_forward, args=(client, path), daemon=True).start()


def main(argv: list[str]) -> int:
    path, port, command = argv[0], int(argv[1]), argv[3:]
    if path:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    try:
        code = subprocess.call(command)
    except OSError as exc:
        sys.stderr.write(f"promoter run: cannot start {command[0]}: {exc.strerror}\n")
        return 127
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
