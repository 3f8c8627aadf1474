"""Running SPIN on ``model/promotion.pml``: the configurations, the mutants, one run.

``check(defines)`` compiles the model with ``spin -a`` and those ``-D`` defines, builds
``pan`` with gcc (safety properties only: assertions and invalid end states; state
vectors stored collapsed, which stays exhaustive) and runs the full search. It returns
the counts SPIN reports. ``points()`` reads ``model/points.txt``, the order of fault
points each pass may take. Missing ``spin`` or ``gcc`` skips with one line unless
``PROMOTER_REQUIRE_SPIN`` is set (CI sets it).

Deliberately not here: what the properties are (the model's assertions) and which
results a test requires.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

MODEL_DIR = Path(__file__).resolve().parents[2] / "model"
MODEL = MODEL_DIR / "promotion.pml"
POINTS = MODEL_DIR / "points.txt"
REQUIRE_ENV = "PROMOTER_REQUIRE_SPIN"

# each configuration: seconds of search on one core; docs/protocol/model.md has the counts
CONFIGURATIONS: dict[str, list[str]] = {
    "modify-delete-rollback": ["ROLLBACK"],
    "create-in-new-dir-two-crashes-rollback": [
        "KIND0=CREATE",
        "DIR0",
        "KIND1=MODIFY",
        "MAXC=2",
        "ROLLBACK",
    ],
    "create-delete-two-crashes-rollback": ["KIND0=CREATE", "KIND1=DELETE", "MAXC=2", "ROLLBACK"],
    "modify-delete-two-crashes": ["MAXC=2"],
    "three-targets": ["NT=3"],
    "one-modify-three-actions-two-crashes-rollback": ["NT=1", "MAXP=3", "MAXC=2", "ROLLBACK"],
}

# a loss fixed earlier (or one the protocol's rules exist to prevent), one line in the model
MUTANTS: dict[str, str] = {
    "MUTANT_SWAPBACK_UNLINK": "after a swap-back the temp name is removed unchecked",
    "MUTANT_CHECK_THEN_UNLINK": "a delete unlinks by name after checking, no move-aside",
    "MUTANT_NO_VERIFY_DISPLACED": "the file an exchange displaced is removed unread",
    "MUTANT_SETTLE_ANY": "recovery removes a displaced file whenever the target is new",
}

# the model reaches what it claims to cover: each of these assertions must be violated
REACHABLE: dict[str, list[str]] = {
    "REACH_DONE": [],
    "REACH_KEPT": [],
    "REACH_ROLLED_BACK": ["ROLLBACK"],
}


@dataclass(frozen=True)
class Result:
    errors: int
    states: int
    transitions: int
    depth: int
    violation: str
    output: str


def tools() -> None:
    """Skip (one line) when spin or gcc is missing, unless CI requires them."""
    missing = [tool for tool in ("spin", "gcc") if shutil.which(tool) is None]
    if missing:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{REQUIRE_ENV} is set but {', '.join(missing)} is not installed")
        pytest.skip(f"{', '.join(missing)} not installed (apt-get install -y spin)")


def _count(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    return int(found.group(1)) if found else -1


def check(defines: list[str], workdir: Path, *, expect_error: bool = False) -> Result:
    """The full search of the model under ``defines``, in ``workdir``.

    ``expect_error``: a counterexample is expected early in the search, so ``pan`` is
    built unoptimized (its compile, not its search, is then the cost)."""
    flags = [f"-D{d}" for d in defines]
    shutil.copyfile(MODEL, workdir / MODEL.name)  # pan writes its trail beside the model
    subprocess.run(["spin", "-a", *flags, MODEL.name], cwd=workdir, check=True, capture_output=True)
    subprocess.run(
        ["gcc", "-O0" if expect_error else "-O1", "-DSAFETY", "-DCOLLAPSE", "-o", "pan", "pan.c"],
        cwd=workdir,
        check=True,
        capture_output=True,
    )
    run = subprocess.run(
        ["./pan", "-m400000", "-w22"], cwd=workdir, capture_output=True, text=True, check=False
    )
    out = run.stdout
    violation = re.search(r"pan:1: (.*)", out)
    return Result(
        errors=_count(r"errors: (\d+)", out),
        states=_count(r"(\d+) states, stored", out),
        transitions=_count(r"(\d+) transitions", out),
        depth=_count(r"depth reached (\d+)", out),
        violation=violation.group(1) if violation else "",
        output=out,
    )


def trail(defines: list[str], workdir: Path) -> list[str]:
    """The counterexample of the last ``check`` in ``workdir``: its printed events."""
    replay = subprocess.run(
        ["spin", "-t", *[f"-D{d}" for d in defines], MODEL.name],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    keep = ("FP ", "PERSON", "CRASH", "END", "assertion")
    return [line.strip() for line in replay.stdout.splitlines() if line.strip().startswith(keep)]


def model_points() -> list[str]:
    """The fault point names the model's actions carry (its ``mtype`` list)."""
    found = re.search(r"^mtype = \{([^}]*)\};", MODEL.read_text(), re.MULTILINE)
    assert found, "model/promotion.pml declares its points in one mtype list"
    return [name.strip() for name in found.group(1).split(",")]


@dataclass(frozen=True)
class Points:
    patterns: dict[str, str]
    aliases: dict[str, str]
    unmodeled: dict[str, str]


def points() -> Points:
    """``model/points.txt`` parsed: patterns (``{NAME}`` expanded), aliases, unmodeled."""
    patterns: dict[str, str] = {}
    aliases: dict[str, str] = {}
    unmodeled: dict[str, str] = {}
    for raw in POINTS.read_text().splitlines():
        line = raw.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("alias "):
            code, _, model = line.removeprefix("alias ").partition(" = ")
            aliases[code.strip()] = model.strip()
        elif line.startswith("unmodeled "):
            name, _, why = line.removeprefix("unmodeled ").partition(":")
            unmodeled[name.strip()] = why.strip()
        else:
            name, _, pattern = line.partition(" = ")
            patterns[name.strip()] = re.sub(
                r"\{(\w+)\}",
                lambda m: patterns.get(m.group(1), m.group(0)),
                pattern,
            )
    return Points(patterns, aliases, unmodeled)


def names_in(pattern: str) -> set[str]:
    """The point names a pattern mentions."""
    return set(re.findall(r"[a-z][a-z_]+[a-z]", pattern)) - {"steps"}
