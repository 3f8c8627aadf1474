"""A confined command made ready before its step's grant is registered
(protocol: runs#confinement): bubblewrap and the sandbox's entry start, and the entry runs the
command only once the step's own variables (its token) have all come; a command made
ready and never started runs nothing, and neither does one whose variables came cut.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from promoter.executor import confine, sandbox_entry
from tests.support import bwrap

_SCRIPT = 'printf "%s\\n" "$PROMOTER_TOKEN" "$AGENT_SETTING" > told; touch ran'


def _box(tmp_path: Path) -> confine.Sandbox:
    clone, home = tmp_path / "clone", tmp_path / "home"
    clone.mkdir()
    return confine.Sandbox(clone=clone, home=home, hide=[], network=True)


def _env() -> dict[str, str]:
    locale = {k: os.environ[k] for k in ("LANG", "LC_ALL", "LC_CTYPE") if k in os.environ}
    return {"PATH": "/usr/bin:/bin", "AGENT_SETTING": "early", **locale}


def test_a_command_made_ready_runs_only_with_its_steps_token(tmp_path: Path) -> None:
    bwrap.confining()
    box = _box(tmp_path)
    command = ["sh", "-c", _SCRIPT]
    with confine.prepare_confined(command, box, _env(), "http://127.0.0.1:9", "run_t") as ready:
        assert not (box.clone / "ran").exists()
        outcome = ready.run({"PROMOTER_TOKEN": "the step's token"}, 60)
    assert outcome.returncode == 0
    assert (box.clone / "told").read_text() == "the step's token\nearly\n"


def test_a_command_made_ready_and_never_started_runs_nothing(tmp_path: Path) -> None:
    bwrap.confining()
    box = _box(tmp_path)
    command = ["sh", "-c", _SCRIPT]
    with confine.prepare_confined(command, box, _env(), "http://127.0.0.1:9", "run_t"):
        pass  # the grant's registration failed, say
    assert not (box.clone / "ran").exists()


@pytest.mark.parametrize(
    "sent",
    [b"", b"40\nPROMOTER_TOKEN=cut", b"x\nPROMOTER_TOKEN=t", b"9\nNO_EQUALS"],
    ids=["nothing", "cut", "no-length", "no-equals"],
)
def test_the_entry_runs_nothing_without_all_of_the_steps_variables(
    tmp_path: Path, sent: bytes
) -> None:
    ran = tmp_path / "ran"
    read, write = os.pipe()
    os.write(write, sent)
    os.close(write)
    assert sandbox_entry.main(["", "0", str(read), "--", "touch", str(ran)]) == 125
    assert not ran.exists()


def test_the_entry_adds_the_steps_variables_then_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    told = tmp_path / "told"
    body = b"PROMOTER_TOKEN=t=1\0OTHER="
    read, write = os.pipe()
    os.write(write, str(len(body)).encode() + b"\n" + body)
    os.close(write)
    for name in ("PROMOTER_TOKEN", "OTHER"):  # what the entry sets is undone after
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    script = f'printf "%s|%s|%s" "$PROMOTER_TOKEN" "${{OTHER-unset}}" > {told}'
    assert sandbox_entry.main(["", "0", str(read), "--", "sh", "-c", script]) == 0
    assert told.read_text() == "t=1||"
