"""A run step's states are a table: every listed move is taken, every other is refused.

Walks ``promoter.executor.run.status.TRANSITIONS`` like ``test_transitions.py`` walks an
operation's: every pair of statuses is allowed exactly when the table holds it; every
status is reachable from a new step; a record written before the statuses were an enum
(plain strings) loads with the same strings and is written back byte for byte; a status
the table does not know is refused on load; ``Run.move`` writes the record once per
change and not at all when nothing changed; which error codes end a step ``refused``
between its command and its bundle at the host (``refusal``), every code walked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from promoter import faults
from promoter.domain.status import OperationStatus
from promoter.errors import ConfigError, PromoterError, all_error_classes
from promoter.executor import sandbox
from promoter.executor.run.state import Run
from promoter.executor.run.status import (
    FINAL,
    TRANSITIONS,
    RunStatus,
    check_move,
    ending,
    refusal,
)

SAVED = "run_record_after_dir_fsync"  # once per durable write of run.json
EVERY: list[RunStatus | None] = [None, *RunStatus]


@pytest.mark.parametrize("current", EVERY, ids=lambda s: str(s))
def test_every_move_the_table_holds_is_allowed_and_no_other(current: RunStatus | None) -> None:
    allowed = TRANSITIONS.get(current, frozenset())
    for wanted in RunStatus:
        if wanted is current or wanted in allowed:
            assert check_move(current, wanted) is wanted
        else:
            with pytest.raises(ConfigError):
                check_move(current, wanted)


def test_every_status_is_reachable_from_a_new_step() -> None:
    seen: set[RunStatus | None] = {None}
    frontier: list[RunStatus | None] = [None]
    while frontier:
        nxt: list[RunStatus | None] = []
        for status in frontier:
            for target in TRANSITIONS.get(status, frozenset()):
                if target not in seen:
                    seen.add(target)
                    nxt.append(target)
        frontier = nxt
    assert seen == set(EVERY)


def test_every_operation_status_is_a_run_status_with_the_same_string() -> None:
    assert {s.value for s in OperationStatus} <= {s.value for s in RunStatus}
    assert all(RunStatus(s.value) == s.value for s in OperationStatus)


def test_final_states_move_nowhere_and_a_completed_step_only_to_a_rollback() -> None:
    assert RunStatus.COMMAND_FAILED in FINAL and RunStatus.NO_CHANGES in FINAL
    assert RunStatus.STARTED not in FINAL
    assert TRANSITIONS[RunStatus.COMPLETED] == {
        RunStatus.ROLLED_BACK,
        RunStatus.ROLLBACK_PARTIAL,
        RunStatus.ROLLBACK_FAILED,
    }
    for status in FINAL:
        with pytest.raises(ConfigError):
            check_move(status, RunStatus.STARTED)


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ConfigError):
        check_move(RunStatus.STARTED, "promoted_somehow")


# the codes that leave a step ``started`` (``run --list``: interrupted): a crash, an
# outage, a daemon not reached, Ctrl-C, an answer to ask again or elsewhere; every other
# code is a definite answer that the change cannot be taken as it is
NOT_REFUSALS = {
    "address_in_use", "command_failed", "config_error", "confinement_unavailable",
    "credentials_visible", "database_busy", "database_unavailable", "forbidden",
    "git_error", "host_fenced", "host_not_allowed", "internal", "interrupted",
    "ledger_missing", "lock_unavailable", "operation_conflict", "owned_by_other_host",
    "schema_mismatch", "server_unavailable", "source_changed", "stopped", "storage_error",
    "too_many_requests", "unauthenticated", "write_failed",
}  # fmt: skip
# of those, the codes that end a step ``interrupted`` with the code recorded: a refused
# credential (401, 403) or a file changed while the builder read it; nothing was decided
INTERRUPTING = {"forbidden", "source_changed", "unauthenticated"}


def test_a_step_ends_refused_for_a_definite_code_never_an_outage_a_crash_or_ctrl_c() -> None:
    codes = {cls.code: cls for cls in all_error_classes()}
    assert {code for code, cls in codes.items() if not refusal(cls("x"))} == NOT_REFUSALS
    refused = {"path_unsafe", "path_invalid", "verification_failed", "symlink_policy"}
    refused |= {"grant_invalid", "grant_expired", "quota_exceeded", "target_drift"}
    refused |= {"base_moved"}
    assert all(refusal(codes[code]("x")) for code in refused)
    # a code this client does not know (a newer daemon's) is no definite answer
    assert not refusal(PromoterError("x", server_code="a_newer_code", http_status=422))


def test_a_step_ends_interrupted_for_a_refused_credential_or_a_file_changed_while_read() -> None:
    """401/403 say nothing of the change, nor does a file the builder saw change: such a
    step ends ``interrupted`` (with its code), every other code as ``refusal`` says."""
    codes = {cls.code: cls for cls in all_error_classes()}
    ends = {code: ending(cls("x")) for code, cls in codes.items()}
    assert {code for code, status in ends.items() if status is RunStatus.INTERRUPTED} == (
        INTERRUPTING
    )
    assert {code for code, status in ends.items() if status is None} == (
        NOT_REFUSALS - INTERRUPTING
    )
    assert all(status is RunStatus.REFUSED for c, status in ends.items() if c not in NOT_REFUSALS)


LEGACY = [
    "started",
    "submitted",
    "declined",
    "interrupted",
    "preflight_refused",
    "awaiting_approval",
    "completed",
    "approved_in_part",
]


def _legacy_record(state: Path, statuses: list[str]) -> Path:
    home = sandbox.runs_dir(state) / "run_0123456789abcdef"
    home.mkdir(parents=True)
    record = {
        "run_id": "run_0123456789abcdef",
        "repository": "work",
        "worktree": "/nowhere",
        "branch": "refs/heads/main",
        "base_commit": "a" * 40,
        "base_tree": "b" * 40,
        "clone": str(home / "clone"),
        "created_at": "2026-01-01T00:00:00Z",
        "allow": [],
        "preconditions": [],
        "skipped": [],
        "start_tree": None,
        "layout": "copy",  # the layouts came later than the statuses
        "steps": [
            {
                "grant_id": f"grt_0123456789abcdef_{n}",
                "bundle_id": None,
                "operation_id": None,
                "status": status,
                "base_operation": None,
                "confinement": "bwrap",
                "left_out": [],
            }
            for n, status in enumerate(statuses, 1)
        ],
    }
    path = home / "run.json"
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def test_an_old_record_loads_and_is_written_back_byte_for_byte(tmp_path: Path) -> None:
    path = _legacy_record(tmp_path, LEGACY)
    before = path.read_bytes()
    loaded = sandbox.load(tmp_path, "run_0123456789abcdef")
    assert [s.status for s in loaded.steps] == LEGACY
    assert all(isinstance(s.status, RunStatus) for s in loaded.steps)
    sandbox.save(tmp_path, loaded)
    assert path.read_bytes() == before


def test_a_steps_code_is_written_only_when_set_and_read_back(tmp_path: Path) -> None:
    """A record without ``code`` (older) reads with None; a step's code set is written and
    read back; one cleared is not written, so the record is what an older version wrote."""
    path = _legacy_record(tmp_path, ["started", "started"])
    before = path.read_bytes()
    run = Run(tmp_path, sandbox.load(tmp_path, "run_0123456789abcdef"))
    assert [s.code for s in run.record.steps] == [None, None]
    run.move(run.record.steps[1], RunStatus.REFUSED, code="base_moved")
    on_disk = json.loads(path.read_text())
    assert [s.get("code") for s in on_disk["steps"]] == [None, "base_moved"]
    assert "code" not in on_disk["steps"][0]
    again = sandbox.load(tmp_path, "run_0123456789abcdef")
    assert (again.steps[1].status, again.steps[1].code) == ("refused", "base_moved")
    run.move(run.record.steps[1], RunStatus.COMPLETED)  # merged and promoted: no code
    run.record.steps[1].status = RunStatus.STARTED
    sandbox.save(tmp_path, run.record)
    assert path.read_bytes() == before


def test_a_newer_records_fields_are_ignored_not_refused(tmp_path: Path) -> None:
    """A field this version does not know (a newer version's), on the run or a step, is
    ignored: the record reads, as an older version must read this one's ``code``."""
    path = _legacy_record(tmp_path, ["refused"])
    record = json.loads(path.read_text())
    record["a_later_field"] = {"x": 1}
    record["steps"][0]["a_later_step_field"] = [1, 2]
    path.write_text(json.dumps(record), encoding="utf-8")
    loaded = sandbox.load(tmp_path, "run_0123456789abcdef")
    assert [(s.status, s.code) for s in loaded.steps] == [("refused", None)]


def test_a_record_with_an_unknown_status_is_refused_on_load(tmp_path: Path) -> None:
    _legacy_record(tmp_path, ["started", "teleported"])
    with pytest.raises(ConfigError, match="teleported"):
        sandbox.load(tmp_path, "run_0123456789abcdef")


def test_a_move_writes_the_record_once_and_a_non_move_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(faults.ENV, "run_record_after_dir_fsync=EIO@1000000")  # inert: counts
    faults.reset()
    _legacy_record(tmp_path, [])
    run = Run(tmp_path, sandbox.load(tmp_path, "run_0123456789abcdef"))
    step = sandbox.Step(grant_id="grt_0123456789abcdef_1")
    run.begin(step)
    assert faults.hits(SAVED) == 1
    run.move(step, RunStatus.STARTED)  # no change: no write
    assert faults.hits(SAVED) == 1
    run.move(step, RunStatus.SUBMITTED, bundle_id="bnd_x")
    assert faults.hits(SAVED) == 2
    with pytest.raises(ConfigError):
        run.move(step, RunStatus.COMMAND_FAILED)  # not from submitted
    assert faults.hits(SAVED) == 2 and step.status is RunStatus.SUBMITTED
    on_disk = json.loads((sandbox.runs_dir(tmp_path) / run.run_id / "run.json").read_text())
    assert on_disk["steps"][0]["status"] == "submitted"
    assert on_disk["steps"][0]["bundle_id"] == "bnd_x"


class _Offered(Exception):
    """The merge's offer reached: the step's move before it is on disk."""


def test_a_preflight_refusal_without_a_code_records_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preflight answer that is not ``passed`` and carries no ``code`` ends the step
    ``preflight_refused`` with no code written, never the string ``"None"``."""
    from types import SimpleNamespace
    from typing import Any, cast

    from promoter.executor.run import drift, flow

    path = _legacy_record(tmp_path, ["submitted"])
    run = Run(tmp_path, sandbox.load(tmp_path, "run_0123456789abcdef"))
    step = run.record.steps[0]
    step.bundle_id = "bnd_0123456789abcdef"

    def offer(*args: Any, **kwargs: Any) -> None:
        raise _Offered

    monkeypatch.setattr(drift, "offer", offer)
    orch = SimpleNamespace(preflight=lambda bundle_id, fence: {"status": "drifted"}, whoami=dict)
    person = SimpleNamespace(say=lambda text: None)
    with pytest.raises(_Offered):
        flow.promote(
            cast("Any", orch), run, step, cast("Any", SimpleNamespace(fence=1)), "0" * 64,
            cast("Any", person), cast("Any", None),
        )  # fmt: skip
    assert (step.status, step.code) == ("preflight_refused", None)
    on_disk = json.loads(path.read_text())["steps"][0]
    assert on_disk["status"] == "preflight_refused" and "code" not in on_disk


def test_a_later_versions_fields_are_kept_when_this_version_writes_the_record(
    tmp_path: Path,
) -> None:
    """A run's and a step's fields this version has no place for survive a step that this
    version ends (the record written back): their values as they were, beside its own."""
    path = _legacy_record(tmp_path, ["started", "submitted"])
    record = json.loads(path.read_text())
    record["a_later_field"] = {"x": 1, "y": [True, None, "z"]}
    record["steps"][1]["a_later_step_field"] = [1, {"n": 2.5}]
    record["steps"][1]["unknown"] = "a later field of that very name"
    path.write_text(json.dumps(record), encoding="utf-8")
    run = Run(tmp_path, sandbox.load(tmp_path, "run_0123456789abcdef"))
    run.move(run.record.steps[1], RunStatus.REFUSED, code="target_drift")
    on_disk = json.loads(path.read_text())
    assert on_disk["a_later_field"] == {"x": 1, "y": [True, None, "z"]}
    assert on_disk["steps"][1]["a_later_step_field"] == [1, {"n": 2.5}]
    assert on_disk["steps"][1]["unknown"] == "a later field of that very name"
    expected = json.loads(json.dumps(record))  # the whole record: the step's move only
    expected["steps"][1].update(status="refused", code="target_drift")
    assert on_disk == expected
