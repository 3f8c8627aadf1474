"""C1/C2 for names that are not UTF-8 (protocol: documents#byte-paths): killed mid-promotion, then
recovered.

The journal holds each target's wire form; recovery must find the file under its exact
bytes again (not under the text of its escapes), confirm or finish it, and leave no temp
file — the same guarantees as for any other name.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.flows import init_repo
from tests.support.process import DaemonProcess, crash_in_promotion, prepare_promotion
from tests.support.promotion import git_dir_digest

# disk names (bytes) and their wire forms
EDITED, GONE = b"src/na\xefve.md", b"src/old-\xa9.txt"
CREATED, BACKSLASH = b"src/new/caf\xe9.bin", b"src/back\\slash.txt"
WIRE = {
    EDITED: "src/na\\xefve.md",
    GONE: "src/old-\\xa9.txt",
    CREATED: "src/new/caf\\xe9.bin",
    BACKSLASH: "src/back\\\\slash.txt",
}
BEFORE = {EDITED: b"v1\n", GONE: b"to delete\n", b"README.md": b"# project\n"}
AFTER = {EDITED: b"v2\r\n", CREATED: bytes(range(256)), BACKSLASH: b"\\x41 stays text\n"}


def _changes() -> list[tuple[str, bytes | None, bytes | None]]:
    return [
        (WIRE[EDITED], BEFORE[EDITED], AFTER[EDITED]),
        (WIRE[GONE], BEFORE[GONE], None),
        (WIRE[CREATED], None, AFTER[CREATED]),
        (WIRE[BACKSLASH], None, AFTER[BACKSLASH]),
    ]


def _files(root: Path) -> dict[bytes, bytes]:
    top = os.fsencode(root)
    out: dict[bytes, bytes] = {}
    for directory, dirs, names in os.walk(top):
        dirs[:] = [d for d in dirs if d != b".git"]
        for name in names:
            full = os.path.join(directory, name)
            with open(full, "rb") as src:
                out[os.path.relpath(full, top)] = src.read()
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "point", ["after_temp_write", "after_exchange", "after_move_aside", "after_readback"]
)
def test_kill_mid_promotion_of_byte_names_then_recover_gives_exact_bytes(
    point: str, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "work", {os.fsdecode(k): v for k, v in BEFORE.items()})
    state = tmp_path / "state"
    first = DaemonProcess(state, {"work": repo}, faults=f"{point}=kill")
    try:
        request = prepare_promotion(first, repo, _changes())
        git_before = git_dir_digest(repo)
        crash_in_promotion(first, request)
    finally:
        first.kill()
    now = _files(repo)
    for name in (EDITED, GONE, CREATED, BACKSLASH):  # each exactly old or exactly new
        assert now.get(name) in (BEFORE.get(name), AFTER.get(name)), name

    second = DaemonProcess(state, {"work": repo})
    try:
        with second.client() as orch:
            op_id = second.first_operation()
            assert orch.get(f"/v1/operations/{op_id}").json()["status"] == "needs_recovery"
            recovered = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
            assert recovered.status_code == 200, recovered.text
            view = recovered.json()
            assert view["status"] == "completed", view
            receipt = orch.get(f"/v1/operations/{op_id}/receipt").json()
    finally:
        second.stop()
    assert _files(repo) == {b"README.md": BEFORE[b"README.md"], **AFTER}
    assert not [n for n in _files(repo) if b".promoter-" in n]
    assert git_dir_digest(repo) == git_before
    assert [t["path"] for t in receipt["targets"]] == [WIRE[n] for n in sorted(WIRE)]
