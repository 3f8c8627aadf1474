"""The console's page of a promotion refused with ``target_drift``, over HTTP.

The page names the merge as the action (not "None: the operation is refused") and shows
the drift as a table of path, expected and found state, escaped, never as raw JSON.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tests.console.support import AGENT, BASE, PERSON, login
from tests.support.daemon import Daemon
from tests.support.promotion import promote, submit


def test_the_refused_drift_page_offers_the_merge_and_shows_the_drift_table(
    work: tuple[Daemon, Path],
) -> None:
    daemon, repo = work
    identity = daemon.services.registry.by_name("work").identity
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", BASE, AGENT)])
    (repo / "src" / "app.py").write_bytes(PERSON)
    view = promote(daemon, bundle, receipt).json()
    assert (view["status"], view["code"]) == ("refused", "target_drift")
    with login(daemon) as client:
        page = client.get(f"/ui/operations/{view['operation_id']}")
    assert page.status_code == 200, page.text
    html = page.text
    actions = html[html.index('<section id="actions">') : html.index("</section>")]
    assert "None: the operation is" not in actions
    assert '<button type="submit" id="merge">Merge</button>' in actions
    table = re.search(r'<table id="drift">.*?</table>', actions, re.S)
    assert table is not None, actions
    rows = re.findall(
        r"<tr><td><code class=\"path\">(.*?)</code></td>(.*?)</tr>", table.group(0), re.S
    )
    assert [path for path, _ in rows] == ["src/app.py"]
    cells = rows[0][1]
    expected, found = hashlib.sha256(BASE).hexdigest(), hashlib.sha256(PERSON).hexdigest()
    assert cells.index(expected[:12]) < cells.index(found[:12])  # expected, then found
    assert f"{len(PERSON)} B" in cells
    assert "&#34;sha256&#34;" not in actions and '"sha256"' not in actions  # no raw JSON
