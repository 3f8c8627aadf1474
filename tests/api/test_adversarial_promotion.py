"""P1/P2 through the whole engine: attackers racing a promotion never get a byte outside.

A thread flips the target's parent directory between the real directory and a symlink to
a directory outside the worktree holding identical files, in a bounded loop, while
promotions run through the API. Whatever each promotion ends as, the outside directory
is byte-identical and nothing new appears there.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tests.support.daemon import running_daemon
from tests.support.flows import init_repo
from tests.support.promotion import promote, submit, tree_bytes

FILES = {f"src/f{i}.txt": f"v1 {i}\n".encode() for i in range(20)}


def _flipper(repo: Path, outside: Path, stop: threading.Event, flips: list[int]) -> None:
    src, real = repo / "src", repo / "src.real"
    count = 0
    while not stop.is_set() and count < 20_000:
        try:
            os.rename(src, real)
            os.symlink(outside, src)
            os.unlink(src)
            os.rename(real, src)
        except OSError:
            if not src.exists() and real.exists():
                os.rename(real, src)
        count += 1
    flips.append(count)


def test_parent_flipping_to_outside_never_writes_outside(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    outside = tmp_path / "outside"
    outside.mkdir()
    for path, data in FILES.items():
        (outside / Path(path).name).write_bytes(data)
    outside_before = tree_bytes(outside)
    changes = [(p, d, d.replace(b"v1", b"v2")) for p, d in FILES.items()]
    changes.append(("src/created.txt", None, b"new\n"))
    with running_daemon(tmp_path / "state", {"work": repo}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, changes)
        stop, flips = threading.Event(), []
        attacker = threading.Thread(target=_flipper, args=(repo, outside, stop, flips))
        attacker.start()
        statuses = []
        try:
            for _ in range(5):
                view = promote(daemon, bundle, receipt).json()
                statuses.append(view["status"])
                if view["status"] == "completed":
                    break
        finally:
            stop.set()
            attacker.join()
        if (repo / "src.real").exists() and not (repo / "src").exists():
            os.rename(repo / "src.real", repo / "src")
    assert flips and flips[0] > 0
    assert tree_bytes(outside) == outside_before
    assert sorted(p.name for p in outside.iterdir()) == sorted(Path(p).name for p in FILES)
    assert set(statuses) <= {"completed", "refused", "needs_reconciliation"}
    now = tree_bytes(repo)
    for path, old, new in changes:
        # the attacker may leave the real directory renamed away (when promoter made a
        # new src/ while it was gone, the flip back fails): the bytes are then there
        moved = "src.real/" + path.removeprefix("src/")
        found = {now.get(path, (None, 0))[0], now.get(moved, (None, 0))[0]} - {None}
        assert found <= {old, new} if found else None in (old, new), (path, found)
    assert not list(repo.rglob(".promoter-tmp-*"))
