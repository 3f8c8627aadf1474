"""A fixture for tests that leave trees deeper than Python's recursion limit.

pytest removes old temporary directories with ``shutil.rmtree``, which recurses: a tree
some thousands of levels deep left under a test's ``tmp_path`` (a failed assertion before
the test's own removal, a killed run) makes a *later* session fail at its end with a
``RecursionError``. ``removed_after`` removes the test's ``tmp_path`` after the test,
whatever its outcome, with ``rm -rf`` (coreutils walks any depth without recursion).
It does not judge promoter's removal: the tests do that themselves, before it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def removed_after(tmp_path: Path) -> Iterator[None]:
    """Autouse in a module that imports it: its ``tmp_path`` gone after each test."""
    yield
    subprocess.run(["rm", "-rf", "--one-file-system", str(tmp_path)], check=False, timeout=600)
