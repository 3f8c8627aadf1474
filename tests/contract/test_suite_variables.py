"""The suite's own variables: one list, refused when mistyped, checked against their uses.

``tests.support.suite_variables.KNOWN`` must hold every ``PROMOTER_TEST_*`` and
``PROMOTER_REQUIRE_*`` name the suite, CI (``.ci/run``) and the Makefile use, and no
other; a session started with a name of those families the suite does not read (a typo
once ran the whole suite on SQLite while it was believed to run on PostgreSQL) ends at
its start with a non-zero code, naming the closest known name, before any test runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.suite_variables import FAMILIES, KNOWN, refusal

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"PROMOTER_(?:TEST|REQUIRE)_[A-Z0-9_]*[A-Z0-9]")
# spelled apart: the search of the suite's uses below finds neither
TYPO, UNKNOWN = "PROMOTER_TEST_" + "DATABSE", "PROMOTER_TEST_" + "ZZZ"


def _used() -> dict[str, set[str]]:
    """Each family name written in a file of the suite, CI or the Makefile, with its files."""
    files = [*sorted((ROOT / "tests").rglob("*.py")), ROOT / ".ci" / "run", ROOT / "Makefile"]
    found: dict[str, set[str]] = {}
    for path in files:
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


FIRST = "test_the_list_holds_every_name_the_suite_ci_and_the_makefile_use_and_no_other"


def test_the_list_holds_every_name_the_suite_ci_and_the_makefile_use_and_no_other() -> None:
    used = _used()
    assert {"PROMOTER_TEST_DATABASE", "PROMOTER_REQUIRE_BWRAP"} <= set(used)
    assert {name: used[name] for name in sorted(set(used) - KNOWN)} == {}
    assert sorted(KNOWN - set(used)) == []
    assert all(name.startswith(FAMILIES) for name in KNOWN)


def test_a_mistyped_or_unknown_member_is_refused_with_the_closest_name() -> None:
    assert refusal({"PROMOTER_TEST_DATABASE": "postgresql", "PROMOTER_REQUIRE_BWRAP": "1"}) is None
    assert refusal({"PROMOTER_DATABASE_URL": "sqlite://", "HOME": "/root"}) is None
    said = refusal({TYPO: "postgresql", "promoter_require_bwrp": "1", UNKNOWN: ""})
    assert said == (
        f"the suite does not read {TYPO} (did you mean PROMOTER_TEST_DATABASE?); "
        f"{UNKNOWN}; promoter_require_bwrp (did you mean PROMOTER_REQUIRE_BWRAP?): "
        "unset or correct it, or a run believed to test something would not"
    )
    assert refusal({"PROMOTER_TEST_DATABASE": "postgres"}) == (
        "the suite does not read PROMOTER_TEST_DATABASE=postgres (it is sqlite or "
        "postgresql): unset or correct it, or a run believed to test something would not"
    )


@pytest.mark.slow
def test_a_session_with_a_mistyped_member_ends_at_its_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env[TYPO] = "postgresql"
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist"]
    quick = "tests/contract/test_suite_variables.py::" + FIRST  # never this test again
    argv += ["--basetemp", str(tmp_path / "bt"), quick]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert f"{TYPO} (did you mean PROMOTER_TEST_DATABASE?)" in said
    assert " passed" not in said and "collected" not in said  # no test ran


# spelled apart as above: a slip in the family's own part of the name
SLIPS = ["PROMOTER_" + "TESTS_DATABASE", "PROMOTER_" + "REQUIRES_BWRAP", "PROMOTER_" + "DATABASE"]


@pytest.mark.parametrize("name", SLIPS)
def test_a_slip_in_the_family_part_of_a_name_is_refused_too(name: str) -> None:
    """``PROMOTER_TESTS_DATABASE`` is of no family, yet it is the suite's variable
    mistyped: refused with the closest name, as a typo after the family is."""
    said = refusal({name: "postgresql"})
    assert said is not None and said.startswith(f"the suite does not read {name} (did you mean")


def test_no_setting_of_the_daemon_is_taken_for_a_slip() -> None:
    from promoter.config import Settings

    settings = {f"PROMOTER_{field.upper()}": "x" for field in Settings.model_fields}
    clients = ("PROMOTER_URL", "PROMOTER_TOKEN", "PROMOTER_GRANT", "PROMOTER_RUN")
    assert refusal({**settings, **dict.fromkeys(clients, "x")}) is None
