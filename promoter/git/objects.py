"""Stream objects out of git's object store through one ``git cat-file --batch``.

This module owns the request/response protocol of ``cat-file --batch``: one full object
id in, one ``<oid> <type> <size>`` header and the object's bytes out, read in bounded
chunks with an idle timeout, so a large blob is never held in memory unless the caller
asks for all of it. On top of that it offers the three things promoter needs: a blob's
bytes as chunks, a blob's bytes whole, and a blob's sha256 and size.

It deliberately does not choose which repository to read: callers pass ``cwd`` and the
``GIT_DIR``-style environment. Ids are checked to be full object ids before they are
written to git, so a request can never be a revision expression, but for ``head``'s two
fixed names (``HEAD`` and ``HEAD^{tree}``).
"""

from __future__ import annotations

import hashlib
import os
import selectors
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from promoter.domain.record_type import record
from promoter.errors import GitError
from promoter.fs.scratch import anonymous_file
from promoter.git.records import require_oid
from promoter.git.runner import git_argv, git_environment, popen_git, stderr_tail

__all__ = ["AHEAD", "CHUNK_SIZE", "CatFile", "ObjectInfo"]

CHUNK_SIZE = 1 << 16
_HEAD_NAMES = ("HEAD", "HEAD^{tree}")  # the only requests that are not object ids
_MAX_HEADER = 1024
# requests written at once, each window only after every earlier answer was read (git
# has taken every earlier request): 62 lines of at most 65 bytes (a SHA-256 id and LF)
# fit one 4 KiB pipe page, the smallest pipe Linux gives, so the write never waits for
# git, whose own writes wait for this side's reads (no deadlock, whatever the sizes)
AHEAD = 62


@record(frozen=True)
class ObjectInfo:
    """The header ``cat-file --batch`` prints before an object's bytes."""

    oid: str
    type: str
    size: int


