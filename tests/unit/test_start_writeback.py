"""``store.durable.start_writeback``: a hint that changes no byte and raises nothing.

Where the kernel has ``sync_file_range`` the call starts writeback; a descriptor it
cannot act on (a pipe, a closed one) is ignored, since the fsync that follows is what
reports errors. A blob batch that uses it stores exactly what it stored without it.
"""

from __future__ import annotations

import os
from pathlib import Path

from promoter.store.durable import start_writeback


def test_the_file_keeps_its_bytes_and_stays_open_for_its_fsync(tmp_path: Path) -> None:
    path = tmp_path / "blob.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"x" * 10_000)
        start_writeback(fd)
        os.fsync(fd)  # still open, still fsyncable
    finally:
        os.close(fd)
    assert path.read_bytes() == b"x" * 10_000


def test_a_descriptor_it_cannot_act_on_is_ignored() -> None:
    read, write = os.pipe()
    try:
        start_writeback(write)  # ESPIPE from the kernel: ignored
    finally:
        os.close(read)
        os.close(write)
    start_writeback(read)  # EBADF: closed by now, ignored
