"""A recorded disk for power-cut tests: every block write and every flush, in order.

A tiny FUSE file system (spoken directly over ``/dev/fuse``, no library) serves two files:
``disk``, backed by an image file, and ``trace``, an append-only text file. A loop device
on ``disk`` carries an ext4 file system; the kernel's loop driver turns the block layer's
writes into ``WRITE`` requests and its cache flushes (and FUA writes) into ``FSYNC``
requests, which this server answers one at a time, in the order they arrive, appending
each to a log. A process under test that appends its fault-point trace to ``trace`` puts
its points into the same log, in order with the writes: a point passed after an
``fdatasync`` returned comes after that flush.

``replay(base, log, upto)`` rebuilds the disk as it stood when the log's record ``upto``
arrived: the state a power cut at that instant leaves when the device kept exactly the
writes that reached it. This module records and replays; it does not mount, recover or
judge (``tests/faults/test_power_cut_replay.py`` does).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# the FUSE kernel protocol (linux/fuse.h), the requests this server answers
LOOKUP, FORGET, GETATTR, SETATTR = 1, 2, 3, 4
OPEN, READ, WRITE, STATFS, RELEASE, FSYNC = 14, 15, 16, 17, 18, 20
FLUSH, INIT, OPENDIR, READDIR, RELEASEDIR = 25, 26, 27, 28, 29
ACCESS, INTERRUPT, DESTROY, BATCH_FORGET = 34, 36, 38, 42

IN_HEADER = struct.Struct("<IIQQIIIHH")
OUT_HEADER = struct.Struct("<IiQ")
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
READ_IN = struct.Struct("<QQIIQII")
WRITE_IN = struct.Struct("<QQIIQII")
MAX_WRITE = 128 * 1024
ROOT, DISK, TRACE = 1, 2, 3
FOPEN_DIRECT_IO = 1
MS_NOSUID, MS_NODEV = 2, 4

# the log: one record a request, ``<kind><offset><length>`` then ``length`` bytes
RECORD = struct.Struct("<cQI")
WRITE_RECORD, FLUSH_RECORD, TRACE_RECORD = b"W", b"F", b"T"


@dataclass(frozen=True)
class Record:
    kind: bytes
    offset: int
    data: bytes


def read_log(log: Path) -> list[Record]:
    """The log's records, in the order the server received them."""
    raw = log.read_bytes()
    records: list[Record] = []
    at = 0
    while at < len(raw):
        kind, offset, length = RECORD.unpack_from(raw, at)
        at += RECORD.size
        records.append(Record(kind, offset, raw[at : at + length]))
        at += length
    return records


def replay(base: Path, records: list[Record], upto: int, out: Path) -> None:
    """Write ``out``: ``base`` with the writes among ``records[:upto]`` applied in order."""
    out.write_bytes(base.read_bytes())
    fd = os.open(out, os.O_WRONLY)
    try:
        for record in records[:upto]:
            if record.kind == WRITE_RECORD:
                os.pwrite(fd, record.data, record.offset)
    finally:
        os.close(fd)


def _attr(node: int, size: int) -> bytes:
    mode = stat.S_IFDIR | 0o755 if node == ROOT else stat.S_IFREG | 0o666
    blocks = (size + 511) // 512
    return ATTR.pack(node, size, blocks, 0, 0, 0, 0, 0, 0, mode, 2 if node == ROOT else 1,
                     0, 0, 0, 4096, 0)  # fmt: skip


