"""A moved file is shown as a rename on every surface; the bundle stays a delete and a create.

A bundle deletes ``src/long.py`` and creates ``src/moved.py`` with one of its 30 lines
changed (a similar rename), and deletes ``src/app.py`` and creates ``src/main.py`` with
the same bytes (an exact rename). The API's diff pairs each (``rename_from``,
``similarity``; the deleted path names ``renamed_to``) and shows only the changed line
with its context, never the whole file twice; ``promoter review`` prints
``rename a → b (N %)``; the console's review page says the same; the MCP tool answers
the API's pairs. An unrelated delete and create are not paired. Partial approval keeps
an exact rename together (``selection_splits_pair``), as it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from promoter.cli import review_cmd
from promoter.client.sync import PromoterClient
from promoter.domain import renames
from tests.console.support import held, login
from tests.support.fixtures import Gated
from tests.support.promotion import submit
from tests.workflow.test_mcp_server import _tools

LONG = b"".join(b"value_%d = %d\n" % (i, i) for i in range(30))
EDITED = LONG.replace(b"value_10 = 10\n", b"value_10 = 'ten'\n")
OLD = b"print('v1')\n"
FILES = {"README.md": b"# project\n", "src/app.py": OLD, "src/long.py": LONG}
CHANGES: list[Any] = [
    ("src/long.py", LONG, None),
    ("src/moved.py", None, EDITED),
    ("src/app.py", OLD, None),
    ("src/main.py", None, OLD),
    ("README.md", b"# project\n", None),  # unrelated: not a rename of anything
    ("docs/new.md", None, b"a new page\nwith nothing of the readme\n"),
]
SIMILARITY = renames.similarity(LONG, EDITED)


pytestmark = pytest.mark.gated(FILES)


def test_similarity_is_shared_line_bytes_over_the_larger_side() -> None:
    assert SIMILARITY == (len(LONG) - len(b"value_10 = 10\n")) * 100 // len(EDITED) == 95
    assert renames.similarity(OLD, OLD) == 100
    assert renames.similarity(b"a\nb\n", b"c\nd\n") == 0


def _by_path(diff: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in diff["files"]}


def test_the_api_diff_pairs_renames_and_shows_only_the_changed_lines(gated: Gated) -> None:
    daemon, repo, identity = gated
    _, bundle, _ = submit(daemon, repo, identity, CHANGES)
    ops = {c["path"]: c["operation"] for c in bundle["changes"]}
    assert ops["src/long.py"] == "delete" and ops["src/moved.py"] == "create"  # unchanged
    with daemon.orchestrator() as orch:
        answer = orch.get(f"/v1/bundles/{bundle['bundle_id']}/diff")
    assert answer.status_code == 200, answer.text
    diff = answer.json()
    files = _by_path(diff)
    moved = files["src/moved.py"]
    assert (moved["rename_from"], moved["similarity"]) == ("src/long.py", SIMILARITY)
    assert (moved["added"], moved["removed"]) == (1, 1)
    assert files["src/long.py"]["renamed_to"] == "src/moved.py"
    assert (files["src/main.py"]["rename_from"], files["src/main.py"]["similarity"]) == (
        "src/app.py",
        100,
    )
    assert files["README.md"]["renamed_to"] is None
    assert files["docs/new.md"]["rename_from"] is None
    text = diff["unified_diff"]
    assert (
        "diff --git a/src/long.py b/src/moved.py\n"
        f"similarity index {SIMILARITY}%\n"
        "rename from src/long.py\n"
        "rename to src/moved.py\n"
        "--- a/src/long.py\n"
        "+++ b/src/moved.py\n"
        "@@ -8,7 +8,7 @@\n"
    ) in text
    assert "-value_10 = 10\n+value_10 = 'ten'\n" in text
    assert "value_0 = 0" not in text and "value_29" not in text  # never the whole file
    assert (
        "diff --git a/src/app.py b/src/main.py\nsimilarity index 100%\n"
        "rename from src/app.py\nrename to src/main.py\n"
    ) in text
    assert "+print('v1')" not in text and "-print('v1')" not in text
    assert f"renamed to src/moved.py ({SIMILARITY} %): its diff is there\n" in text
    assert "-# project\n" in text  # the unrelated delete, shown whole


def test_review_command_and_console_show_a_rename_as_a_rename(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, CHANGES)
    app = typer.Typer()
    review_cmd.register(app)
    app.command("noop")(lambda: None)
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    listed = CliRunner().invoke(app, ["review"], env=env)
    assert listed.exit_code == 0, listed.output
    assert f"{operation_id} awaiting approval" in listed.stdout
    assert f" rename src/long.py → src/moved.py ({SIMILARITY} %)\n" in listed.stdout
    assert " rename src/app.py → src/main.py (100 %)\n" in listed.stdout
    assert "value_0 = 0" not in listed.stdout
    stat = CliRunner().invoke(app, ["review", "--stat"], env=env)
    assert stat.exit_code == 0, stat.output
    assert f" rename src/long.py → src/moved.py ({SIMILARITY} %)" in stat.stdout
    assert "delete src/long.py" not in stat.stdout and "delete README.md" in stat.stdout
    with login(daemon) as client:
        page = client.get("/ui/review")
    assert page.status_code == 200
    html = page.text
    assert (
        'rename <code class="path">src/long.py</code> → <code class="path">src/moved.py</code>'
        f" ({SIMILARITY} %)"
    ) in html
    assert "delete (renamed)" in html
    assert "value_0 = 0" not in html


def test_mcp_bundle_diff_shows_the_rename(tmp_path: Path, gated: Gated) -> None:
    daemon, repo, identity = gated
    _, bundle, _ = submit(daemon, repo, identity, CHANGES)
    orch = PromoterClient(daemon.url, daemon.orchestrator_token)
    token = str(orch.mint_executor_token("run_1")["token"])
    _, (diff,) = _tools(
        daemon, tmp_path, token, [("bundle_diff", {"bundle_id": bundle["bundle_id"]})]
    )
    files = _by_path(diff)
    assert files["src/moved.py"]["rename_from"] == "src/long.py"
    assert files["src/moved.py"]["similarity"] == SIMILARITY
    assert "rename to src/moved.py\n" in diff["unified_diff"]
