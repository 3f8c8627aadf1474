"""SPIN searches every interleaving of the model (``model/promotion.pml``) exhaustively.

Each configuration (targets and their kinds, a directory promoter makes, person
actions, crashes, a rollback) must end with no assertion violated and no invalid end
state: no byte the person wrote is lost, promoter unlinks only its own bytes, a step is
journaled completed only as read back new, recovery leaves nothing for a second
recovery, and no operation is left in progress. The mutants put back, one line each,
the losses those rules fixed: SPIN must find each counterexample, or the model would
prove nothing. The reachability checks make sure the model gets where it claims to
(a completion after a crash and a save, bytes kept, a rollback after a crash).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.model import spin

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", sorted(spin.CONFIGURATIONS))
def test_every_interleaving_keeps_the_persons_bytes(name: str, tmp_path: Path) -> None:
    spin.tools()
    result = spin.check(spin.CONFIGURATIONS[name], tmp_path)
    assert result.errors == 0, (result.violation, spin.trail(spin.CONFIGURATIONS[name], tmp_path))
    assert "Full statespace search" in result.output  # exhaustive, not a bitstate sample
    assert result.states > 10_000, result.output  # the search went somewhere
    print(f"{name}: {result.states} states, {result.transitions} transitions")


@pytest.mark.parametrize("mutant", sorted(spin.MUTANTS))
def test_a_historical_loss_put_back_is_found(mutant: str, tmp_path: Path) -> None:
    spin.tools()
    defines = [mutant, "ROLLBACK"]
    result = spin.check(defines, tmp_path, expect_error=True)
    assert result.errors == 1, f"{mutant} ({spin.MUTANTS[mutant]}) went unnoticed"
    assert "assertion violated" in result.violation, result.violation
    events = spin.trail(defines, tmp_path)
    assert any(line.startswith("PERSON") for line in events), events  # a person's act in it


@pytest.mark.parametrize("goal", sorted(spin.REACHABLE))
def test_the_model_reaches_what_it_covers(goal: str, tmp_path: Path) -> None:
    spin.tools()
    result = spin.check([goal, *spin.REACHABLE[goal]], tmp_path, expect_error=True)
    assert result.errors == 1, f"{goal} is never reached: the model is vacuous there"
