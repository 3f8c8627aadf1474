"""Every byte reviewable (TESTS.md E2, protocol: api#every-byte-reviewable): a cut diff hides
nothing.

The attack: a bundle whose harmless files fill the review's budget, then a one-line edit
in the path that sorts last. Before, the diff was cut at 8 MiB, no request could reach
the rest, the last file showed only ``+1 -0`` with no sign that it was not shown, and an
approval promoted it. Here the tail is reachable by path and by cursor through the real
HTTP API, the CLI, the console (HTTP and Chromium) and the MCP tool, every answer lists
the files it does not show in full, a file's flags do not depend on the cut, and an
approval (API, CLI, console, ``promoter run`` on a pseudo-terminal) that never names the
tail is refused, or asks for it, with nothing changed. The daemons are real (in-process, loopback); one test carries the
attack at its real size (11 MiB against the default 8 MiB cap), the others set
``review_diff_page_bytes`` to 64 KiB and fill it with a few hundred KiB.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from collections.abc import Iterator
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from promoter.cli import bundle_cmd, ops_cmd, review_cmd
from promoter.engine.review.diff import MAX_LIMIT
from promoter.errors import DiffNotSeen, NotConfirmed
from promoter.executor import sandbox as sandboxes
from tests.console.browser import chromium_browser
from tests.console.support import login
from tests.support import bwrap
from tests.support.daemon import Daemon, running_daemon
from tests.support.fixtures import Gated
from tests.support.flows import init_repo, sha, state, upload
from tests.support.promotion import operation_view, promote, submit, tree_bytes, unchanged
from tests.workflow.test_mcp_server import _tools

ROOT = Path(__file__).resolve().parents[2]
KIB = 1024
MIB = 1024 * KIB
PAGE = 64 * KIB
TAIL = "zzz/tail.py"
TAIL_OLD = b"def check(user):\n    return user.is_admin\n"
TAIL_NEW = b"def check(user):\n    return True\n"
TAIL_DIFF = (
    "diff --git a/zzz/tail.py b/zzz/tail.py\n"
    "--- a/zzz/tail.py\n"
    "+++ b/zzz/tail.py\n"
    "@@ -1,2 +1,2 @@\n"
    " def check(user):\n"
    "-    return user.is_admin\n"
    "+    return True\n"
)


def _harmless(name: str, size: int) -> bytes:
    """``size`` bytes of plain lines (a created file's diff is about as long)."""
    line = f"# {name}: nothing to see here, move along\n".encode()
    return (line * (size // len(line) + 1))[: size - 1] + b"\n"


def _filler(count: int, size: int) -> list[tuple[str, None, bytes]]:
    return [(f"docs/f{i}.md", None, _harmless(f"f{i}", size)) for i in range(count)]


# a repository under the approval gate, a review page of 64 KiB
pytestmark = pytest.mark.gated(
    {"README.md": b"# project\n", TAIL: TAIL_OLD}, review_diff_page_bytes=PAGE
)


def _held(gated: Gated, changes: list[Any], second: bool = False) -> tuple[str, str]:
    daemon, repo, identity = gated
    grant = "grt_test2" if second else "grt_test1"
    _, bundle, receipt = submit(daemon, repo, identity, changes, grant_id=grant, lease=not second)
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 202, answer.text
    assert answer.json()["status"] == "awaiting_approval"
    return str(answer.json()["operation_id"]), str(bundle["bundle_id"])


def _attack(gated: Gated) -> tuple[str, str]:
    """200 KiB of harmless text, then the one-line edit of the path that sorts last."""
    return _held(gated, [*_filler(2, 100 * KIB), (TAIL, TAIL_OLD, TAIL_NEW)])


def _diff(daemon: Daemon, bundle_id: str, **params: Any) -> dict[str, Any]:
    given = {k: v for k, v in params.items() if v is not None}
    with daemon.operator() as operator:
        answer = operator.get(f"/v1/bundles/{bundle_id}/diff", params=given)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _approve(daemon: Daemon, operation_id: str, **body: Any) -> Any:
    with daemon.operator() as operator:
        return operator.post(f"/v1/operations/{operation_id}/approve", json={"wait": True, **body})


def _app() -> typer.Typer:
    app = typer.Typer()
    review_cmd.register(app)
    bundle_cmd.register(app)
    ops_cmd.register(app)
    return app


def test_tail_change_after_11_mib_is_reachable_by_path(tmp_path: Path) -> None:
    # the attack at its real size, against the daemon's defaults: three files of 3.7 MiB
    # (each under the 4 MiB cap, so diffed) fill the largest answer (8 MiB)
    repo = init_repo(tmp_path / "work", {"README.md": b"# project\n", TAIL: TAIL_OLD})
    changes: list[Any] = [*_filler(3, 3_700_000), (TAIL, TAIL_OLD, TAIL_NEW)]
    with running_daemon(tmp_path / "state", {"work": repo}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, _ = submit(daemon, repo, identity, changes)
        whole = _diff(daemon, bundle["bundle_id"], max_bytes=MAX_LIMIT)
        by_path = _diff(daemon, bundle["bundle_id"], path=TAIL)
        resumed = _diff(
            daemon, bundle["bundle_id"], cursor=whole["next_cursor"], max_bytes=MAX_LIMIT
        )

    assert whole["truncated"] is True
    assert TAIL not in whole["unified_diff"]
    tail = next(f for f in whole["files"] if f["path"] == TAIL)
    assert (tail["shown"], tail["added"], tail["removed"]) == ("none", 1, 1)
    unseen = {u["path"]: u for u in whole["unseen"]}
    assert sorted(unseen) == ["docs/f2.md", TAIL]  # f2 is cut part-way, the tail not begun
    assert unseen["docs/f2.md"]["shown"] == "partial"
    assert unseen[TAIL] == {
        "path": TAIL,
        "path_shown": TAIL,
        "operation": "modify",
        "old_bytes": len(TAIL_OLD),
        "new_bytes": len(TAIL_NEW),
        "diff_bytes": len(TAIL_DIFF.encode()),
        "added": 1,
        "removed": 1,
        "flags": [],
        "shown": "none",
        "summarized": False,
        "cursor": "3:0",
    }

    assert by_path["unified_diff"] == TAIL_DIFF
    assert by_path["truncated"] is False and by_path["next_cursor"] is None
    assert [f["path"] for f in by_path["files"]] == [TAIL]
    assert by_path["files"][0]["shown"] == "full" and by_path["unseen"] == []
    assert by_path["files"][0]["new_sha256"] == sha(TAIL_NEW)

    # the rest of the bundle from where the cut left it: the end of f2, then the tail
    assert resumed["unified_diff"].endswith(TAIL_DIFF)
    assert resumed["next_cursor"] is None
    # a later page diffs only what it shows; every file is still listed with its flags
    assert [f["added"] for f in resumed["files"]] == [None, None, whole["files"][2]["added"], 1]


def test_whole_bundle_read_page_by_page_is_byte_identical(gated: Gated) -> None:
    daemon = gated[0]
    _, bundle_id = _attack(gated)
    whole = _diff(daemon, bundle_id, max_bytes=MAX_LIMIT)
    assert whole["truncated"] is False and whole["unseen"] == []
    pages, cursor = [], None
    while True:
        page = _diff(daemon, bundle_id, **({"cursor": cursor} if cursor else {}))
        assert len(page["unified_diff"].encode()) <= PAGE  # the daemon's page, by default
        assert page["limit"] == PAGE
        pages.append(page["unified_diff"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(pages) == 4
    assert "".join(pages) == whole["unified_diff"]
    assert pages[-1].endswith(TAIL_DIFF)


def test_a_line_longer_than_a_page_is_split_and_rejoined_exactly(gated: Gated) -> None:
    daemon = gated[0]
    long_line = "é".encode() * (50 * KIB) + b"\n"  # 100 KiB, two-byte characters
    _, bundle_id = _held(gated, [("long.txt", None, b"start\n" + long_line)])
    whole = _diff(daemon, bundle_id, max_bytes=MAX_LIMIT)["unified_diff"]
    texts, cursor = [], None
    while True:
        page = _diff(daemon, bundle_id, path="long.txt", max_bytes=40_001, cursor=cursor)
        assert 0 < len(page["unified_diff"].encode()) <= 40_001
        texts.append(page["unified_diff"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(texts) == 4  # "+start", then the long line in three cuts
    assert "".join(texts) == whole
    assert ("+" + long_line.decode()) in whole


def test_flags_of_the_tail_do_not_depend_on_the_cut(gated: Gated) -> None:
    daemon, repo, identity = gated
    trojan = b"def check(user):\n    return user.is_admin  # \xe2\x80\xae nimda\n"
    change = {
        "path": TAIL,
        "operation": "modify",
        "old": state(TAIL_OLD, "100644"),
        "new": state(trojan, "100755"),
    }
    with daemon.executor("run_1") as executor:
        upload(executor, TAIL_OLD, trojan)
    _, bundle_id = _held(gated, [*_filler(2, 100 * KIB), change])
    cut = _diff(daemon, bundle_id)
    alone = _diff(daemon, bundle_id, path=TAIL)
    wanted = ["bidi_control", "executable"]
    assert next(f for f in cut["files"] if f["path"] == TAIL)["flags"] == wanted
    assert next(u for u in cut["unseen"] if u["path"] == TAIL)["flags"] == wanted
    assert alone["files"][0]["flags"] == wanted
    assert "<U+202E>" in alone["unified_diff"]


def test_approval_that_never_saw_the_tail_is_refused(gated: Gated) -> None:
    daemon, repo, _ = gated
    operation_id, bundle_id = _attack(gated)
    before, view = tree_bytes(repo), operation_view(daemon, operation_id)

    refused = _approve(daemon, operation_id, note="looks harmless")
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["code"] == "diff_not_seen"
    assert [p["path"] for p in problem["paths"]] == ["docs/f0.md", "docs/f1.md", TAIL]
    assert problem["paths"][2]["new_bytes"] == len(TAIL_NEW)
    assert "zzz/tail.py" in problem["detail"]
    # naming the harmless ones only is not enough: the tail is still unnamed
    partly = _approve(daemon, operation_id, seen=["docs/f0.md", "docs/f1.md"])
    assert partly.status_code == 422, partly.text
    assert [p["path"] for p in partly.json()["paths"]] == [TAIL]
    # a name that is not in the bundle is an error, not a pass
    stranger = _approve(daemon, operation_id, seen=["zzz/other.py"], all_seen=True)
    assert stranger.status_code == 422 and stranger.json()["code"] == "selection_invalid"
    assert unchanged(operation_view(daemon, operation_id)) == unchanged(view)
    assert tree_bytes(repo) == before

    done = _approve(daemon, operation_id, seen=["docs/f0.md", "docs/f1.md", TAIL])
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "completed"
    assert (repo / TAIL).read_bytes() == TAIL_NEW
    decision = next(
        e for e in operation_view(daemon, operation_id)["events"] if e["kind"] == "decision"
    )
    assert decision["payload"]["seen"] == {
        "all_seen": False,
        "paths": ["docs/f0.md", "docs/f1.md", TAIL],
    }


def test_all_seen_and_partial_approval_without_the_unseen(gated: Gated) -> None:
    daemon, repo, _ = gated
    operation_id, _ = _attack(gated)
    # declining the harmless files: only the tail needs a name
    refused = _approve(daemon, operation_id, **{"except": ["docs/f0.md", "docs/f1.md"]})
    assert refused.status_code == 422 and [p["path"] for p in refused.json()["paths"]] == [TAIL]
    part = _approve(daemon, operation_id, seen=[TAIL], **{"except": ["docs/f0.md", "docs/f1.md"]})
    assert part.status_code == 200, part.text
    assert part.json()["status"] == "completed"
    assert (repo / TAIL).read_bytes() == TAIL_NEW
    assert not (repo / "docs").exists()

    second, _ = _held(gated, _filler(2, 100 * KIB), second=True)
    assert _approve(daemon, second).status_code == 422
    whole = _approve(daemon, second, all_seen=True)
    assert whole.status_code == 200 and whole.json()["status"] == "completed"


def test_a_diff_that_fits_needs_no_names(gated: Gated) -> None:
    daemon, repo, _ = gated
    operation_id, _ = _held(gated, [(TAIL, TAIL_OLD, TAIL_NEW)])
    done = _approve(daemon, operation_id)
    assert done.status_code == 200 and done.json()["status"] == "completed"


def test_cli_review_lists_the_tail_prints_it_and_approve_needs_it(gated: Gated) -> None:
    daemon, repo, _ = gated
    operation_id, bundle_id = _attack(gated)
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    runner = CliRunner()

    listed = runner.invoke(_app(), ["review"], env=env)
    assert listed.exit_code == 0, listed.output
    out = listed.stdout
    assert " 3 file(s) not shown in full here:\n" in out
    assert f" ? {TAIL}: shown: none, 42 B -> 33 B, +1 -1\n" in out
    assert f"   read one whole: promoter review {operation_id} --path PATH\n" in out
    assert TAIL_DIFF not in out
    assert f"--seen {TAIL}" in out

    one = runner.invoke(_app(), ["review", operation_id, "--path", TAIL], env=env)
    assert one.exit_code == 0, one.output
    assert "+    return True\n" in one.stdout and "-    return user.is_admin\n" in one.stdout
    every = runner.invoke(_app(), ["bundle", "diff", bundle_id, "--all", "--no-pager"], env=env)
    assert every.exit_code == 0, every.output
    assert every.stdout.endswith(TAIL_DIFF)
    assert "not shown in full" not in every.stdout

    before = tree_bytes(repo)
    refused = runner.invoke(_app(), ["approve", operation_id, "--note", "ok"], env=env)
    assert isinstance(refused.exception, DiffNotSeen), refused.output
    assert refused.exception.exit_code == 65
    assert f"{TAIL} (42 -> 33 bytes)" in refused.exception.detail
    assert f"promoter approve {operation_id} --seen PATH" in refused.exception.detail
    assert tree_bytes(repo) == before
    approved = runner.invoke(_app(), ["approve", operation_id, "--all-seen"], env=env)
    assert approved.exit_code == 0, approved.output
    assert (repo / TAIL).read_bytes() == TAIL_NEW
    shown = runner.invoke(_app(), ["ops", "show", operation_id], env=env)
    assert shown.exit_code == 0, shown.output
    assert "  files the review did not show in full, approved as seen: every file\n" in shown.stdout


class _Form(HTMLParser):
    """What a browser sends for the approve form of ``operation_id``: its own fields and
    every checked box tied to it by ``form=``, plus the boxes ``tick`` names."""

    def __init__(self, operation_id: str, tick: set[str]) -> None:
        super().__init__()
        self.form_id = f"approve-{operation_id}"
        self.tick = tick
        self.inside = False
        self.data: dict[str, str] = {}
        self.seen_boxes: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "form" and found.get("id") == self.form_id:
            self.inside = True
        if tag != "input" or not (self.inside or found.get("form") == self.form_id):
            return
        name, value = found.get("name", ""), found.get("value", "")
        if name.startswith("seen-"):
            self.seen_boxes[value] = name
        box = found.get("type") == "checkbox"
        if box and "checked" not in found and not {value, name} & self.tick:
            return
        if name:
            self.data[name] = value

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False


def _console_form(html: str, operation_id: str, tick: set[str]) -> _Form:
    form = _Form(operation_id, tick)
    form.feed(html)
    return form


def test_console_shows_the_unseen_first_pages_each_file_and_needs_ticks(gated: Gated) -> None:
    daemon, repo, _ = gated
    operation_id, _ = _attack(gated)
    before = tree_bytes(repo)
    with login(daemon) as client:
        review = client.get("/ui/review")
        assert review.status_code == 200
        html = review.text
        unseen_at = html.index("Not shown in full on this page (3)")
        assert unseen_at < html.index('<table class="files">')  # listed before anything else
        link = f"/ui/review/{operation_id}/file?path=zzz/tail.py"
        assert f'<a href="{link}"><code class="path">{TAIL}</code></a>' in html
        assert "+    return True" not in html

        tail = client.get(f"/ui/review/{operation_id}/file", params={"path": TAIL})
        assert tail.status_code == 200
        assert str(escape("+    return True")) in tail.text
        assert "End of this file" in tail.text
        # a file larger than the console's page: each page its own request, linked
        first = client.get(f"/ui/review/{operation_id}/file", params={"path": "docs/f0.md"})
        assert "Next page of this file" in first.text
        cursor = re.search(r"cursor=([0-9]+%3A[0-9]+)", first.text)
        assert cursor is not None
        second = client.get(
            f"/ui/review/{operation_id}/file?path=docs/f0.md&cursor={cursor.group(1)}"
        )
        assert second.status_code == 200 and "End of this file" in second.text

        unticked = _console_form(html, operation_id, set())
        assert sorted(unticked.seen_boxes) == ["docs/f0.md", "docs/f1.md", TAIL]
        refused = client.post(f"/ui/operations/{operation_id}/approve", data=unticked.data)
        assert refused.status_code == 422
        assert "diff_not_seen" in refused.text and TAIL in refused.text
        assert tree_bytes(repo) == before
        assert operation_view(daemon, operation_id)["status"] == "awaiting_approval"

        ticked = _console_form(html, operation_id, {"docs/f0.md", "docs/f1.md", TAIL})
        done = client.post(f"/ui/operations/{operation_id}/approve", data=ticked.data)
        assert done.status_code == 303, done.text
    assert (repo / TAIL).read_bytes() == TAIL_NEW
    view = operation_view(daemon, operation_id)
    assert view["status"] == "completed"
    decision = next(e for e in view["events"] if e["kind"] == "decision")["payload"]
    assert decision["seen"] == {
        "all_seen": False,
        "paths": ["docs/f0.md", "docs/f1.md", TAIL],
        "page": PAGE,
    }


def test_mcp_bundle_diff_reaches_the_tail_by_path_and_cursor(tmp_path: Path, gated: Gated) -> None:
    daemon, repo, identity = gated
    _, bundle, _ = submit(
        daemon, repo, identity, [*_filler(2, 100 * KIB), (TAIL, TAIL_OLD, TAIL_NEW)]
    )
    with daemon.executor("run_1") as executor:
        token = executor.headers["Authorization"].removeprefix("Bearer ")
    _, (cut, alone, rest) = _tools(
        daemon,
        tmp_path,
        token,
        [
            ("bundle_diff", {"bundle_id": bundle["bundle_id"]}),
            ("bundle_diff", {"bundle_id": bundle["bundle_id"], "path": TAIL}),
            ("bundle_diff", {"bundle_id": bundle["bundle_id"], "cursor": "2:0"}),
        ],
    )
    assert cut["truncated"] is True
    assert [u["path"] for u in cut["unseen"]] == ["docs/f0.md", "docs/f1.md", TAIL]
    assert cut["unseen"][2]["cursor"] == "2:0"  # the cursor the last call passed
    assert alone["unified_diff"] == TAIL_DIFF
    assert rest["unified_diff"] == TAIL_DIFF and rest["next_cursor"] is None


def _answering(
    argv: list[str], env: dict[str, str], answers: list[tuple[bytes, bytes]]
) -> tuple[int, bytes]:
    """Run ``argv`` on a pseudo-terminal; when the output shows each prompt in turn, type
    its answer. The exit status and everything it printed."""
    master, slave = pty.openpty()
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**base, "PYTHONPATH": str(ROOT), "TERM": "dumb", "PAGER": "cat", **env},
        close_fds=True,
    )
    os.close(slave)
    output, pending = b"", list(answers)
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        output += chunk
        if pending and pending[0][0] in output:
            os.write(master, pending.pop(0)[1])
            output += b"<answered>"
    os.close(master)
    return proc.wait(timeout=600), output


TAIL_EDIT = "printf 'def check(user):\\n    return True\\n' > zzz/tail.py"
FILL = "mkdir -p docs && seq 100000 120000 > docs/f0.md && seq 200000 220000 > docs/f1.md"


@pytest.mark.parametrize("confirm", [True, False])
def test_run_at_a_terminal_lists_the_unseen_and_asks_for_them(gated: Gated, confirm: bool) -> None:
    daemon, repo, _ = gated
    bwrap.required()
    before = tree_bytes(repo)
    argv = [sys.executable, "-m", "promoter.cli.main", "run", "--state-dir", str(daemon.state_dir)]
    argv += [
        "--url",
        daemon.url,
        "--repo",
        "gated",
        "--keep",
        "--",
        "sh",
        "-c",
        f"{FILL} && {TAIL_EDIT}",
    ]
    code, output = _answering(
        argv,
        {},
        [
            (b"Promote these changes into the worktree?", b"y\n"),
            (
                b"Promote the 3 file(s) not shown in full, as they are?",
                b"y\n" if confirm else b"n\n",
            ),
        ],
    )
    text = output.decode(errors="replace")
    asked = text.index("Promote these changes into the worktree?")
    listed = text.index(f" ? {TAIL}: shown: none", asked)  # again, right at the question
    assert listed < text.index("Promote the 3 file(s) not shown in full", asked), text
    (run,) = sandboxes.list_runs(daemon.state_dir)
    reader = f"read one whole: promoter bundle diff {run.steps[0].bundle_id} --path PATH"
    # the very bundle, never a BUNDLE to look up (the terminal may wrap the line)
    assert reader in " ".join(text[asked:].split()), text
    if not confirm:
        assert code == NotConfirmed.exit_code, text
        assert tree_bytes(repo) == before
        return
    assert code == 0, text
    assert (repo / TAIL).read_bytes() == TAIL_NEW
    (record,) = sandboxes.list_runs(daemon.state_dir)
    operation_id = record.steps[0].operation_id
    assert operation_id is not None
    decision = next(
        e for e in operation_view(daemon, operation_id)["events"] if e["kind"] == "decision"
    )
    assert decision["payload"]["seen"] == {
        "all_seen": False,
        "paths": ["docs/f0.md", "docs/f1.md", TAIL],
    }


def test_the_submitted_bundle_promoted_by_continue_asks_for_the_unseen_too(
    gated: Gated,
) -> None:
    """`--continue RUN` without CMD promotes the bundle a declined step left submitted: its
    cut diff's files are listed and confirmed as at the first question, never promoted
    (or approved) unasked."""
    daemon, repo, _ = gated
    bwrap.required()
    before = tree_bytes(repo)
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url]
    argv = [sys.executable, "-m", "promoter.cli.main", "run", *where, "--repo", "gated"]
    first = [*argv, "--keep", "--", "sh", "-c", f"{FILL} && {TAIL_EDIT}"]
    code, output = _answering(first, {}, [(b"Promote these changes into the worktree?", b"n\n")])
    assert code == NotConfirmed.exit_code, output.decode(errors="replace")
    (record,) = sandboxes.list_runs(daemon.state_dir)
    again = [*argv[:-2], "--continue", record.run_id, "--keep"]
    code, output = _answering(
        again,
        {},
        [
            (b"Promote these changes into the worktree?", b"y\n"),
            (b"Promote the 3 file(s) not shown in full, as they are?", b"n\n"),
        ],
    )
    text = output.decode(errors="replace")
    assert code == NotConfirmed.exit_code, text
    asked = text.index("Promote these changes into the worktree?")
    assert text.index(f" ? {TAIL}: shown: none", asked) > asked, text
    assert tree_bytes(repo) == before
    code, output = _answering(
        again,
        {},
        [
            (b"Promote these changes into the worktree?", b"y\n"),
            (b"Promote the 3 file(s) not shown in full, as they are?", b"y\n"),
        ],
    )
    assert code == 0, output.decode(errors="replace")
    assert (repo / TAIL).read_bytes() == TAIL_NEW
    (record,) = sandboxes.list_runs(daemon.state_dir)
    operation_id = record.steps[-1].operation_id
    assert operation_id is not None
    decision = next(
        e for e in operation_view(daemon, operation_id)["events"] if e["kind"] == "decision"
    )
    assert decision["payload"]["seen"]["paths"] == ["docs/f0.md", "docs/f1.md", TAIL]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium, or a skip (a failure under PROMOTER_REQUIRE_BROWSER=1)."""
    yield from chromium_browser()


def test_browser_reads_the_tail_on_its_own_page_and_approves_only_once_ticked(
    gated: Gated, browser: Any
) -> None:
    daemon, repo, _ = gated
    operation_id, _ = _attack(gated)
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(f"{daemon.url}/ui/login")
        page.fill("input[name=token]", daemon.operator_token)
        page.click("button[type=submit]")
        page.wait_for_url(f"{daemon.url}/ui/operations")
        page.goto(f"{daemon.url}/ui/review")
        card = page.locator(f"#held-{operation_id}")
        unseen = card.locator("section.unseen code.path").all_inner_texts()
        assert unseen == ["docs/f0.md", "docs/f1.md", TAIL]
        card.locator(f"section.unseen a:has-text('{TAIL}')").click()
        page.wait_for_url(f"{daemon.url}/ui/review/{operation_id}/file**")
        assert page.locator("span.add").all_inner_texts() == ["+    return True"]
        assert page.locator("span.del").all_inner_texts() == ["-    return user.is_admin"]

        page.goto(f"{daemon.url}/ui/review")
        card = page.locator(f"#held-{operation_id}")
        card.locator("button.approve").click()  # nothing ticked
        page.wait_for_load_state()
        assert "diff_not_seen" in page.content()
        assert (repo / TAIL).read_bytes() == TAIL_OLD

        page.goto(f"{daemon.url}/ui/review")
        card = page.locator(f"#held-{operation_id}")
        for box in card.locator("input.seen").all():
            box.check()
        card.locator("button.approve").click()
        page.wait_for_url(f"{daemon.url}/ui/operations/{operation_id}")
        assert page.inner_text("#status") == "completed"
    finally:
        context.close()
    assert (repo / TAIL).read_bytes() == TAIL_NEW
