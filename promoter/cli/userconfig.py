"""The person's own configuration: which daemon and which credential their CLI uses.

``promoter serve``, once it listens, records in ``$XDG_CONFIG_HOME/promoter/daemon.json``
(default ``~/.config/promoter/``) the daemon's URL, its state directory, the file of
the credential the person's CLI holds (the state directory's operator token, see
docs/decisions/persons-cli-credential.md) and the worktrees it serves, by name (for
``promoter gc``'s snapshot pruning; a file without them, as older daemons wrote, names
none). The directory is 0700 and the file 0600, both owned by the user; a directory or
file that anyone else may read or write, that another user owns, or that is a symlink is
refused (as ssh refuses such a key), never repaired.

``resolve`` answers, for a client command, the URL, the token and the state directory,
each with where it came from: the flag, then the environment (``PROMOTER_URL``,
``PROMOTER_TOKEN``, ``PROMOTER_STATE_DIR``), then this file, then ``./.promoter``. A
credential goes only to the daemon it belongs to: the recorded token only to the recorded
URL, ``./.promoter``'s only to the default URL; another URL needs its own token.

Deliberately not here: talking to the daemon (``promoter status`` does), or storing a
token itself: the file names the token's file, which stays where the daemon made it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from promoter.errors import ConfigError

__all__ = [
    "DEFAULT_URL",
    "Recorded",
    "Target",
    "config_dir",
    "host_repositories",
    "host_state_dir",
    "load",
    "record",
    "resolve",
]

DEFAULT_URL = "http://127.0.0.1:8787"
FILE_NAME = "daemon.json"
SCHEMA = "PromoterUserConfigV1"
LOCAL_STATE = Path(".promoter")
_MAX_BYTES = 64 * 1024


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/promoter``, or ``~/.config/promoter`` (an empty or relative
    ``XDG_CONFIG_HOME`` is ignored, as the XDG base directory rules say)."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_CONFIG_HOME", "")
    if not base or not os.path.isabs(base):
        base = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".config")
    return Path(base) / "promoter"


class Recorded(NamedTuple):
    """What ``promoter serve`` recorded: the daemon and the person's credential."""

    url: str
    state_dir: Path
    token_file: Path
    path: Path  # the file it was read from
    repositories: tuple[tuple[str, Path], ...] = ()  # (name, worktree) the daemon serves


class Target(NamedTuple):
    """A client command's daemon, credential and state directory, each with its source."""

    url: str
    url_from: str
    token: str | None
    token_from: str
    state_dir: Path
    state_from: str
    recorded: Recorded | None
    token_problem: str | None = None  # why a token file found on the way could not be read
    token_path: Path | None = None  # the file the token was read from, if any


def _private(info: os.stat_result, path: Path, *, directory: bool) -> None:
    kind = "directory" if directory else "file"
    if stat.S_ISLNK(info.st_mode):
        raise ConfigError(f"{path} is a symlink; the per-user {kind} must be a real {kind}")
    regular = stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)
    if not regular:
        raise ConfigError(f"{path} is not a {kind}")
    if info.st_uid != os.geteuid():
        raise ConfigError(f"{path} belongs to user {info.st_uid}, not to you; it is not used")
    if info.st_mode & 0o077:
        want = "700" if directory else "600"
        raise ConfigError(
            f"{path} is readable or writable by others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"it is not used: chmod {want} {path}"
        )


