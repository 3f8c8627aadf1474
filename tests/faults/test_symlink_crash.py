"""A daemon killed mid-promotion of links (mode 120000), restarted and recovered.

The bundle creates a link, retargets one, turns a file into a link and a link into a
file, and deletes a link. Killed at each point where a temp link or a displaced leaf
exists, a fresh daemon recovers it by the same settle and compare-and-swap as files:
every link text exact, no temp name left, one receipt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.flows import git, make_bundle, sha, state
from tests.support.process import DaemonProcess, crash_in_promotion, granted, promotion_request

FILE = b"a regular file\n"
POINTS = [
    "after_temp_write",
    "before_replace",
    "after_exchange",
    "after_replace",
    "after_move_aside",
    "after_unlink",
    "after_replaces",
]


def _repo(path: Path) -> Path:
    (path / "certs" / "expired" / "ca").mkdir(parents=True)
    (path / "certs" / "expired" / "ca" / "ca.crt").write_bytes(b"cert\n")
    (path / "certs" / "README.md").write_bytes(FILE)
    os.symlink("../expired/ca", path / "certs" / "old")
    os.symlink("expired", path / "certs" / "gone")
    os.symlink("README.md", path / "certs" / "was-link")
    git(path.parent, "init", "-q", "-b", "main", str(path))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "links")
    return path


def _link(text: bytes) -> dict[str, Any]:
    return state(text, "120000")


CHANGES: list[dict[str, Any]] = [
    {"path": "certs/README.md", "operation": "modify", "old": state(FILE), "new": _link(b"x")},
    {"path": "certs/gone", "operation": "delete", "old": _link(b"expired"), "new": state(None)},
    {"path": "certs/new", "operation": "create", "old": state(None), "new": _link(b"expired/ca")},
    {
        "path": "certs/old",
        "operation": "modify",
        "old": _link(b"../expired/ca"),
        "new": _link(b"expired"),
    },
    {
        "path": "certs/was-link",
        "operation": "modify",
        "old": _link(b"README.md"),
        "new": state(FILE),
    },
]
BLOBS = [FILE, b"x", b"expired", b"expired/ca", b"../expired/ca", b"README.md"]
AFTER = {
    "certs/README.md": ("link", b"x"),
    "certs/new": ("link", b"expired/ca"),
    "certs/old": ("link", b"expired"),
    "certs/was-link": ("file", FILE),
    "certs/expired/ca/ca.crt": ("file", b"cert\n"),
}


def _entries(repo: Path) -> dict[str, tuple[str, bytes]]:
    found: dict[str, tuple[str, bytes]] = {}
    for directory, dirs, files in os.walk(repo / "certs"):
        for name in dirs + files:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, repo)
            if os.path.islink(path):
                found[rel] = ("link", os.fsencode(os.readlink(path)))
            elif os.path.isfile(path):
                found[rel] = ("file", Path(path).read_bytes())
    return found


def _prepare(daemon: DaemonProcess, repo: Path) -> dict[str, Any]:
    with daemon.client() as orch:
        grant = granted(orch, repo, symlinks="inside")
    bundle = make_bundle(grant, CHANGES)
    with daemon.executor("run_1") as ex:
        for data in BLOBS:
            ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data)
        answer = ex.post("/v1/bundles", json=bundle)
        assert answer.status_code == 201, answer.text
    return promotion_request(bundle, answer)


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_kill_mid_link_promotion_then_recover_gives_exact_link_texts(
    point: str, tmp_path: Path
) -> None:
    repo = _repo(tmp_path / "work")
    state_dir = tmp_path / "state"
    first = DaemonProcess(state_dir, {"work": repo}, faults=f"{point}=kill")
    try:
        request = _prepare(first, repo)
        crash_in_promotion(first, request)
    finally:
        first.kill()

    second = DaemonProcess(state_dir, {"work": repo})
    try:
        with second.client() as orch:
            op_id = second.first_operation()
            recovered = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
            assert recovered.status_code == 200, recovered.text
            assert recovered.json()["status"] == "completed", recovered.json()
    finally:
        second.stop()
    assert _entries(repo) == AFTER
    assert not [p for p in os.listdir(repo / "certs") if p.startswith(".promoter-")]
