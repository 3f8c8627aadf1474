"""What an operation that needs a person answers as its next step names a command that runs
as written: ``promoter ops recover`` always takes ``--fence`` (a rollback's or restore's
recovery checks none), ``promoter ops reconcile`` a decision its kind allows."""

from __future__ import annotations

import pytest

from promoter.engine.operation.views import next_step

OP = "op_" + "0" * 32


def test_a_promotion_that_needs_recovery_names_the_leases_fence() -> None:
    assert next_step("promotion", "needs_recovery", OP) == (
        f"recover it: POST /v1/operations/{OP}/recover with the lease's current fence "
        f"(promoter ops recover {OP} --fence N)"
    )


@pytest.mark.parametrize("kind", ["rollback", "restore"])
def test_a_rollback_or_restore_that_needs_recovery_names_a_fence_the_cli_takes(kind: str) -> None:
    assert next_step(kind, "needs_recovery", OP) == (
        f"an operator recovers it: POST /v1/operations/{OP}/recover "
        f"(promoter ops recover {OP} --fence 0)"
    )


@pytest.mark.parametrize(
    ("kind", "decisions"),
    [("promotion", "rollback or abandon"), ("rollback", "or abandon"), ("restore", "or abandon")],
)
def test_reconciliation_names_the_decisions_of_its_kind(kind: str, decisions: str) -> None:
    assert next_step(kind, "needs_reconciliation", OP) == (
        f"an operator reconciles it: POST /v1/operations/{OP}/reconcile with continue "
        f"(after mending the paths its report names), {decisions} "
        f"(promoter ops reconcile {OP} DECISION)"
    )


@pytest.mark.parametrize("status", ["completed", "refused", "running", "awaiting_approval"])
def test_no_next_step_for_an_operation_that_needs_no_one(status: str) -> None:
    assert next_step("promotion", status, OP) is None
