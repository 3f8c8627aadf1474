"""A database URL's password hidden in a message that may reach a log or an operator.

``hidden(text, url)`` hides, in this order: the URL itself (shown with ``***`` for its
password); the password in a URL's password position anywhere in the text
(``://user:PASSWORD@`` of any URL, and ``USER:PASSWORD@`` with the URL's user), in each
form it may take (decoded, %-encoded, as written in the URL); a password given as the
URL's query ``?password=`` likewise (libpq reads it there); the password's text
elsewhere, in the same forms; and any ``password=`` setting of a connection string.

Elsewhere, a password of ``ANYWHERE`` characters or more is hidden wherever it appears,
even inside a word (by chance it would match nothing else, and half-hiding it would
show it). A shorter one is hidden only where it stands alone: not run together with a
letter or digit on an edge where it has one itself (``"a"`` or ``(postgres)``, not the
``a`` of ``failed`` or the ``postgres`` of ``postgresql``), so a short password no
longer mangles the message. A user or database name equal to the password is hidden
too: it would show the password (docs/decisions/a-password-hidden-where-it-stands.md).

Deliberately not here: what reaches a caller at all (``promoter.store.db`` tells a
caller only that the database failed; the driver's message goes to the log).
"""

from __future__ import annotations

import contextlib
import re
from urllib.parse import quote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

ANYWHERE = 12  # a password this long is hidden wherever it appears, even inside a word
MASK = "***"
_WRITTEN = re.compile(r"[^:/]+://[^:@/]*:([^@/]*)@")  # a URL's password as written
# a ``password=`` setting: quoted as libpq quotes (``\'`` and ``\\`` escaped inside), or a word
_SETTING = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE)
_IN_QUERY = re.compile(r"[?&]password=([^&#\s]*)", re.IGNORECASE)  # ``?password=`` as written


def _alone(form: str) -> str:
    """A pattern of ``form`` standing alone: no letter or digit run onto an edge of it
    that is itself a letter or digit."""
    before = r"(?<![^\W_])" if form[0].isalnum() else ""
    after = r"(?![^\W_])" if form[-1].isalnum() else ""
    return before + re.escape(form) + after


def _passwords(url: str | None, parsed: URL | None) -> set[str]:
    """The password of ``url``, decoded and as written: in its password position, or
    given as its query string's ``password`` (``?password=``, as libpq reads it)."""
    if not url or parsed is None:
        return set()
    found = {str(parsed.password)} if parsed.password else set()
    given = parsed.query.get("password", ())
    found |= {given} if isinstance(given, str) else set(given)
    written = _WRITTEN.match(url)
    found |= {written.group(1)} if written and parsed.password else set()
    found |= set(_IN_QUERY.findall(url))
    return found - {""}


def hidden(text: str, url: str | None) -> str:
    """``text`` with ``url``'s password hidden (see the module's docstring)."""
    parsed = None
    with contextlib.suppress(ArgumentError):
        parsed = make_url(url) if url else None
    passwords = _passwords(url, parsed)
    if url and parsed is not None and passwords:
        text = text.replace(url, parsed.render_as_string(hide_password=True))
        forms = set(passwords) | {quote(password, safe="") for password in passwords}
        forms.discard("")
        user = parsed.username or ""
        for form in sorted(forms, key=len, reverse=True):  # the longest first
            at = re.escape(form) + "@"
            text = re.sub(r"(://[^\s:@/]*:)" + at, rf"\g<1>{MASK}@", text)
            if user:
                text = re.sub(r"(?<![^\W_])(" + re.escape(user) + ":)" + at, rf"\g<1>{MASK}@", text)
        for form in sorted(forms, key=len, reverse=True):
            if len(form) >= ANYWHERE:
                text = text.replace(form, MASK)
            else:
                text = re.sub(_alone(form), MASK, text)
    return _SETTING.sub(rf"\g<1>{MASK}", text)
