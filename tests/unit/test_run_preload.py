"""The run's start modules loaded by a thread of their own while the run waits on the
daemon and git (``promoter.cli.run_start._preloading``): loaded there, waited for before
the run imports anything again, and a failing import left to the run's own import.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from promoter.cli import run_start


def test_the_modules_load_in_another_thread_and_are_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "preloaded_for_the_run"
    (tmp_path / f"{name}.py").write_text("import threading\nLOADER = threading.get_ident()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    loaded = run_start._preloading(name)
    loaded()
    module = sys.modules[name]
    assert threading.get_ident() != module.LOADER  # not this thread
    monkeypatch.delitem(sys.modules, name)


def test_a_failing_import_is_left_to_the_runs_own_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "preloaded_and_broken"
    (tmp_path / f"{name}.py").write_text("raise ImportError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run_start._preloading(name)()  # waited for: nothing raised here
    assert name not in sys.modules
    with pytest.raises(ImportError, match="broken on purpose"):
        __import__(name)
