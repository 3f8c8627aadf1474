"""The suite's own variables (``PROMOTER_TEST_*``, ``PROMOTER_REQUIRE_*``), one list, and
the refusal of any other member of those families at the session's start.

A mistyped member (``DATABSE`` for ``DATABASE`` in ``PROMOTER_TEST_DATABASE``) was read by nothing: the suite
ran on SQLite while its runner believed it ran on PostgreSQL, and a mistyped
``PROMOTER_REQUIRE_BWRAP`` let a missing bubblewrap skip instead of fail. ``refusal``
names each such variable with the closest known name (difflib), any other ``PROMOTER_``
name close to a known one that is no setting of the daemon (a slip in the family's own
part: ``PROMOTER_TESTS_DATABASE``), and a value of
``PROMOTER_TEST_DATABASE`` the suite does not know; ``tests/conftest.py`` ends the
session with it before a test runs. ``tests/contract/test_suite_variables.py`` checks
that ``KNOWN`` holds every name the suite, CI and the Makefile use, and nothing else.

Deliberately not here: reading the values (each where it is used: ``tests.support.databases``,
``tests.support.bwrap``, ``tests.support.forkserver``...), and the daemon's own refusal of
an unknown ``PROMOTER_*`` setting (``promoter.config``), which passes these families by.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

_PREFIX = "PROMOTER_"
FAMILIES = ("PROMOTER_TEST_", "PROMOTER_REQUIRE_")
KNOWN = frozenset(
    {
        "PROMOTER_TEST_DATABASE",  # sqlite (the default) or postgresql: tests.support.databases
        "PROMOTER_TEST_POSTGRES_URL",  # the PostgreSQL pass's admin URL
        "PROMOTER_TEST_FORK",  # 0: daemons started by subprocess (tests.support.forkserver)
        "PROMOTER_REQUIRE_BWRAP",  # 1: no bubblewrap fails instead of skipping
        "PROMOTER_REQUIRE_BROWSER",  # 1: no headless browser fails (tests/console)
        "PROMOTER_REQUIRE_POWERCUT",  # set: no recorded disk fails (test_power_cut_replay)
        "PROMOTER_REQUIRE_SPIN",  # set: no SPIN fails (tests/model)
    }
)
DATABASES = ("sqlite", "postgresql")


def _closest(name: str) -> str:
    """The known name closest to ``name`` at a ratio of 0.75 or more, compared without the
    ``PROMOTER_`` every name shares (as ``promoter.config`` compares a setting's)."""
    known = {known[len(_PREFIX) :]: known for known in KNOWN}
    found = difflib.get_close_matches(name.upper()[len(_PREFIX) :], sorted(known), 1, 0.75)
    return f" (did you mean {known[found[0]]}?)" if found else ""


def _slips(environ: Mapping[str, str]) -> list[str]:
    """``PROMOTER_`` names of no family that are a known name mistyped in the family's own
    part (``PROMOTER_TESTS_DATABASE``, ``PROMOTER_DATABASE``): close to a known name, and
    neither a setting of the daemon nor a client's variable."""
    from promoter.config import Settings  # the daemon's settings: never taken for a slip

    settings = {f"{_PREFIX}{field.upper()}" for field in Settings.model_fields}
    return sorted(
        name
        for name in environ
        if name.upper().startswith(_PREFIX)
        and not name.upper().startswith(FAMILIES)
        and name.upper() not in settings
        and _closest(name)
    )


def refusal(environ: Mapping[str, str]) -> str | None:
    """Why the suite must not run with ``environ``, or None: each variable of the suite's
    families it does not read, and an unknown ``PROMOTER_TEST_DATABASE``."""
    unknown = sorted(
        name for name in environ if name.upper().startswith(FAMILIES) and name not in KNOWN
    )
    lines = [f"{name}{_closest(name)}" for name in unknown]
    lines += [f"{name}{_closest(name)}" for name in _slips(environ)]
    database = environ.get("PROMOTER_TEST_DATABASE")
    if database is not None and database not in DATABASES:
        lines.append(f"PROMOTER_TEST_DATABASE={database} (it is sqlite or postgresql)")
    if not lines:
        return None
    return (
        "the suite does not read "
        + "; ".join(lines)
        + ": unset or correct it, or a run believed to test something would not"
    )
