"""Where promoter's secrets are, so that a confined run hides every one of them.

``secret_dirs(state_dir, token_file, url, environ)`` names every directory ``promoter
run`` knows to hold promoter's credentials, state or keys (TESTS E6), each as given and
as resolved (a path through a symlink hides its target's directory too):

- the state directory it was given (``--state-dir``, ``PROMOTER_STATE_DIR``);
- the token file's directory and, when that is a ``credentials`` directory, its parent:
  the daemon's state directory (database, audit store, keys, other sandboxes), which
  need not be the one ``--state-dir`` names;
- the signing-key directory ``PROMOTER_SIGNING_KEY_DIR`` names;
- for a Unix-socket URL (``http+unix://%2Fpath%2Fd.sock``, ``unix:/path/d.sock``) the
  socket's directory;
- the per-user configuration, ``user_config_dir()``: ``$XDG_CONFIG_HOME/promoter``,
  else ``~/.config/promoter``.

``check_hidden(dirs, files, exposed)`` refuses with ``credentials_visible`` when one of
them would still be visible inside: a directory that is ``/`` (it cannot be hidden), or
a directory or credential file inside a path the sandbox binds back over what is
hidden (the sandboxes' directory, the interpreter's prefix). ``promoter run`` calls it
before it makes anything, and again on the exact binds.

Deliberately not here: the mounts (``confine.py``), and files promoter does not know of
(an agent's own API keys, the person's other secrets: ``--hide`` names those).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from promoter.errors import CredentialsVisible

__all__ = ["check_hidden", "secret_dirs", "user_config_dir"]


def user_config_dir(environ: Mapping[str, str]) -> Path:
    """The per-user configuration directory: ``$XDG_CONFIG_HOME/promoter``, else
    ``~/.config/promoter`` (a relative ``XDG_CONFIG_HOME`` is ignored, as the XDG
    specification says)."""
    base = environ.get("XDG_CONFIG_HOME", "")
    if not base or not os.path.isabs(base):
        home = environ.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".config")
    return Path(base) / "promoter"


def _socket_dir(url: str) -> Path | None:
    """The directory of a Unix-socket URL's socket, or None for any other URL."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        path = unquote(parts.path)
    elif parts.scheme in ("http+unix", "https+unix"):
        path = unquote(parts.netloc)
    else:
        return None
    return Path(path).parent if os.path.isabs(path) else None


def _both(path: Path) -> list[Path]:
    """``path`` made absolute as given, and resolved."""
    given = Path(os.path.abspath(path))
    return [given, Path(os.path.realpath(path))]


def secret_dirs(
    state_dir: Path, token_file: Path | None, url: str, environ: Mapping[str, str]
) -> list[Path]:
    """Every directory the run knows to hold promoter's credentials, state or keys."""
    found: list[Path] = [*_both(state_dir)]
    if environ.get("PROMOTER_STATE_DIR"):
        found += _both(Path(environ["PROMOTER_STATE_DIR"]))
    if token_file is not None:
        for path in _both(token_file):
            found.append(path.parent)
            if path.parent.name == "credentials":
                found.append(path.parent.parent)  # the daemon's own state directory
    if environ.get("PROMOTER_SIGNING_KEY_DIR"):
        found += _both(Path(environ["PROMOTER_SIGNING_KEY_DIR"]))
    socket_dir = _socket_dir(url)
    if socket_dir is not None:
        found += _both(socket_dir)
    found += _both(user_config_dir(environ))
    return list(dict.fromkeys(found))


def _and_above(path: Path) -> set[Path]:
    """``path`` and every directory above it: a place is it or holds it when it is here."""
    return {path, *path.parents}


def check_hidden(dirs: Iterable[Path], files: Iterable[Path], exposed: Iterable[Path]) -> None:
    """Refuse (``credentials_visible``) what the sandbox could not hide; see the module."""
    bound = [Path(os.path.realpath(p)) for p in exposed]
    for directory in dirs:
        real = Path(os.path.realpath(directory))
        if real == Path("/"):
            raise CredentialsVisible(
                f"{directory} holds promoter's credentials and cannot be hidden from the "
                "sandbox (it is the root directory); move them into a directory of their own",
                path=str(directory),
            )
        above = _and_above(real)
        for place in bound:
            if place in above:
                raise _visible(directory, place)
    for file in files:
        above = _and_above(Path(os.path.realpath(file)))
        for place in bound:
            if place in above:
                raise _visible(file, place)


def _visible(path: Path, place: Path) -> CredentialsVisible:
    real = Path(os.path.realpath(path))
    why = "the sandbox binds it back" if real == place else f"it is inside {place}, bound back"
    return CredentialsVisible(
        f"{path} holds promoter's credentials or state and would be visible in the sandbox "
        f"({why}); nothing was made. Keep credentials in a directory of their own, "
        f"outside {place}, and run again",
        path=str(path),
        visible_through=str(place),
    )
