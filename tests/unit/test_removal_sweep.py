"""The next run's sweep of run directories a kill left before their record.

A run directory without ``run.json`` is removed only when it is empty; one holding
anything, or a run-named symlink to a directory elsewhere, is kept exactly as found.
"""

from __future__ import annotations

import os
from pathlib import Path

from promoter.executor import removal
from promoter.executor import sandbox as sandboxes


def test_sweep_removes_only_an_empty_run_directory_without_its_record(tmp_path: Path) -> None:
    runs = sandboxes.runs_dir(tmp_path)
    (runs / "run_empty").mkdir(parents=True)
    (runs / "run_kept").mkdir()
    (runs / "run_kept" / "work.txt").write_bytes(b"a person's bytes\n")
    (runs / "run_recorded").mkdir()
    (runs / "run_recorded" / "run.json").write_bytes(b"{}")

    assert removal.sweep(tmp_path) == ["run_empty"]
    assert sorted(os.listdir(runs)) == ["run_kept", "run_recorded"]
    assert (runs / "run_kept" / "work.txt").read_bytes() == b"a person's bytes\n"
    assert (runs / "run_recorded" / "run.json").read_bytes() == b"{}"


def test_a_run_named_symlink_to_an_empty_directory_elsewhere_is_not_followed(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside" / "empty"
    outside.mkdir(parents=True)
    runs = sandboxes.runs_dir(tmp_path / "state")
    runs.mkdir(parents=True)
    (runs / "run_link").symlink_to(outside)

    assert removal.sweep(tmp_path / "state") == []
    assert (runs / "run_link").is_symlink()
    assert outside.is_dir()
