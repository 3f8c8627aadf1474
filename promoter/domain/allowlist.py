"""Write-allowlist patterns of a grant (SPEC §3.3).

A pattern without ``*`` or ``?`` matches exactly one path; ``*`` matches any characters
within one component, ``**`` as a whole component matches zero or more whole components,
``?`` matches one character other than ``/``. Any other use of ``**``, and ``[``, are
refused. Matching is case-sensitive and purely lexical.
"""

from __future__ import annotations

import re
from functools import lru_cache

from promoter.errors import GrantInvalid


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
    if "[" in pattern or "\\" in pattern or "\x00" in pattern:
        raise GrantInvalid("allowlist pattern uses an unsupported character", pattern=pattern)
    for component in pattern.split("/"):
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
    for component in pattern.split("/"):
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


def matches(pattern: str, path: str) -> bool:
    return compile_pattern(pattern).fullmatch(path) is not None
