"""Seeing a bundle before it lands: ``GET /v1/bundles/{id}/diff``, ``bundle show``/``diff``.

The expected diffs are written out by hand, byte for byte, from the bundle's contents.
"""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from promoter.cli import bundle_cmd
from tests.support.daemon import Daemon
from tests.support.promotion import submit

BINARY_OLD = bytes(range(256))
BINARY_NEW = bytes(reversed(range(256)))

EXPECTED = (
    "diff --git a/README.md b/README.md\n"
    "deleted file mode 100644\n"
    "--- a/README.md\n"
    "+++ /dev/null\n"
    "@@ -1 +0,0 @@\n"
    "-# project\n"
    "diff --git a/bin/blob b/bin/blob\n"
    "Binary files a/bin/blob and b/bin/blob differ\n"
    "diff --git a/src/app.py b/src/app.py\n"
    "--- a/src/app.py\n"
    "+++ b/src/app.py\n"
    "@@ -1 +1,2 @@\n"
    "-print('v1')\n"
    "+print('v2')\n"
    "+print('more')\n"
    "\\ No newline at end of file\n"
    "diff --git a/src/new.py b/src/new.py\n"
    "new file mode 100644\n"
    "--- /dev/null\n"
    "+++ b/src/new.py\n"
    "@@ -0,0 +1 @@\n"
    "+x = 1\n"
)


def _bundle(daemon: Daemon, repo: Path, identity: str) -> dict[str, object]:
    (repo / "bin").mkdir()
    (repo / "bin" / "blob").write_bytes(BINARY_OLD)
    from tests.gitutil import commit_all

    commit_all(repo, "binary")
    _, bundle, _ = submit(
        daemon,
        repo,
        identity,
        [
            ("README.md", b"# project\n", None),
            ("bin/blob", BINARY_OLD, BINARY_NEW),
            ("src/app.py", b"print('v1')\n", b"print('v2')\nprint('more')"),
            ("src/new.py", None, b"x = 1\n"),
        ],
    )
    return bundle


def test_bundle_diff_is_built_from_the_stored_blobs(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    bundle = _bundle(daemon, repo, identity)
    with daemon.orchestrator() as orch:
        answer = orch.get(f"/v1/bundles/{bundle['bundle_id']}/diff")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["unified_diff"] == EXPECTED
    assert body["truncated"] is False
    assert [
        (f["path"], f["operation"], f["binary"], f["added"], f["removed"]) for f in body["files"]
    ] == [
        ("README.md", "delete", False, 0, 1),
        ("bin/blob", "modify", True, 0, 0),
        ("src/app.py", "modify", False, 2, 1),
        ("src/new.py", "create", False, 1, 0),
    ]
    assert body["files"][1]["old_bytes"] == 256


def test_bundle_diff_is_cut_at_a_line_end_under_the_cap(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    bundle = _bundle(daemon, repo, identity)
    with daemon.operator() as operator:
        answer = operator.get(f"/v1/bundles/{bundle['bundle_id']}/diff", params={"max_bytes": 100})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["truncated"] is True
    assert body["unified_diff"] == EXPECTED[:90]  # the first file's header, 90 bytes
    assert EXPECTED[89] == "\n" and EXPECTED[90:104].endswith("\n")
    assert len(body["files"]) == 4


def test_only_the_bundles_own_executor_reads_its_diff(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    bundle = _bundle(daemon, repo, identity)
    with daemon.executor("run_other") as other, daemon.executor("run_1") as own:
        refused = other.get(f"/v1/bundles/{bundle['bundle_id']}/diff")
        allowed = own.get(f"/v1/bundles/{bundle['bundle_id']}/diff")
        listed = own.get(f"/v1/bundles/{bundle['bundle_id']}/operations")
        hidden = other.get(f"/v1/bundles/{bundle['bundle_id']}/operations")
    assert refused.status_code == 403
    assert refused.json()["code"] == "forbidden"
    assert hidden.status_code == 403
    assert allowed.status_code == 200
    assert allowed.json()["unified_diff"] == EXPECTED
    assert listed.json() == {"bundle_id": bundle["bundle_id"], "operations": []}


def test_bundle_diff_cap_above_the_maximum_is_refused(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    bundle = _bundle(daemon, repo, identity)
    with daemon.orchestrator() as orch:
        answer = orch.get(f"/v1/bundles/{bundle['bundle_id']}/diff", params={"max_bytes": 1 << 30})
        unknown = orch.get("/v1/bundles/bnd_00000000000000000000000000000000/diff")
    assert answer.status_code == 422
    assert unknown.status_code == 404


def _app() -> typer.Typer:
    app = typer.Typer()
    bundle_cmd.register(app)
    return app


def test_bundle_show_and_diff_commands(daemon: Daemon, repo: Path, identity: str) -> None:
    bundle = _bundle(daemon, repo, identity)
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.orchestrator_token}
    runner = CliRunner()
    shown = runner.invoke(_app(), ["bundle", "show", str(bundle["bundle_id"])], env=env)
    assert shown.exit_code == 0, shown.output
    assert f"bundle {bundle['bundle_id']}: 4 change(s)" in shown.stdout
    assert "delete     README.md   100644 10 B" in shown.stdout
    diffed = runner.invoke(_app(), ["bundle", "diff", str(bundle["bundle_id"])], env=env)
    assert diffed.exit_code == 0, diffed.output
    assert diffed.stdout == " ! bin/blob: binary\n" + EXPECTED
    stat = runner.invoke(_app(), ["bundle", "diff", str(bundle["bundle_id"]), "--stat"], env=env)
    assert stat.exit_code == 0, stat.output
    assert stat.stdout.splitlines() == [
        " delete README.md   +0 -1",
        " modify bin/blob    binary, 256 B -> 256 B",
        " modify src/app.py  +2 -1",
        " create src/new.py  +1 -0",
        " 4 file(s), 3 insertion(s), 2 deletion(s)",
    ]
