"""A review never shows a differing file as an empty diff: every line of a large file the
agent creates is shown, or the file is named as not shown (protocol: api#what-a-review-shows).

``make serve`` starts the daemon with ``--state-dir .promoter``, a relative directory. A
blob's stored file was then named relative to the daemon's directory, and the ``git diff
--no-index`` of a large side (over the sizes difflib takes) runs from ``/``: git could not
read the file, exited 1 as for "the sides differ", and printed no hunk. The review showed
the file's header alone, ``added: 0``, ``shown: full``, nothing unseen: a reviewer
approving 3000 lines they never saw. The state directory is now absolute from the start,
and a diff that comes back empty for differing sides is summarized and named as unseen.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.config import RepositoryConfig
from promoter.engine.review import diff
from tests.support.daemon import Daemon, running_daemon
from tests.support.fixtures import Repos
from tests.support.promotion import submit

LINES = b"".join(b"payload(%d)\n" % n for n in range(1, 3001))  # git, not difflib, diffs it


def _created(daemon: Daemon, repo: Path) -> dict[str, object]:
    identity = daemon.services.registry.by_name("app").identity
    _, bundle, _ = submit(daemon, repo, identity, [("src/big.py", None, LINES)])
    with daemon.operator() as operator:
        answer = operator.get(f"/v1/bundles/{bundle['bundle_id']}/diff")
    assert answer.status_code == 200, answer.text
    page: dict[str, object] = answer.json()
    return page


@pytest.fixture
def relative(tmp_path: Path, repos: Repos, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    """A daemon started as ``make serve`` starts it: its state directory relative."""
    repo = repos("app", {"README": b"readme\n"})
    monkeypatch.chdir(tmp_path)
    config = RepositoryConfig(path=repo)
    with running_daemon(Path(".promoter"), {"app": config}) as daemon:
        yield daemon


def test_a_daemon_with_a_relative_state_dir_shows_every_line_of_a_large_created_file(
    relative: Daemon, repos: Repos
) -> None:
    page = _created(relative, repos.root / "app")
    (entry,) = page["files"]  # type: ignore[misc]
    assert (entry["added"], entry["shown"], entry["summarized"]) == (3000, "full", False)
    assert page["unseen"] == []
    text = str(page["unified_diff"])
    assert text.startswith(
        "diff --git a/src/big.py b/src/big.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/src/big.py\n@@ -0,0 +1,3000 @@\n+payload(1)\n"
    )
    assert text.endswith("+payload(3000)\n")
    assert relative.services.settings.state_dir == (Path.cwd() / ".promoter")


def test_a_diff_that_comes_back_empty_for_differing_sides_is_named_unseen(
    relative: Daemon, repos: Repos, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git exiting 1 with no hunk (a side it could not read) is never a whole, empty diff."""
    monkeypatch.setattr(diff._GitDiff, "lines", lambda self: iter(()))
    page = _created(relative, repos.root / "app")
    (entry,) = page["files"]  # type: ignore[misc]
    assert (entry["added"], entry["summarized"]) == (0, True)
    assert [u["path"] for u in page["unseen"]] == ["src/big.py"]  # type: ignore[attr-defined]
    assert "Not diffed: the diff came back empty, yet the two sides differ: " in str(
        page["unified_diff"]
    )
