"""Bubblewrap for the tests that confine a command: found, or a one-line skip.

Where ``bwrap`` is not installed (or cannot make its namespaces, for ``confining``) a
test is skipped with one line, unless ``PROMOTER_REQUIRE_BWRAP=1`` (CI), where it fails
instead. Nothing here runs a confined command itself.
"""

from __future__ import annotations

import os
import shutil

import pytest

from promoter.errors import ConfinementUnavailable
from promoter.executor import confine

REQUIRED = "PROMOTER_REQUIRE_BWRAP"


def demanded() -> bool:
    """Whether this run must have bubblewrap (``PROMOTER_REQUIRE_BWRAP=1``)."""
    return os.environ.get(REQUIRED) == "1"


def required(*, module: bool = False) -> str:
    """The ``bwrap`` binary; a skip where it is not installed (``module``: the whole
    module's), a failure where this run demands it."""
    found = shutil.which("bwrap")
    if found is None:
        if demanded():
            pytest.fail(f"{REQUIRED}=1 but bwrap is not installed", pytrace=False)
        pytest.skip("bubblewrap (bwrap) is not installed", allow_module_level=module)
    return found


def confining() -> None:
    """A skip where bubblewrap cannot confine here (probed), a failure where demanded."""
    try:
        confine.probe(confine.bwrap_path())
    except ConfinementUnavailable as exc:
        if demanded():
            raise
        pytest.skip(f"bubblewrap cannot confine here: {exc.detail}")
