"""A restore of links and names that are not UTF-8 through the real server.

Every answer is JSON the wire can carry: such a name appears as ``\\xNN`` in the diff,
the operation's steps and its events; the worktree ends byte-exact, links included.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.daemon import Daemon
from tests.support.promotion import git_dir_digest

BASE = "/v1/repositories/work/snapshots"


def entries(repo: Path) -> dict[bytes, tuple[str, bytes]]:
    found: dict[bytes, tuple[str, bytes]] = {}
    top = os.fsencode(repo)
    for directory, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not (directory == top and d == b".git")]
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                found[os.path.relpath(path, top)] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    found[os.path.relpath(path, top)] = ("file", handle.read())
    return found


def test_links_and_latin1_names_are_restored_over_http_with_escaped_names(
    daemon: Daemon, repo: Path
) -> None:
    top = os.fsencode(repo)
    os.symlink("app.py", repo / "src" / "alias")
    with open(os.path.join(top, b"na\xefve.txt"), "wb") as handle:
        handle.write(b"kept name\n")
    git_before = git_dir_digest(repo)
    with daemon.operator() as op:
        base = op.post(BASE, json={"label": "before"}).json()["tree"]
        before = entries(repo)
        os.unlink(repo / "src" / "alias")
        os.symlink("/etc/shadow", repo / "src" / "alias")
        os.unlink(os.path.join(top, b"na\xefve.txt"))
        with open(os.path.join(top, b"\xff\xfe.bin"), "wb") as handle:
            handle.write(b"junk\n")
        os.symlink("../..", repo / "src" / "up")
        broken = op.post(BASE, json={"label": "after"}).json()["tree"]
        diff = op.get(f"{BASE}/diff", params={"from": base, "to": broken})
        assert diff.status_code == 200, diff.text
        body = diff.json()
        assert (body["added"], body["modified"], body["deleted"]) == (
            ["src/up", "\\xff\\xfe.bin"],  # git's order: raw bytes
            ["src/alias"],
            ["na\\xefve.txt"],
        )
        answer = op.post(f"{BASE}/{base}/restore", json={"expected_current_tree": broken})
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "completed"
        operation = op.get(f"/v1/operations/{answer.json()['operation_id']}")
        assert operation.status_code == 200, operation.text
        assert sorted(s["path"] for s in operation.json()["steps"]) == [
            "\\xff\\xfe.bin",
            "na\\xefve.txt",
            "src/alias",
            "src/up",
        ]
    assert entries(repo) == before
    assert os.readlink(repo / "src" / "alias") == "app.py"
    assert git_dir_digest(repo) == git_before
