"""The overlay probe's answer is kept in the runs directory for later processes, and only
under the conditions it was found in (``promoter.executor.layers.available``).

A process starts with no answer of its own (``_AVAILABLE`` cleared, as a new command line
starts): it reads the kept one when the boot, the kernel's user-namespace switches, the
user, the filesystem and the interpreter are those it was found under, and probes again
otherwise; a kept answer that is a link is never read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.executor import layers


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Each real probe's directory, in order; every test starts as a new process."""
    seen: list[str] = []
    real = layers._probe

    def counted(where: str) -> bool:
        seen.append(where)
        return real(where)

    monkeypatch.setattr(layers, "_probe", counted)
    monkeypatch.setattr(layers, "_AVAILABLE", {})
    yield seen


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "_AVAILABLE", {})


def test_a_kept_answer_spares_the_next_process_its_probe(
    tmp_path: Path, probes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = layers.available(tmp_path)
    kept = (tmp_path / layers.KEPT_ANSWER).read_bytes()
    assert kept == layers._conditions(str(tmp_path)).encode() + (b"yes\n" if first else b"no\n")
    _new_process(monkeypatch)
    assert layers.available(tmp_path) is first
    assert probes == [str(tmp_path)]
    # nothing else is left in the directory: the probe's own and the temp are gone
    assert sorted(p.name for p in tmp_path.iterdir()) == [layers.KEPT_ANSWER]


def test_changed_conditions_probe_again(
    tmp_path: Path, probes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = layers.available(tmp_path)
    _new_process(monkeypatch)
    switch = tmp_path / "max_user_namespaces"
    switch.write_text("0\n")  # as if the switch had been turned off since
    monkeypatch.setattr(layers, "_SWITCHES", (*layers._SWITCHES, str(switch)))
    assert layers.available(tmp_path) is first
    assert probes == [str(tmp_path), str(tmp_path)]
    assert (
        (tmp_path / layers.KEPT_ANSWER)
        .read_bytes()
        .endswith(f"{switch} 0\n".encode() + (b"yes\n" if first else b"no\n"))
    )


def test_a_forged_yes_under_other_conditions_is_not_believed(
    tmp_path: Path, probes: list[str]
) -> None:
    (tmp_path / layers.KEPT_ANSWER).write_bytes(b"uid 0\nyes\n")
    layers.available(tmp_path)
    assert probes == [str(tmp_path)]


def test_a_kept_answer_that_is_a_link_is_not_followed(
    tmp_path: Path, probes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    where = tmp_path / "runs"
    where.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(layers._conditions(str(where)).encode() + b"no\n")
    os.symlink(elsewhere, where / layers.KEPT_ANSWER)
    layers.available(where)
    assert probes == [str(where)]  # probed: the link was not read
    assert not (where / layers.KEPT_ANSWER).is_symlink()  # replaced by the answer found
    assert elsewhere.read_bytes().endswith(b"no\n")  # and the file it named is untouched
