"""A ``PROMOTER_*`` variable with a typo in it is refused, not silently ignored.

``promoter serve`` and the operator commands that read the daemon's settings (``db
upgrade``, ``gc``, ``keys``, ``credentials``) exit 78 with ``config_error`` naming every
``PROMOTER_*`` variable that is neither a setting nor a variable promoter reads elsewhere,
with the closest known name, before they make anything: a mistyped
``PROMOTER_DATABSE_URL`` would otherwise start a daemon on SQLite under ./.promoter
instead of the operator's PostgreSQL (docs/operator/config.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support import forkserver

PROGRAM = [sys.executable, "-m", "promoter.cli.main"]


def _cli(tmp_path: Path, argv: list[str], variables: dict[str, str]) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PROMOTER_")}
    env["HOME"] = str(tmp_path / "home")  # no recorded daemon, no per-user configuration
    env.update(variables)
    done = forkserver.run_text([*PROGRAM, *argv], env=env, cwd=tmp_path, timeout=120)
    return done.returncode, done.stderr


def test_serve_with_a_mistyped_database_variable_is_refused_and_makes_nothing(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    code, stderr = _cli(
        tmp_path,
        ["serve", "--state-dir", str(state), "--port", "0"],
        {"PROMOTER_DATABSE_URL": "postgresql+psycopg://promoter@192.0.2.1/promoter"},
    )
    assert (code, stderr) == (
        78,
        "error [config_error] unknown environment variable PROMOTER_DATABSE_URL (did you "
        "mean PROMOTER_DATABASE_URL?): neither a setting nor a variable promoter reads "
        "(docs/operator/config.md)\n",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no state, no ./.promoter


def test_every_unknown_variable_is_named_in_one_error(tmp_path: Path) -> None:
    code, stderr = _cli(
        tmp_path,
        ["serve", "--port", "0"],
        {
            "PROMOTER_STATE_DRI": str(tmp_path / "state"),
            "promoter_log_levle": "debug",  # a setting's variable is read in any case
            "PROMOTER_XYZZY": "1",  # nothing close: no suggestion
            "PROMOTER_URL": "http://127.0.0.1:9",  # the CLI's own: known
        },
    )
    assert (code, stderr) == (
        78,
        "error [config_error] unknown environment variables PROMOTER_STATE_DRI (did you "
        "mean PROMOTER_STATE_DIR?), PROMOTER_XYZZY, promoter_log_levle (did you mean "
        "PROMOTER_LOG_LEVEL?): neither a setting nor a variable promoter reads "
        "(docs/operator/config.md)\n",
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["db", "upgrade"],
        ["gc", "--dry-run"],
        ["keys", "list"],
        ["credentials", "list"],
        ["credentials", "add", "alice"],
    ],
)
def test_the_operator_commands_refuse_a_mistyped_variable(tmp_path: Path, argv: list[str]) -> None:
    state = tmp_path / "state"
    code, stderr = _cli(
        tmp_path, [*argv, "--state-dir", str(state)], {"PROMOTER_SIGNING_KEY_DRI": "/keys"}
    )
    assert (code, stderr) == (
        78,
        "error [config_error] unknown environment variable PROMOTER_SIGNING_KEY_DRI (did "
        "you mean PROMOTER_SIGNING_KEY_DIR?): neither a setting nor a variable promoter "
        "reads (docs/operator/config.md)\n",
    )
    assert list(tmp_path.iterdir()) == []


def test_the_variables_promoter_and_its_suite_read_are_not_refused(tmp_path: Path) -> None:
    """The CLI's, a run's and a check's variables, fault points and the suite's own (CI
    sets ``PROMOTER_REQUIRE_*`` and ``PROMOTER_TEST_*`` for every daemon a test starts)."""
    state = tmp_path / "state"
    code, stderr = _cli(
        tmp_path,
        ["db", "upgrade", "--state-dir", str(state)],
        {
            "PROMOTER_URL": "http://127.0.0.1:9",
            "PROMOTER_TOKEN": "t",
            "PROMOTER_GRANT": "g",
            "PROMOTER_CHECK": "1",
            "PROMOTER_STARTED_BY": "make",
            "PROMOTER_FAULTS_TRACE": str(tmp_path / "trace"),
            "PROMOTER_REQUIRE_BWRAP": "1",
            "PROMOTER_TEST_DATABASE": "sqlite",
            "PROMOTER_CHROMIUM": "/usr/bin/chromium",
            "PROMOTER_LOG_LEVEL": "info",
        },
    )
    assert code == 0, stderr
    assert (state / "promoter.db").is_file()
