"""The console's repositories and snapshots pages: timeline, diff, capture and restore.

Restores go through the engine with ``expected_current_tree`` taken from the page; a
worktree that moved after the page was shown is refused with a clear message and its
bytes are kept.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.console.support import OLD, hidden, login
from tests.support.daemon import Daemon

Gated = tuple[Daemon, Path, str]
EDIT = b"print('the user edit')\n"


def _capture(client: Any, csrf: str, label: str) -> None:
    answer = client.post("/ui/repositories/gated/snapshots", data={"csrf": csrf, "label": label})
    assert answer.status_code == 303, answer.text


def _restore_forms(page: str) -> list[tuple[str, str]]:
    """(action, expected_current_tree) of every restore form on the snapshots page."""
    return re.findall(
        r'<form method="post" action="([^"]+/restore)">\s*<input type="hidden" name="csrf" '
        r'value="[^"]*">\s*<input type="hidden" name="expected_current_tree" value="([0-9a-f]+)">',
        page,
    )


def test_repositories_page_counts_dirty_paths(gated: Gated) -> None:
    daemon, repo, _ = gated
    (repo / "notes.txt").write_bytes(b"mine\n")
    (repo / "src" / "app.py").write_bytes(EDIT)
    with login(daemon) as client:
        page = client.get("/ui/repositories")
    assert page.status_code == 200
    assert '<td class="dirty">2</td>' in page.text
    assert "/ui/repositories/gated/snapshots" in page.text


def test_restore_a_snapshot_from_the_timeline(gated: Gated) -> None:
    daemon, repo, _ = gated
    with login(daemon) as client:
        csrf = hidden(client.get("/ui/repositories").text)
        _capture(client, csrf, "before")
        (repo / "src" / "app.py").write_bytes(EDIT)
        _capture(client, csrf, "after <b>edit</b>")
        page = client.get("/ui/repositories/gated/snapshots").text
        assert "after &lt;b&gt;edit&lt;/b&gt;" in page
        trees = re.findall(r"<td><code>([0-9a-f]{40})</code></td>", page)
        assert len(trees) == 2  # newest first
        diff = client.get(
            "/ui/repositories/gated/snapshots", params={"from": trees[1], "to": trees[0]}
        ).text
        assert "+print(&#39;the user edit&#39;)" in diff
        ((action, expected),) = _restore_forms(page)
        assert expected == trees[0]
        answer = client.post(action, data={"csrf": csrf, "expected_current_tree": expected})
        assert answer.status_code == 303, answer.text
        operation = client.get(answer.headers["location"]).text
    assert 'id="status">completed<' in operation
    assert (repo / "src" / "app.py").read_bytes() == OLD


def test_restore_from_a_stale_page_is_refused_and_keeps_the_bytes(gated: Gated) -> None:
    daemon, repo, _ = gated
    with login(daemon) as client:
        csrf = hidden(client.get("/ui/repositories").text)
        _capture(client, csrf, "before")
        (repo / "src" / "app.py").write_bytes(EDIT)
        _capture(client, csrf, "after")
        page = client.get("/ui/repositories/gated/snapshots").text
        (repo / "src" / "app.py").write_bytes(b"typed after the page was shown\n")
        ((action, expected),) = _restore_forms(page)
        answer = client.post(action, data={"csrf": csrf, "expected_current_tree": expected})
    assert answer.status_code == 409
    assert "snapshot_stale" in answer.text
    assert "The worktree changed since this page was shown: nothing was restored." in answer.text
    assert (repo / "src" / "app.py").read_bytes() == b"typed after the page was shown\n"


def test_csrf_less_restore_and_capture_are_refused(gated: Gated) -> None:
    daemon, repo, _ = gated
    with login(daemon) as client:
        csrf = hidden(client.get("/ui/repositories").text)
        _capture(client, csrf, "one")
        page = client.get("/ui/repositories/gated/snapshots").text
        capture = client.post("/ui/repositories/gated/snapshots", data={"label": "x"})
        tree = re.findall(r"<td><code>([0-9a-f]{40})</code></td>", page)[0]
        restore = client.post(
            f"/ui/repositories/gated/snapshots/{tree}/restore",
            data={"expected_current_tree": tree},
        )
        after = client.get("/ui/repositories/gated/snapshots").text
    assert capture.status_code == 403
    assert restore.status_code == 403
    assert len(re.findall(r"<td><code>([0-9a-f]{40})</code></td>", after)) == 1
