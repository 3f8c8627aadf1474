"""Every ``PROMOTER_*`` name promoter reads is known to the check that refuses a typo.

``promoter serve`` refuses a ``PROMOTER_*`` variable that is neither a setting nor on
``promoter.config.OTHER_VARIABLES`` (tests/integration/test_environment_typos.py): a name
the package reads that is missing from the list would have the daemon refuse its own
variable. The names are the string constants of the package's code (``ENV =
"PROMOTER_FAULTS"``, ``os.environ.get("PROMOTER_TOKEN")``, ``envvar="PROMOTER_WORKERS"``);
those of the suite, CI and the benchmarks must be known too, since every daemon they start
inherits them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from promoter.config import OTHER_VARIABLES, VARIABLE_FAMILIES, Settings, unknown_variables

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"PROMOTER_[A-Z0-9_]*[A-Z0-9]")
# set by a test in its own process to show it is not passed on, never to a daemon
FOREIGN = {"PROMOTER_SECRET"}
TYPOS = "tests/integration/test_environment_typos.py"  # its unknown names are the point


def _names(*folders: str) -> dict[str, set[str]]:
    """Each ``PROMOTER_*`` string constant of the Python files under ``folders``, with the
    files that hold it."""
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and NAME.fullmatch(node.value)
                ):
                    found.setdefault(node.value, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_name_the_package_reads_is_known() -> None:
    names = _names("promoter")
    assert {"PROMOTER_FAULTS", "PROMOTER_TOKEN", "PROMOTER_WORKERS"} <= set(names)
    unknown = {name: names[name] for name in unknown_variables(dict.fromkeys(names, ""))}
    assert unknown == {}, "add each to promoter.config.OTHER_VARIABLES"


def test_every_name_the_suite_and_the_benchmarks_set_is_known() -> None:
    names = _names("tests", "bench", "scripts") | {
        name: {".ci/run"} for name in NAME.findall((ROOT / ".ci" / "run").read_text())
    }
    unknown = {
        name: names[name]
        for name in unknown_variables(dict.fromkeys(names, ""))
        if name not in FOREIGN and names[name] != {TYPOS}
    }
    assert unknown == {}


def test_every_listed_name_is_read_and_none_is_a_setting() -> None:
    read = set(_names("promoter", "tests"))
    assert sorted(OTHER_VARIABLES - read) == []
    settings = {"PROMOTER_" + field.upper() for field in Settings.model_fields}
    assert sorted(OTHER_VARIABLES & settings) == []
    assert all(family.startswith("PROMOTER_") for family in VARIABLE_FAMILIES)