class _Server:
    """Answers the kernel's requests for the two files; runs until the mount goes away."""

    def __init__(self, fuse_fd: int, image: Path, log: Path) -> None:
        self.fd = fuse_fd
        self.image = os.open(image, os.O_RDWR)
        self.size = os.fstat(self.image).st_size
        self.log = open(log, "ab", buffering=0)  # noqa: SIM115 - held for the server's life
        self.trace = bytearray()

    def _reply(self, unique: int, payload: bytes = b"", error: int = 0) -> None:
        body = b"" if error else payload
        # ENOENT: the request was interrupted, nothing waits for the answer
        with contextlib.suppress(FileNotFoundError):
            os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), -error, unique) + body)

    def _record(self, kind: bytes, offset: int, data: bytes) -> None:
        self.log.write(RECORD.pack(kind, offset, len(data)) + data)

    def _size(self, node: int) -> int:
        return self.size if node == DISK else len(self.trace) if node == TRACE else 0

    def _entry(self, node: int) -> bytes:
        return struct.pack("<QQQQII", node, 0, 0, 0, 0, 0) + _attr(node, self._size(node))

    def serve(self) -> None:
        while True:
            try:
                request = os.read(self.fd, MAX_WRITE + 4096)
            except OSError as error:
                if error.errno == errno.ENODEV:  # unmounted
                    return
                if error.errno in (errno.EINTR, errno.ENOENT):
                    continue
                raise
            self._handle(request)

    def _handle(self, request: bytes) -> None:
        _length, opcode, unique, node, *_ = IN_HEADER.unpack_from(request)
        body = request[IN_HEADER.size :]
        if opcode in (FORGET, BATCH_FORGET, INTERRUPT):
            return  # no answer expected
        if opcode == INIT:
            major, minor, readahead, _flags = struct.unpack_from("<IIII", body)
            out = struct.pack("<IIIIHHIIHHI", 7, min(minor, 31), readahead, 0, 16, 12,
                              MAX_WRITE, 1, 32, 0, 0)  # fmt: skip
            self._reply(unique, out + bytes(64 - len(out)))
        elif opcode == LOOKUP:
            name = body.rstrip(b"\0")
            found = {b"disk": DISK, b"trace": TRACE}.get(name) if node == ROOT else None
            if found is None:
                self._reply(unique, error=errno.ENOENT)
            else:
                self._reply(unique, self._entry(found))
        elif opcode in (GETATTR, SETATTR):
            self._reply(unique, struct.pack("<QII", 0, 0, 0) + _attr(node, self._size(node)))
        elif opcode in (OPEN, OPENDIR):
            self._reply(unique, struct.pack("<QII", 0, FOPEN_DIRECT_IO if opcode == OPEN else 0, 0))
        elif opcode == READ:
            _fh, offset, size, *_ = READ_IN.unpack_from(body)
            if node == DISK:
                self._reply(unique, os.pread(self.image, size, offset))
            else:
                self._reply(unique, bytes(self.trace[offset : offset + size]))
        elif opcode == WRITE:
            _fh, offset, size, *_ = WRITE_IN.unpack_from(body)
            data = body[WRITE_IN.size : WRITE_IN.size + size]
            if node == DISK:
                os.pwrite(self.image, data, offset)
                self._record(WRITE_RECORD, offset, data)
            else:
                self.trace += data
                self._record(TRACE_RECORD, 0, data)
            self._reply(unique, struct.pack("<II", len(data), 0))
        elif opcode == FSYNC:
            if node == DISK:
                self._record(FLUSH_RECORD, 0, b"")
            self._reply(unique)
        elif opcode == STATFS:
            self._reply(
                unique, struct.pack("<QQQQQIII", 0, 0, 0, 0, 0, 4096, 255, 4096) + bytes(28)
            )
        elif opcode == READDIR:
            self._reply(unique, b"")
        elif opcode in (FLUSH, RELEASE, RELEASEDIR, ACCESS):
            self._reply(unique)
        elif opcode == DESTROY:
            self._reply(unique)
            raise SystemExit(0)
        else:
            self._reply(unique, error=errno.ENOSYS)


def _serve(image: str, mountpoint: str, log: str) -> None:
    """The server process: mount, announce, answer until unmounted."""
    fuse_fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"fd={fuse_fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
    if libc.mount(b"blocklog", mountpoint.encode(), b"fuse", MS_NOSUID | MS_NODEV, options):
        code = ctypes.get_errno()
        raise OSError(code, f"mount fuse on {mountpoint}: {os.strerror(code)}")
    server = _Server(fuse_fd, Path(image), Path(log))
    sys.stdout.write("mounted\n")
    sys.stdout.flush()
    server.serve()


