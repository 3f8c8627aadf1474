"""``promoter run``'s confinement flags do what docs/guide/sandbox.md says, or are refused.

Real daemon, git, bubblewrap and the real command line (``python -m promoter.cli.main``).
A flag that could not do what it says (``--hide`` of a file or of nothing, a
``--pass-env`` that is no variable's name or names one the sandbox sets itself, a
confinement flag given with ``--unconfined``) is refused with ``config_error`` (exit 78)
before a sandbox or a grant exists: the run never goes on with the person believing it
hidden or passed something it did not.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from promoter.executor import sandbox as sandboxes
from tests.support import bwrap
from tests.support.cli import cli
from tests.support.daemon import Daemon

# a directory outside /tmp (which the sandbox replaces whole) that the command can read
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _run(daemon: Daemon, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url, "--repo", "work"]
    return cli("run", *where, *args, cwd=repo)


def _refused(daemon: Daemon, repo: Path, detail: str, *args: str) -> None:
    before = sorted(p.name for p in daemon.state_dir.iterdir())
    result = _run(daemon, repo, "--yes", *args, "--", "true")
    assert result.returncode == 78, result.stdout + result.stderr
    assert result.stderr == f"error [config_error] {detail}\n"
    assert result.stdout == ""
    assert sandboxes.list_runs(daemon.state_dir) == []
    assert sorted(p.name for p in daemon.state_dir.iterdir()) == before


def test_hide_of_a_directory_leaves_it_empty_in_the_sandbox(daemon: Daemon, repo: Path) -> None:
    bwrap.confining()
    assert (DOCS / "guide").is_dir()
    probe = f"ls -1A {DOCS}; cat {DOCS}/guide/index.md | head -c 6"
    seen = _run(daemon, repo, "--yes", "--", "sh", "-c", probe)
    assert seen.returncode == 0, seen.stderr
    assert "guide\n" in seen.stdout and "# User" in seen.stdout  # readable without --hide
    hidden = _run(daemon, repo, "--yes", "--hide", str(DOCS), "--", "sh", "-c", probe)
    assert hidden.returncode == 0, hidden.stderr
    assert "guide\n" not in hidden.stdout and "# User" not in hidden.stdout
    assert f"cat: {DOCS}/guide/index.md: No such file or directory" in hidden.stdout


def test_hide_of_a_file_is_refused_not_left_readable(daemon: Daemon, repo: Path) -> None:
    page = DOCS / "guide" / "index.md"
    _refused(
        daemon, repo,
        f"--hide {page}: not a directory; a whole directory is hidden, never a single "
        f"file: hide the directory that holds it; nothing was made",
        "--hide", str(page),
    )  # fmt: skip


def test_hide_of_a_path_that_does_not_exist_is_refused(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-dir"
    _refused(
        daemon, repo,
        f"--hide {missing}: no such directory; nothing was made",
        "--hide", str(missing),
    )  # fmt: skip


def test_hide_of_the_root_is_refused(daemon: Daemon, repo: Path) -> None:
    _refused(
        daemon, repo,
        "--hide /: the root is what the sandbox is made of; hide a directory below it; "
        "nothing was made",
        "--hide", "/",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "detail"),
    [
        ("A=B", "--pass-env 'A=B': not a variable's name"),
        ("", "--pass-env '': not a variable's name"),
        ("HOME", "--pass-env HOME: HOME and TMPDIR are the sandbox's own"),
        ("TMPDIR", "--pass-env TMPDIR: HOME and TMPDIR are the sandbox's own"),
    ],
)
def test_pass_env_of_no_name_or_of_the_sandboxs_own_is_refused(
    daemon: Daemon, repo: Path, name: str, detail: str
) -> None:
    _refused(daemon, repo, detail, "--pass-env", name)


@pytest.mark.parametrize(
    "flags",
    [("--network",), ("--hide", str(DOCS)), ("--pass-env", "LANG")],
    ids=["network", "hide", "pass-env"],
)
def test_unconfined_with_a_confinement_flag_is_refused(
    daemon: Daemon, repo: Path, flags: tuple[str, ...]
) -> None:
    _refused(
        daemon, repo,
        f"{flags[0]} confines the command, and --unconfined runs it without confinement "
        f"(your permissions, environment and network); give one of them; nothing was made",
        "--unconfined", *flags,
    )  # fmt: skip


def test_a_command_given_without_the_double_dash_is_told_where_its_options_go(
    daemon: Daemon, repo: Path
) -> None:
    """`promoter run sh -c …` once answered only `No such option: -c`: the person is
    told that the command and its options go after `--`; nothing is made."""
    before = sorted(p.name for p in daemon.state_dir.iterdir())
    result = _run(daemon, repo, "sh", "-c", "echo hi > x")
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "Error: No such option: -c. The command and its own options go after --: "
        "promoter run [OPTIONS] -- sh -c ...\n"
    ) in result.stderr
    assert sandboxes.list_runs(daemon.state_dir) == []
    assert sorted(p.name for p in daemon.state_dir.iterdir()) == before
    assert not (repo / "x").exists()
    # a typo in promoter's own option, before any command, keeps click's suggestion
    typo = _run(daemon, repo, "--kep=1", "--", "true")
    assert "No such option: --kep" in typo.stderr and "go after --" not in typo.stderr