class CatFile:
    """One running ``git cat-file --batch``; use as a context manager.

    Requests are answered in order. After ``request`` the object's bytes are pending and
    must be read with ``chunks`` (or are skipped by the next ``request``).
    """

    def __init__(
        self,
        *,
        cwd: str | Path,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self._cwd = cwd
        self._env = git_environment(env)
        self._timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._selector: selectors.BaseSelector | None = None
        self._buffer = bytearray()
        self._pending = 0  # object bytes plus the trailing LF not yet read

    def __enter__(self) -> CatFile:
        self._stderr = anonymous_file()
        try:
            self._proc = popen_git(
                ["cat-file", "--batch"],
                cwd=self._cwd,
                env=self._env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
            )
        except OSError as exc:
            self._stderr.close()
            raise GitError(f"git cat-file could not be started: {exc.strerror or exc}") from exc
        assert self._proc.stdout is not None
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._proc.stdout.fileno(), selectors.EVENT_READ)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(kill=exc_type is not None)

    def close(self, *, kill: bool = False) -> None:
        """Stop git (politely unless ``kill``) and release every descriptor."""
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if self._selector is not None:
            self._selector.close()
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            kill = True
        if kill:
            proc.kill()
        try:
            proc.wait(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
            if self._stderr is not None:
                self._stderr.close()

    # --- protocol ---------------------------------------------------------------------

    def request(self, oid: str) -> ObjectInfo | None:
        """Ask for one object; its header, or ``None`` if the object does not exist."""
        require_oid(oid)
        self._skip_pending()
        self._send([oid])
        return self._answer(oid)

    def head(self) -> tuple[ObjectInfo | None, ObjectInfo | None]:
        """The headers of what ``HEAD`` and ``HEAD^{tree}`` name (``None`` for a name that
        names nothing, as on an unborn branch), their bytes skipped. These two are the only
        requests that are not object ids."""
        self._skip_pending()
        self._send(list(_HEAD_NAMES))
        found = []
        for name in _HEAD_NAMES:
            found.append(self._answer(name, named=True))
            self._skip_pending()
        return found[0], found[1]

    def _send(self, oids: list[str]) -> None:
        """Write requests for ``oids`` (checked full ids), one flush for all of them."""
        proc = self._running()
        assert proc.stdin is not None
        try:
            proc.stdin.write(b"".join(oid.encode("ascii") + b"\n" for oid in oids))
            proc.stdin.flush()
        except OSError as exc:
            raise self._failure("git cat-file stopped accepting requests") from exc

    def _answer(self, oid: str, *, named: bool = False) -> ObjectInfo | None:
        """Read the header git answered the next request (``oid``, or with ``named`` one
        of ``_HEAD_NAMES``, answered with the id it names) with."""
        header = self._readline()
        fields = header.split(b" ")
        if len(fields) == 2 and fields[0] == oid.encode() and (named or fields[1] == b"missing"):
            return None  # a name answered "missing" (or "ambiguous") names no object
        if named:
            answered = fields[0].decode("ascii", "replace")
            expected = len(answered) == 40 and not answered.strip("0123456789abcdef")
        else:
            answered, expected = oid, fields[0] == oid.encode()
        if (
            len(fields) != 3
            or not expected
            or fields[1] not in (b"blob", b"tree", b"commit", b"tag")
            or not fields[2].isdigit()
        ):
            raise self._failure(f"git cat-file answered {oid} with an unexpected header")
        size = int(fields[2])
        self._pending = size + 1
        return ObjectInfo(answered, fields[1].decode(), size)

    def chunks(self, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the pending object's bytes in chunks of at most ``chunk_size``."""
        while self._pending > 1:
            chunk = self._read_some(min(chunk_size, self._pending - 1))
            self._pending -= len(chunk)
            yield chunk
        if self._pending == 1:
            if self._read_some(1) != b"\n":
                raise self._failure("git cat-file did not end an object with a newline")
            self._pending = 0

    # --- blobs ------------------------------------------------------------------------

    def blob_chunks(self, oid: str, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """The bytes of blob ``oid`` in chunks; ``GitError`` if it is missing or no blob."""
        self._require_blob(oid)
        yield from self.chunks(chunk_size)

    def read_blob(self, oid: str) -> bytes:
        """The whole content of blob ``oid``."""
        return b"".join(self.blob_chunks(oid))

    def blob_sha256(self, oids: Iterable[str]) -> dict[str, tuple[str, int]]:
        """For each blob id, the sha256 of its exact bytes and its size, streamed.

        Up to ``AHEAD`` requests are written before their answers are read, so git never
        waits for the next request; the answers are still read one object at a time.
        A missing object or one that is not a blob raises ``GitError`` once every
        request in flight has been answered, so the process stays usable.
        """
        wanted = list(dict.fromkeys(oids))
        for oid in wanted:
            require_oid(oid)
        self._skip_pending()
        result: dict[str, tuple[str, int]] = {}
        sent = 0
        for index, oid in enumerate(wanted):
            if index == sent:
                ahead = wanted[sent : sent + AHEAD]
                self._send(ahead)
                sent += len(ahead)
            try:
                self._blob_answer(oid)
            except GitError:
                if self._proc is not None:  # not closed by a protocol failure
                    self._drain(wanted[index + 1 : sent])
                raise
            digest = hashlib.sha256()
            size = 0
            for chunk in self.chunks():
                digest.update(chunk)
                size += len(chunk)
            result[oid] = (digest.hexdigest(), size)
        return result

    def _drain(self, oids: list[str]) -> None:
        """Read and drop the answers to requests still in flight."""
        self._skip_pending()
        for oid in oids:
            self._answer(oid)
            self._skip_pending()

    def _require_blob(self, oid: str) -> ObjectInfo:
        require_oid(oid)
        self._skip_pending()
        self._send([oid])
        return self._blob_answer(oid)

    def _blob_answer(self, oid: str) -> ObjectInfo:
        info = self._answer(oid)
        if info is None:
            raise GitError(f"object {oid} is not in the repository", oid=oid)
        if info.type != "blob":
            raise GitError(f"object {oid} is a {info.type}, not a blob", oid=oid)
        return info

    # --- reading with an idle timeout -------------------------------------------------

    def _running(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise RuntimeError("CatFile is not open; use it as a context manager")
        return self._proc

    def _skip_pending(self) -> None:
        for _ in self.chunks():
            pass

    def _readline(self) -> bytes:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) > _MAX_HEADER:
                raise self._failure("git cat-file printed an overlong header")
            self._fill()

    def _read_some(self, limit: int) -> bytes:
        if not self._buffer:
            self._fill()
        chunk = bytes(self._buffer[:limit])
        del self._buffer[:limit]
        return chunk

    def _fill(self) -> None:
        proc = self._running()
        assert proc.stdout is not None and self._selector is not None
        if not self._selector.select(self._timeout):
            raise self._failure(f"git cat-file sent nothing for {self._timeout:g} s")
        data = os.read(proc.stdout.fileno(), CHUNK_SIZE)
        if not data:
            raise self._failure("git cat-file exited early")
        self._buffer += data

    def _failure(self, detail: str) -> GitError:
        stderr = b""
        if self._stderr is not None:
            try:
                self._stderr.seek(0)
                stderr = self._stderr.read()
            except (OSError, ValueError):
                stderr = b""
        self.close(kill=True)
        return GitError(detail, argv=git_argv(["cat-file", "--batch"]), stderr=stderr_tail(stderr))