def available() -> str | None:
    """Why a recorded disk cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "a recorded disk needs root (FUSE mount, loop device)"
    if not os.path.exists("/dev/fuse") or not os.path.exists("/dev/loop-control"):
        return "a recorded disk needs /dev/fuse and /dev/loop-control"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if not any(Path(d, tool).exists() for d in os.environ.get("PATH", "").split(":")):
            return f"a recorded disk needs {tool}"
    return None


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.returncode} {done.stderr.strip()}")
    return done.stdout.strip()


def make_image(path: Path, size_mib: int = 64) -> None:
    """An empty ext4 image (no lazy initialisation: nothing is written behind the test)."""
    with open(path, "wb") as image:
        image.truncate(size_mib * 1024 * 1024)
    _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard",
         str(path))  # fmt: skip


class RecordedDisk:
    """``image`` mounted at ``mountpoint`` through the recording server (use as a context)."""

    def __init__(self, image: Path, mountpoint: Path, work: Path) -> None:
        self.image, self.mountpoint = image, mountpoint
        self.fuse = work / "fuse"
        self.log = work / "blocks.log"
        self.fuse.mkdir()
        mountpoint.mkdir(exist_ok=True)
        self.server = subprocess.Popen(
            [sys.executable, "-c", f"from tests.support.blocklog import _serve; _serve("
             f"{str(image)!r}, {str(self.fuse)!r}, {str(self.log)!r})"],
            stdout=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
        )  # fmt: skip
        assert self.server.stdout is not None
        if self.server.stdout.readline() != b"mounted\n":
            self.server.wait(30)
            raise RuntimeError("the recording file system did not mount")
        self.loop = _run("losetup", "--show", "-f", str(self.fuse / "disk"))
        _run("mount", "-t", "ext4", "-o", "data=ordered", self.loop, str(mountpoint))

    @property
    def trace(self) -> Path:
        """Where the process under test appends its fault points (``PROMOTER_FAULTS_TRACE``)."""
        return self.fuse / "trace"

    def records(self) -> list[Record]:
        return read_log(self.log)

    def close(self) -> None:
        """Unmount everything; the log stays. A power cut needs no clean unmount: the
        records that matter are the ones read before this. The loop device lets go of
        ``disk`` a moment after ``losetup -d`` returns, so the file system is detached
        lazily: the server gets its last request (``DESTROY``) when the loop is gone."""
        for argv in (("umount", str(self.mountpoint)), ("losetup", "-d", self.loop)):
            subprocess.run(argv, capture_output=True, check=False)
        subprocess.run(("umount", "-l", str(self.fuse)), capture_output=True, check=False)
        try:
            self.server.wait(60)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait(30)

    def __enter__(self) -> RecordedDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Mounted:
    """A replayed image mounted at ``mountpoint`` (ext4 replays its journal first)."""

    def __init__(self, image: Path, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        self.loop = _run("losetup", "--show", "-f", str(image))
        try:
            # a loop device used before may still cache the blocks of the image it had
            _run("blockdev", "--flushbufs", self.loop)
            _run("mount", "-t", "ext4", self.loop, str(mountpoint))
        except RuntimeError:
            _run("losetup", "-d", self.loop)
            raise

    def __enter__(self) -> Mounted:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            _run("umount", str(self.mountpoint))
        finally:
            subprocess.run(("losetup", "-d", self.loop), capture_output=True, check=False)


def flush_points(records: list[Record], start: int) -> Iterator[int]:
    """Each index just after a flush at or after ``start`` where writes came since the last
    one returned (a prefix ending there differs from the one before)."""
    wrote = True
    for index in range(start, len(records)):
        kind = records[index].kind
        if kind == WRITE_RECORD:
            wrote = True
        elif kind == FLUSH_RECORD and wrote:
            wrote = False
            yield index + 1
