"""promoter's command line run for tests as a child process (through the fork server).

``cli`` runs ``python -m promoter.cli.main`` with a wide terminal and no colour, and
without the caller's ``PROMOTER_URL`` and ``PROMOTER_TOKEN``; it checks nothing about
the result. In-process runs (typer's ``CliRunner``) stay with the tests that use them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import forkserver


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``promoter ARGS`` in ``cwd``; its exit status and text output."""
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
    env.pop("PROMOTER_URL", None)
    env.pop("PROMOTER_TOKEN", None)
    return forkserver.run_text(
        [sys.executable, "-m", "promoter.cli.main", *args], cwd=cwd, env=env, timeout=120
    )
