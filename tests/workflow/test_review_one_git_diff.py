"""A bundle's large files diffed by one git process answer byte for byte what one process
per file answers (protocol: api#what-a-review-shows).

A gated repository's bundle edits, creates, deletes, renames and re-modes files of more
than 2000 lines (so git, not difflib, diffs them), under names with spaces, unicode and a
line feed, with CRLF, no final newline, empty sides, NUL bytes and lines forging git's
own headers. ``bundle_diff`` of it, whole and in small pages, is compared with the same
call when the batch is refused (``batch.run`` answering None: file by file), and the
batch must have run once for the whole bundle.
"""

from __future__ import annotations

from typing import Any

import pytest

from promoter.engine.review import batch as batches
from promoter.engine.review import diff
from tests.support.fixtures import Gated
from tests.support.flows import state
from tests.support.promotion import submit

LONG = b"".join(b"value_%d = %d\n" % (i, i) for i in range(2500))
EDIT = LONG.replace(b"value_1200 = 1200\n", b"value_1200 = 'x'\n") + b"# appended\n"
GONE = b"".join(reversed(LONG.splitlines(keepends=True)))
FORGED = b"diff --git a/o/000001 b/n/000001\n@@ -1 +1 @@\n\\ No newline at end of file\n"
FILES = {
    "src/edit.py": LONG,
    "src/with space.py": LONG,
    "src/ünïcödé.py": LONG,
    "src/crlf.txt": LONG.replace(b"\n", b"\r\n"),
    "src/nonl.txt": LONG,
    "src/emptied.txt": LONG,
    "src/empty.txt": b"",
    "src/gone.py": GONE,
    "src/moved_from.py": LONG,
    "src/mode.sh": LONG,
    "src/nul.bin": LONG,
}
CHANGES: list[Any] = [
    ("src/edit.py", LONG, EDIT),
    ("src/with space.py", LONG, EDIT + FORGED * 30),
    ("src/ünïcödé.py", LONG, "é\n".encode() + EDIT),
    ("src/crlf.txt", LONG.replace(b"\n", b"\r\n"), EDIT.replace(b"\n", b"\r\n")),
    ("src/nonl.txt", LONG, EDIT.rstrip(b"\n")),
    ("src/emptied.txt", LONG, b""),
    ("src/empty.txt", b"", FORGED * 900),
    ("src/gone.py", GONE, None),
    ("src/moved_from.py", LONG, None),
    ("src/moved_to.py", None, EDIT),
    ("src/created.py", None, LONG + FORGED),
    (
        {
            "path": "src/mode.sh",
            "operation": "modify",
            "old": state(LONG),
            "new": state(EDIT, "100755"),
        }
    ),
    ("src/nul.bin", LONG, LONG + b"\0\n"),
]

pytestmark = pytest.mark.gated(FILES)


def _submit(gated: Gated) -> str:
    daemon, repo, identity = gated
    _, bundle, _ = submit(daemon, repo, identity, CHANGES)
    return str(bundle["bundle_id"])


def test_one_git_diff_answers_what_one_process_per_file_answers(
    gated: Gated, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle_id = _submit(gated)
    services = gated.daemon.services
    runs: list[batches.Batch | None] = []
    real = batches.run

    def counted(*args: Any) -> batches.Batch | None:
        runs.append(real(*args))
        return runs[-1]

    monkeypatch.setattr(batches, "run", counted)
    together = [diff.bundle_diff(services, bundle_id, limit) for limit in (None, 700, 20_000)]
    assert len(runs) == 3 and all(run is not None for run in runs)
    monkeypatch.setattr(batches, "run", lambda *args: None)
    alone = [diff.bundle_diff(services, bundle_id, limit) for limit in (None, 700, 20_000)]
    assert together == alone
    whole = together[0]
    files = {f["path"]: f for f in whole["files"]}
    assert files["src/created.py"]["rename_from"] == "src/moved_from.py"  # the most alike
    assert "control_character" in files["src/nul.bin"]["flags"] and not whole["truncated"]
    assert "+diff --git a/o/000001 b/n/000001\n" in whole["unified_diff"]
    assert all(not f["summarized"] for f in whole["files"])
