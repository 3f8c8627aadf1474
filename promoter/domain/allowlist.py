"""Write-allowlist patterns of a grant (protocol: grants#allowlist-patterns).

A pattern without ``*`` or ``?`` matches exactly one path; ``*`` matches any characters
within one component, ``**`` as a whole component matches zero or more whole components,
``?`` matches one character other than ``/``. Any other use of ``**``, and ``[``, are
refused. Matching is case-sensitive and purely lexical.

Patterns and paths are wire forms (protocol: documents#byte-paths, ``wirepath``): a pattern may name
a byte that is not UTF-8 as ``\\xNN`` and a backslash as ``\\\\``, and must be canonical.
Matching compares the decoded names (``subject``), so ``?`` stands for one UTF-8
character or one byte that is not UTF-8, never for part of an escape.

Not a glob library's matcher: wcmatch and pathspec both refuse ``src/**`` for ``src``
(zero components), and pathspec lets ``src`` match ``src/a.py``; see
``docs/decisions/libraries-signing-globs-inotify.md``. wcmatch is the tests' oracle.
"""

from __future__ import annotations

import re
from functools import lru_cache

from promoter.domain import wirepath
from promoter.errors import GrantInvalid, PathInvalid


def _component_regex(component: str) -> str:
    out: list[str] = []
    for ch in component:
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(ch))
    return "".join(out)


def check_pattern(pattern: str) -> None:
    """Raise ``GrantInvalid`` if ``pattern`` is not a valid allowlist pattern."""
    if not pattern or pattern.startswith("/") or pattern.endswith("/"):
        raise GrantInvalid("allowlist pattern must be a relative path", pattern=pattern)
    if "[" in pattern or "\x00" in pattern:
        raise GrantInvalid("allowlist pattern uses an unsupported character", pattern=pattern)
    try:
        name = wirepath.to_disk(pattern)
    except PathInvalid as exc:
        raise GrantInvalid(
            f"allowlist pattern is not a canonical wire form: {exc.detail}", pattern=pattern
        ) from exc
    if "\x00" in name:
        raise GrantInvalid("allowlist pattern uses an unsupported character", pattern=pattern)
    for component in name.split("/"):
        if component in ("", ".", ".."):
            raise GrantInvalid(
                "allowlist pattern has an empty, '.' or '..' component", pattern=pattern
            )
        if "**" in component and component != "**":
            raise GrantInvalid("'**' must be a whole path component", pattern=pattern)


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Compile a checked pattern; ``**`` stands for zero or more whole components."""
    check_pattern(pattern)
    components: list[str] = []
    for component in wirepath.to_disk(pattern).split("/"):
        if not (component == "**" and components and components[-1] == "**"):
            components.append(component)
    if components == ["**"]:
        return re.compile("[^/]+(?:/[^/]+)*")
    regex = ""
    for index, component in enumerate(components):
        first, last = index == 0, index == len(components) - 1
        if component == "**":
            regex += "(?:[^/]+/)*" if first else ("(?:/[^/]+)*" if last else "(?:/[^/]+)*/")
        else:
            follows_glob = index > 0 and components[index - 1] == "**"
            sep = "" if first or follows_glob else "/"
            regex += sep + _component_regex(component)
    return re.compile(regex)


def subject(path: str) -> str | None:
    """What a compiled pattern is matched against: the decoded wire path (None if the
    path is not a canonical wire form, which no pattern matches)."""
    try:
        return wirepath.to_disk(path)
    except PathInvalid:
        return None


def matches(pattern: str, path: str) -> bool:
    name = subject(path)
    return name is not None and compile_pattern(pattern).fullmatch(name) is not None
