"""The console's page of a promotion refused with ``target_drift``, over HTTP.

The page names the merge as the action (not "None: the operation is refused") and shows
the drift as a table of path, expected and found state, escaped, never as raw JSON. A name
holding bidi or zero-width characters is shown as ``<U+XXXX>`` there and on the
merge's page, never raw.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tests.console.support import AGENT, BASE, PERSON, hidden, login
from tests.support.daemon import Daemon
from tests.support.fixtures import Serve
from tests.support.promotion import promote, submit
from tests.support.repos import Repos


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


SPOOF = "src/evil\u202etxt.exe\u200b.py"  # reads "src/evilyp.\u200bexe.txt"
SHOWN = "src/evil&lt;U+202E&gt;txt.exe&lt;U+200B&gt;.py"
CLASH = BASE.replace(b"line 2\n", "line 2 \u202eby the person\n".encode())


def test_a_drifted_name_with_bidi_controls_cannot_pose_on_the_drift_and_merge_pages(
    repos: Repos, serve: Serve
) -> None:
    repo = repos(files={SPOOF: BASE})
    daemon = serve({"work": repo})
    identity = daemon.services.registry.by_name("work").identity
    _, bundle, receipt = submit(daemon, repo, identity, [(SPOOF, BASE, AGENT)])
    (repo / SPOOF).write_bytes(CLASH)
    view = promote(daemon, bundle, receipt).json()
    assert (view["status"], view["code"]) == ("refused", "target_drift")
    with login(daemon) as client:
        page = client.get(f"/ui/operations/{view['operation_id']}").text
        merged = client.post(
            f"/ui/operations/{view['operation_id']}/merge", data={"csrf": hidden(page)}
        )
    drift = page[page.index('<table id="drift">') : page.index("</table>")]
    assert f'<code class="path">{SHOWN}</code>' in drift
    assert "\u202e" not in page and "\u200b" not in page
    assert merged.status_code == 409, merged.text
    assert "\u202e" not in merged.text and "\u200b" not in merged.text
    assert merged.text.count(f'<code class="path">{SHOWN}</code>') == 2  # the table, the text
    assert "line 2 &lt;U+202E&gt;by the person\n" in merged.text
    assert (repo / SPOOF).read_bytes() == CLASH
