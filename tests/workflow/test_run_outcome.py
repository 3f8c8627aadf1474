"""``promoter run``'s outcome: the record written once per move, ``--json``, the summary.

A real daemon, a real repository, the real command (confined as ``run`` always is). The
run record's durable writes are counted at their fault point (an inert rule counts them);
``--json`` must put exactly one JSON document on stdout, every word on stderr; ``--yes``
prints a summary of the diff (paths, operations, sizes, flags, unseen files), ``--diff``
the whole patch; the summary and the receipt's lines are what the bundle's diff and the
operation's receipt print, whether the promotion's answer carried them or not (a receipt
left out is read by its own request).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from promoter import faults
from promoter.cli import run_cmd
from promoter.cli.bundle_view import diff_summary
from promoter.errors import NotConfirmed
from promoter.executor import sandbox as sandboxes
from tests.support.daemon import Daemon
from tests.support.promotion import operation_receipt

SAVED = "run_record_after_dir_fsync"  # once per durable write of run.json


def _run(daemon: Daemon, *args: str) -> Result:
    app = typer.Typer()
    run_cmd.register(app)
    argv = ["--state-dir", str(daemon.state_dir), "--url", daemon.url, *args]  # the one command
    return CliRunner().invoke(app, argv, env={"PROMOTER_TOKEN": ""})


def _only_run(daemon: Daemon) -> sandboxes.RunRecord:
    (record,) = sandboxes.list_runs(daemon.state_dir)
    return record


def test_a_step_writes_the_run_record_once_per_change_of_state(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(faults.ENV, f"{SAVED}=EIO@1000000")  # inert: counts the writes
    faults.reset()
    first = _run(daemon, "--repo", "work", "--yes", "--keep", "--", "sh", "-c", "echo a > a.txt")
    assert first.exit_code == 0, first.output
    # made (1), laid from the person's worktree (1); started, submitted, completed (3)
    assert faults.hits(SAVED) == 5
    record = _only_run(daemon)
    faults.reset()
    nxt = _run(
        daemon, "--continue", record.run_id, "--yes", "--keep", "--", "sh", "-c", "echo b > a.txt"
    )
    assert nxt.exit_code == 0, nxt.output
    assert faults.hits(SAVED) == 3  # started, submitted, completed
    assert [s.status for s in _only_run(daemon).steps] == ["completed", "completed"]


def test_json_prints_the_outcome_as_one_document_and_words_on_stderr(
    daemon: Daemon, repo: Path
) -> None:
    script = "printf 'x = 1\\n' > src/new.py; rm README.md"
    result = _run(daemon, "--repo", "work", "--yes", "--json", "--", "sh", "-c", script)
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)  # the whole of stdout: one document
    said = "requested with its evidence in one request"  # --yes: one request
    assert said in result.stderr and said not in result.stdout
    assert sorted(outcome) == [
        "bundle",
        "operation_id",
        "receipt_sha256",
        "repository",
        "run_id",
        "sandbox",
        "schema",
        "status",
        "steps",
        "targets",
    ]
    assert outcome["schema"] == "RunOutcomeV1" and outcome["status"] == "completed"
    assert outcome["repository"] == "work" and outcome["run_id"].startswith("run_")
    (step,) = outcome["steps"]
    assert step["status"] == "completed" and step["operation_id"] == outcome["operation_id"]
    assert step["bundle_id"] == outcome["bundle"]["bundle_id"]
    assert outcome["bundle"]["changes"] == [
        {"path": "README.md", "operation": "delete"},
        {"path": "src/new.py", "operation": "create"},
    ]
    receipt = operation_receipt(daemon, outcome["operation_id"])
    assert outcome["receipt_sha256"] == receipt["receipt_sha256"]
    assert [t["path"] for t in outcome["targets"]] == ["README.md", "src/new.py"]
    assert (repo / "src" / "new.py").read_bytes() == b"x = 1\n"


def test_json_prints_the_outcome_of_a_declined_step_too(daemon: Daemon, repo: Path) -> None:
    result = _run(daemon, "--repo", "work", "--json", "--", "sh", "-c", "echo hi > src/app.py")
    assert isinstance(result.exception, NotConfirmed), result.output
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "declined" and outcome["receipt_sha256"] is None
    assert outcome["steps"][0]["bundle_id"] == outcome["bundle"]["bundle_id"]
    assert outcome["operation_id"] is None


TEN = "for i in 0 1 2 3 4 5 6 7 8 9; do seq 1 50 > src/f$i.txt; done"


def test_yes_prints_a_summary_and_diff_prints_the_whole_patch(daemon: Daemon, repo: Path) -> None:
    summary = _run(daemon, "--repo", "work", "--yes", "--keep", "--", "sh", "-c", TEN)
    assert summary.exit_code == 0, summary.output
    assert "@@" not in summary.stdout and "+50\n" not in summary.stdout
    for i in range(10):
        assert f" create src/f{i}.txt  - -> 141 B, +50 -0\n" in summary.stdout
    assert "10 file(s), 500 insertion(s), 0 deletion(s)" in summary.stdout
    assert "the whole diff: promoter bundle diff bnd_" in summary.stdout
    assert len(summary.stdout.splitlines()) < 40
    record = _only_run(daemon)
    edit = "for i in 0 1 2 3 4 5 6 7 8 9; do seq 2 51 > src/f$i.txt; done"
    whole = _run(daemon, "--continue", record.run_id, "--yes", "--diff", "--", "sh", "-c", edit)
    assert whole.exit_code == 0, whole.output
    assert whole.stdout.count("@@ -1,") == 10 and "+51\n" in whole.stdout
    assert (repo / "src" / "f9.txt").read_bytes().endswith(b"50\n51\n")


MIXED = "seq 1 30 > src/f0.txt; printf 'x\\n' >> src/app.py; chmod +x src/f0.txt; rm README.md"
DIFFED = "bundle_diff_file"  # once per file of each diff the daemon builds


def _receipt_lines(daemon: Daemon, operation_id: str) -> str:
    """The lines ``run`` prints for the receipt ``GET /v1/operations/{id}/receipt`` answers."""
    receipt = operation_receipt(daemon, operation_id)
    lines = [f"promoted: operation {operation_id} completed, receipt {receipt['receipt_sha256']}"]
    for target in receipt["targets"]:
        state = f"{target['sha256'][:12]} {target['mode']}" if target["exists"] else "deleted"
        lines.append(f"  {target['path']}  {state}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("carried", [True, False], ids=["carried", "left-out"])
def test_yes_prints_what_the_diff_and_receipt_requests_answer(
    daemon: Daemon,
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    carried: bool,
) -> None:
    """The summary and the receipt's lines are the bytes the bundle's diff and the
    operation's receipt print: carried by the promotion's answer (the diff built once), or
    left out of it (its diff failing), named not carried with why, and asked for after."""
    monkeypatch.setenv(faults.ENV, f"{DIFFED}=EIO@{1000000 if carried else 1}")
    faults.reset()
    with caplog.at_level(logging.WARNING, logger="promoter.run"):
        result = _run(daemon, "--repo", "work", "--yes", "--keep", "--", "sh", "-c", MIXED)
    fallback = [
        "the host did not carry the review's diff (storage_error: the bundle's diff could "
        "not be read: injected fault at bundle_diff_file: Input/output error); it is read "
        "by its own request"
    ]
    assert [r.getMessage() for r in caplog.records if r.name == "promoter.run"] == (
        [] if carried else fallback
    )
    diffed = faults.hits(DIFFED)
    monkeypatch.delenv(faults.ENV)
    assert result.exit_code == 0, result.output
    (step,) = _only_run(daemon).steps
    assert step.bundle_id is not None and step.operation_id is not None
    with daemon.orchestrator() as orch:
        diff = orch.get(f"/v1/bundles/{step.bundle_id}/diff").json()
    assert diffed == (len(diff["files"]) if carried else 1 + len(diff["files"]))
    hint = f"promoter bundle diff {step.bundle_id}"
    assert diff_summary(diff, hint).plain in result.stdout
    assert _receipt_lines(daemon, step.operation_id) in result.stdout


READ = "promotion_receipt_read"  # once per reading of a promotion receipt by the daemon


def test_yes_reads_a_receipt_left_out_by_its_own_request(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The promotion's answer leaving the receipt out (its reading failed): the run warns,
    naming it not carried with why, asks for it by its own request and prints its lines;
    the promotion stands."""
    monkeypatch.setenv(faults.ENV, f"{READ}=EIO@1")
    faults.reset()
    with caplog.at_level(logging.WARNING, logger="promoter.run"):
        result = _run(daemon, "--repo", "work", "--yes", "--keep", "--", "sh", "-c", MIXED)
    read = faults.hits(READ)
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    assert result.exit_code == 0, result.output
    assert [r.getMessage() for r in caplog.records if r.name == "promoter.run"] == [
        "the host did not carry the review's receipt (internal: an unexpected error "
        "occurred; see the daemon's log); it is read by its own request"
    ]
    assert read == 2  # the carried reading failed, its own request read it
    (step,) = _only_run(daemon).steps
    assert step.operation_id is not None
    assert _receipt_lines(daemon, step.operation_id) in result.stdout
    assert (repo / "src" / "f0.txt").read_bytes() == b"".join(b"%d\n" % i for i in range(1, 31))


def test_continue_without_a_command_and_nothing_submitted_is_a_usage_error(
    daemon: Daemon, repo: Path
) -> None:
    first = _run(daemon, "--repo", "work", "--yes", "--", "true")
    assert first.exit_code == 0, first.output
    record = _only_run(daemon)
    assert [s.status for s in record.steps] == ["no_changes"]
    again = _run(daemon, "--continue", record.run_id, "--yes")
    assert again.exit_code == 2, again.output
    assert f"run {record.run_id} has no submitted bundle to promote (its last step: " in (
        again.output
    )
    said = " ".join(again.output.replace("\u2502", " ").split())  # the usage box's lines
    assert "(its last step: no changes)" in said and "no_changes" not in said
    assert [s.status for s in _only_run(daemon).steps] == ["no_changes"]  # nothing written