def load(directory: Path | None = None) -> Recorded | None:
    """The recorded daemon, or None when nothing is recorded; an unsafe one is refused."""
    folder = directory or config_dir()
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return None
    _private(info, folder, directory=True)
    path = folder / FILE_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        _private(os.fstat(fd), path, directory=False)
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        doc: Any = json.loads(data) if len(data) <= _MAX_BYTES else None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError("not a promoter user configuration")
        served = doc.get("repositories", {})
        if not isinstance(served, dict) or not all(
            isinstance(name, str) and isinstance(where, str) for name, where in served.items()
        ):
            raise ValueError("repositories is not an object of names and paths")
        return Recorded(
            url=str(doc["url"]),
            state_dir=Path(str(doc["state_dir"])),
            token_file=Path(str(doc["token_file"])),
            path=path,
            repositories=tuple((name, Path(where)) for name, where in sorted(served.items())),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is damaged ({exc}); run promoter serve again") from exc


def host_state_dir(state_dir: Path | None, config: Path | None) -> Path | None:
    """The state directory a command that runs on the host's own files (``credentials``,
    ``keys``) gives its settings: ``state_dir`` as given when a flag, a config file or
    ``PROMOTER_STATE_DIR`` names one, else the recorded daemon's; None (the settings'
    default, ``./.promoter``) when nothing is recorded."""
    if state_dir is not None or config is not None or os.environ.get("PROMOTER_STATE_DIR"):
        return state_dir
    recorded = load()
    return None if recorded is None else recorded.state_dir


def host_repositories(state_dir: Path | None, config: Path | None) -> dict[str, Path]:
    """The worktrees, by name, of the daemon whose state directory ``host_state_dir``
    gives: the recorded daemon's when the state directory is its; none otherwise (the
    flag, the config file or ``PROMOTER_STATE_DIR`` name their own)."""
    if state_dir is not None or config is not None or os.environ.get("PROMOTER_STATE_DIR"):
        return {}
    recorded = load()
    return {} if recorded is None else dict(recorded.repositories)


def record(
    url: str,
    state_dir: Path,
    token_file: Path,
    directory: Path | None = None,
    repositories: Mapping[str, Path] | None = None,
) -> Path:
    """Write the daemon's URL, state directory, the person's token file and the worktrees
    it serves by name (absolute paths) into the per-user file, replacing it whole; returns
    its path."""
    folder = directory or config_dir()
    with contextlib.suppress(FileExistsError):
        os.makedirs(folder.parent, mode=0o700, exist_ok=True)
        os.mkdir(folder, 0o700)
    _private(os.lstat(folder), folder, directory=True)  # an unsafe folder is never written
    doc = {
        "schema": SCHEMA,
        "url": url,
        "state_dir": str(state_dir.resolve()),
        "token_file": str(token_file.resolve()),
        "repositories": {name: str(path.resolve()) for name, path in (repositories or {}).items()},
    }
    data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")
    path = folder / FILE_NAME
    from promoter.fs.own_temp import OwnTemp  # written by ``promoter serve`` alone

    temp = OwnTemp.create(str(folder), f".{FILE_NAME}.")  # 0600, O_EXCL
    try:
        try:
            os.fchmod(temp.fd, 0o600)
            os.write(temp.fd, data)
            os.fsync(temp.fd)
        finally:
            os.close(temp.fd)
        temp.place(str(path))
    except BaseException:
        temp.discard()  # only while the name still holds the file made here
        raise
    return path


def _read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read token file {path}: {exc.strerror or exc}") from exc
    if not token:
        raise ConfigError(f"token file {path} is empty")
    return token


def _state_token(state_dir: Path) -> Path:
    return state_dir / "credentials" / "operator.token"


def resolve(
    url: str | None = None,
    token_file: Path | None = None,
    state_dir: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    directory: Path | None = None,
) -> Target:
    """The daemon, credential and state directory a client command uses (see the module)."""
    environ = os.environ if env is None else env
    recorded = load(directory or config_dir(environ))
    if url:
        address, url_from = url, "--url"
    elif environ.get("PROMOTER_URL"):
        address, url_from = environ["PROMOTER_URL"], "PROMOTER_URL"
    elif recorded is not None:
        address, url_from = recorded.url, str(recorded.path)
    else:
        address, url_from = DEFAULT_URL, "the default"
    ours = recorded is not None and address.rstrip("/") == recorded.url.rstrip("/")

    if state_dir is not None:
        state, state_from = state_dir, "--state-dir"
    elif environ.get("PROMOTER_STATE_DIR"):
        state, state_from = Path(environ["PROMOTER_STATE_DIR"]), "PROMOTER_STATE_DIR"
    elif ours and recorded is not None:
        state, state_from = recorded.state_dir, str(recorded.path)
    else:
        state, state_from = LOCAL_STATE, "the current directory"

    token: str | None = None
    found: Path | None = None  # a token file found on the way (not named by the person)
    if token_file is not None:
        token, token_from = _read_token(token_file), f"--token-file {token_file}"
    elif environ.get("PROMOTER_TOKEN", "").strip():
        token, token_from = environ["PROMOTER_TOKEN"].strip(), "PROMOTER_TOKEN"
    elif state_from in ("--state-dir", "PROMOTER_STATE_DIR") and _state_token(state).is_file():
        found = _state_token(state)
    elif ours and recorded is not None:
        found = recorded.token_file
    elif address.rstrip("/") == DEFAULT_URL and _state_token(LOCAL_STATE).is_file():
        found = _state_token(LOCAL_STATE)
    problem = None
    if found is not None:
        token_from = str(found)
        try:
            token = _read_token(found)
        except ConfigError as exc:  # said when a command needs it (``no_token``)
            problem = exc.detail
    elif token is None:
        token_from = "none"  # noqa: S105 (a description, not a secret)
    return Target(
        address,
        url_from,
        token,
        token_from,
        state,
        state_from,
        recorded,
        problem,
        token_file if token_file is not None else found,
    )


def no_token(target: Target) -> ConfigError:
    """The error of a command that needs a credential and found none."""
    if target.token_problem is not None:
        where = target.token_problem
    elif target.recorded is not None and target.url_from in ("--url", "PROMOTER_URL"):
        where = (
            f"{target.url} is not the daemon recorded in {target.recorded.path} "
            f"({target.recorded.url}), so its credential is not sent there"
        )
    else:
        where = f"nothing recorded in {config_dir()} and none in ./.promoter/credentials"
    return ConfigError(
        f"no token for {target.url}: {where}; start the daemon with promoter serve, "
        "or pass --token-file FILE (or set PROMOTER_TOKEN)"
    )
