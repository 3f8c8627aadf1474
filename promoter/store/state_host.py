"""The host a state directory belongs to: ``<state_dir>/host-id``, one line, promoter's own.

A state directory holds one host's bundle documents, blobs, receipts and keys, and the
ledger binds each bundle to the host that took it (a 421 names that host for another's).
Two daemons of different hosts on one directory each found the other's bundles on disk
and served them (200, never 421), and each swept the other's temps at its start.

``check`` runs first at ``promoter serve``'s start and refuses (``config_error``, nothing
changed) a daemon of another host, naming both and what to do; ``claim`` runs once the
start's checks passed (its database reached and migrated: a start that fails records no
id) and records the host id when the directory has none (``write_new``: of two daemons
starting at once exactly one records, the other compares). The workers of one ``serve
--workers N`` are one host and are never asked. A daemon configured as the recorded
host's replacement (``replaces_host``: it takes that host's work over once it is fenced,
and must read its documents) is let in; the record stays the first host's, and one that
starts first on a directory recording none records the host it replaces. A replacement
also records itself under ``<state_dir>/replacements/`` (one file each, never removed):
``writers`` names every host that may write in the directory, which a start's sweep of
temps asks (``promoter.engine.state_sharing``).

Deliberately not here: which host id a daemon has (``promoter.config``, the machine id by
default), and the ledger (a state directory is not a host's row; a fence is).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

from promoter.errors import ConfigError
from promoter.store.durable import make_dirs, write_new

FILE = "host-id"
REPLACEMENTS = "replacements"  # one file per replacement that started on the directory
LIMIT = 4096  # a host id is at most 200 characters (``promoter.config``)


def recorded(state_dir: Path) -> str | None:
    """The host id the state directory records, or None when it records none yet.

    The file is opened without following a symlink and without blocking (a FIFO), and
    read only if it is a regular file, at most ``LIMIT`` bytes; anything else standing at
    the name refuses the start (``config_error``) and is left as it is. It is read without
    the space around it (a hand-edited file's), which a host id never holds
    (``promoter.config``).
    """
    return _read_id(state_dir / FILE)


def _read_id(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if os.path.lexists(path):  # a dangling symlink: something stands at the name
            raise _not_a_file(path) from None
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR):
            raise _not_a_file(path) from exc
        raise ConfigError(f"{path} cannot be read: {exc}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_a_file(path)
        data = os.read(fd, LIMIT + 1)
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from exc
    finally:
        os.close(fd)
    if len(data) > LIMIT:
        raise ConfigError(f"{path} holds more than one host id ({LIMIT} bytes or more)")
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from exc


def _not_a_file(path: Path) -> ConfigError:
    return ConfigError(
        f"{path} is not a regular file (a symlink, a directory or a device): it is left "
        "as it is; replace it with a file naming the host this state directory belongs to"
    )


def check(state_dir: Path, host_id: str, *, replaces: str | None = None) -> None:
    """Refuse another host's state directory; record nothing (a directory that records no
    host yet passes: ``claim`` records it once the start's checks passed)."""
    found = recorded(state_dir)
    if found is not None:
        _compare(state_dir, found, host_id, replaces)


def claim(state_dir: Path, host_id: str, *, replaces: str | None = None) -> None:
    """Record the state directory's host, or check the one recorded. A replacement
    (``replaces``) starting first on a directory that records none records the host it
    replaces, never itself: the directory is that host's, which then starts on it."""
    found = recorded(state_dir)
    if found is None:
        owner = host_id if replaces is None else replaces
        make_dirs(state_dir, mode=0o700)
        if write_new(state_dir / FILE, f"{owner}\n".encode(), mode=0o444):
            found = owner
        else:
            found = recorded(state_dir)  # another daemon recorded first: compare with its
            assert found is not None  # written by ``write_new``'s winner, never removed
    _compare(state_dir, found, host_id, replaces)
    if found != host_id:  # a replacement: the recorded host's daemon learns it may write
        _record_replacement(state_dir, host_id)


def _record_replacement(state_dir: Path, host_id: str) -> None:
    """``<state_dir>/replacements/<sha256 of the id, 32 hex>`` naming ``host_id`` (a host
    id may hold any character but a file name may not); once, never removed."""
    where = state_dir / REPLACEMENTS
    make_dirs(where, mode=0o700)
    write_new(where / _file_of(host_id), f"{host_id}\n".encode(), mode=0o444)


def _file_of(host_id: str) -> str:
    return hashlib.sha256(host_id.encode()).hexdigest()[:32]


def writers(state_dir: Path) -> set[str]:
    """Every host that may write in the state directory: the one it records and each
    replacement that started on it. A file under ``replacements/`` that is not a
    replacement's record (not a regular file, or not named after the id it holds) refuses
    (``config_error``): the directory's writers are then unknown."""
    found: set[str] = set()
    owner = recorded(state_dir)
    if owner:
        found.add(owner)
    try:
        names = sorted(os.listdir(state_dir / REPLACEMENTS))
    except FileNotFoundError:
        return found
    except OSError as exc:
        raise ConfigError(f"{state_dir / REPLACEMENTS} cannot be read: {exc}") from exc
    for name in names:
        host = _read_id(state_dir / REPLACEMENTS / name)
        if not host or _file_of(host) != name:
            raise ConfigError(
                f"{state_dir / REPLACEMENTS / name} is not a replacement's record of promoter's"
            )
        found.add(host)
    return found


def _compare(state_dir: Path, found: str, host_id: str, replaces: str | None) -> None:
    """Nothing when ``found`` is this host or the one it replaces; else ``ConfigError``."""
    if found == host_id or (replaces is not None and found == replaces):
        return
    where = state_dir.resolve()
    if not found:
        raise ConfigError(
            f"{where / FILE} names no host: write the id of the host this state directory "
            "belongs to into it (a daemon records its own when the file is absent)"
        )
    raise ConfigError(
        f"state directory {where} belongs to host {found} (recorded in {where / FILE}); "
        f"this daemon is host {host_id}, and two hosts on one state directory serve each "
        f"other's bundles and sweep each other's temps. Start it as {found} "
        f"(--host-id {found}), give {host_id} a state directory of its own (--state-dir), "
        f"or, for {found}'s replacement that takes its work over once it is fenced, set "
        f'replaces_host = "{found}" (docs/operator/many-hosts.md)',
        state_dir=str(where),
        recorded_host=found,
        host=host_id,
    )
