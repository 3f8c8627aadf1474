"""What hides code is flagged and shown in ``promoter review``, the console, and MCP.

A promotion held for approval carries a Trojan Source line, a Latin-1 byte and an
executable bit; the operator reading the CLI or the console sees each, with the flags. A
name holding bidi or zero-width characters reads as ``<U+XXXX>`` in ``bundle show`` and
``ops show``, never raw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from promoter.cli import bundle_cmd, review_cmd
from promoter.cli.ops_cmd import ops_app
from promoter.client.sync import PromoterClient
from tests.console.support import held, login
from tests.support.daemon import Daemon
from tests.support.fixtures import Gated
from tests.support.promotion import submit
from tests.workflow.test_mcp_server import _tools

OLD = b"print('v1')\n"
TROJAN = "if access != 'user\u202e \u2066# admin\u2069 \u2066':\n    grant()\n".encode()
LATIN1 = b"# \xa9 ACME\n"


def _held(gated: Gated) -> str:
    daemon, repo, identity = gated
    changes: list[Any] = [
        ("src/app.py", OLD, TROJAN),
        ("setup.py", None, LATIN1),
        (".github/workflows/x.yml", None, b"on: push\n"),
    ]
    return held(daemon, repo, identity, changes)


def _app() -> typer.Typer:
    app = typer.Typer()
    review_cmd.register(app)
    app.command("noop")(lambda: None)
    return app


def test_review_command_flags_and_shows_trojan_source_and_latin1(gated: Gated) -> None:
    daemon = gated[0]
    operation_id = _held(gated)
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    listed = CliRunner().invoke(_app(), ["review"], env=env)
    assert listed.exit_code == 0, listed.output
    out = listed.stdout
    assert f"{operation_id} awaiting approval" in out
    assert " ! .github/workflows/x.yml: ci_config\n" in out
    assert " ! setup.py: not_utf8\n" in out
    assert " ! src/app.py: bidi_control\n" in out
    assert "+if access != 'user<U+202E> <U+2066># admin<U+2069> <U+2066>':\n" in out
    assert "+# \\xa9 ACME\n" in out
    assert "\u202e" not in out
    stat = CliRunner().invoke(_app(), ["review", "--stat"], env=env)
    assert stat.exit_code == 0, stat.output
    assert "+2 -1  [bidi_control]\n" in stat.stdout


def test_console_review_page_badges_and_shows_trojan_source(gated: Gated) -> None:
    daemon = gated[0]
    _held(gated)
    with login(daemon) as client:
        page = client.get("/ui/review")
    assert page.status_code == 200
    html = page.text
    assert '<span class="flag">bidi_control</span>' in html
    assert '<span class="flag">ci_config</span>' in html
    assert '<span class="flag">not_utf8</span>' in html
    assert "+if access != &#39;user&lt;U+202E&gt; &lt;U+2066&gt;# admin" in html
    assert "+# \\xa9 ACME" in html
    assert "\u202e" not in html and "\u2066" not in html


def test_mcp_bundle_diff_flags_and_shows_trojan_source(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    _, bundle, _ = submit(daemon, repo, identity, [("src/app.py", OLD, TROJAN)])
    orch = PromoterClient(daemon.url, daemon.orchestrator_token)
    token = str(orch.mint_executor_token("run_1")["token"])
    _, (diff,) = _tools(
        daemon, tmp_path, token, [("bundle_diff", {"bundle_id": bundle["bundle_id"]})]
    )
    assert diff["files"][0]["flags"] == ["bidi_control"]
    assert (
        "+if access != 'user<U+202E> <U+2066># admin<U+2069> <U+2066>':\n" in (diff["unified_diff"])
    )


SPOOF = "src/evil\u202etxt.exe\u200b.py"  # reads "src/evilyp.\u200bexe.txt"


def test_a_name_with_bidi_and_zero_width_characters_cannot_pose_in_bundle_and_ops_show(
    gated: Gated,
) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [(SPOOF, None, b"x\n")])
    with daemon.operator() as operator:
        view = operator.get(f"/v1/operations/{operation_id}").json()
        approved = operator.post(f"/v1/operations/{operation_id}/approve", json={"wait": True})
    assert approved.json()["status"] == "completed", approved.text
    app = typer.Typer()
    bundle_cmd.register(app)
    app.add_typer(ops_app, name="ops")
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token, "COLUMNS": "200"}
    for argv in (["bundle", "show", view["bundle_id"]], ["ops", "show", operation_id]):
        out = CliRunner().invoke(app, argv, env=env)
        assert out.exit_code == 0, out.output
        assert "\u202e" not in out.stdout and "\u200b" not in out.stdout, argv
        assert "src/evil<U+202E>txt.exe<U+200B>.py" in out.stdout, out.stdout
