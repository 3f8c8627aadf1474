"""``promoter run`` typed in a subdirectory of the person's worktree starts its command there.

Real daemon, git, bubblewrap and the real command line (``python -m promoter.cli.main``)
started in the person's own directory, as they type it. The command starts in the
sandbox's counterpart of that directory (``pwd`` ends with ``/clone/sub``; a relative
write is promoted as ``sub/…``), confined or not, in a copy clone or an overlay, for a
new run and for ``--continue``. A directory the sandbox does not hold starts it at the
root with one line that says why (docs/decisions/a-run-starts-where-the-person-is.md);
a link an earlier step planted there is refused, nothing run, nothing written outside.

Without bubblewrap the module is skipped with one line, unless ``PROMOTER_REQUIRE_BWRAP=1``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from promoter.errors import PathUnsafe
from promoter.executor import layers
from promoter.executor import sandbox as sandboxes
from tests.support import bwrap
from tests.support.cli import cli
from tests.support.daemon import Daemon
from tests.support.promotion import git_dir_digest

bwrap.required(module=True)

NESTED = os.fsdecode(b"dir with spaces/\xc3\xbcber \xff")  # UTF-8 and a byte that is not
FILES = {
    ".gitignore": b"build/\n",
    "README.md": b"# project\n",
    "sub/keep.txt": b"kept\n",
    f"{NESTED}/x.txt": b"nested\n",
}
PWD = "pwd > here.txt"

pytestmark = pytest.mark.repo(files=FILES)


@pytest.fixture(params=["copy", "overlay", "unconfined"])
def how(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sandbox's layout and confinement: the flags a run is given."""
    layout = "copy" if request.param == "unconfined" else request.param
    monkeypatch.setenv(layers.LAYOUT_ENV, layout)
    if request.param == "unconfined":
        return ["--unconfined"]
    bwrap.confining()
    return []


def _run(daemon: Daemon, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``promoter run ARGS`` typed in ``cwd`` (no --repo: the worktree found from it)."""
    return cli("run", "--state-dir", str(daemon.state_dir), "--url", daemon.url, *args, cwd=cwd)


def _only_run(daemon: Daemon) -> sandboxes.RunRecord:
    (record,) = sandboxes.list_runs(daemon.state_dir)
    return record


def _ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_run_typed_in_a_subdirectory_starts_the_command_there(
    daemon: Daemon, repo: Path, how: list[str]
) -> None:
    git_before = git_dir_digest(repo)
    result = _run(daemon, repo / "sub", *how, "--yes", "--keep", "--", "sh", "-c", PWD)
    _ok(result)
    record = _only_run(daemon)
    inside = f"{record.clone}/sub"
    kind = "unconfined" if how else "bwrap"
    assert f"running sh -c 'pwd > here.txt' in {inside} ({kind})\n" in result.stdout
    assert "starting at the sandbox's root" not in result.stdout + result.stderr
    # promoted as sub/here.txt, holding the directory the command started in
    assert (repo / "sub" / "here.txt").read_bytes() == f"{inside}\n".encode()
    assert inside.endswith("/clone/sub")
    assert not (repo / "here.txt").exists()
    assert "  sub/here.txt  " in result.stdout  # the receipt's target
    assert git_dir_digest(repo) == git_before


def test_continue_typed_in_a_subdirectory_starts_there(
    daemon: Daemon, repo: Path, how: list[str]
) -> None:
    first = _run(daemon, repo, *how, "--yes", "--keep", "--", "sh", "-c", "echo top > top.txt")
    _ok(first)
    record = _only_run(daemon)
    assert (repo / "top.txt").read_bytes() == b"top\n"
    again = ["--continue", record.run_id, *how, "--yes", "--keep", "--", "sh", "-c", PWD]
    second = _run(daemon, repo / "sub", *again)
    _ok(second)
    assert (repo / "sub" / "here.txt").read_bytes() == f"{record.clone}/sub\n".encode()
    assert not (repo / "here.txt").exists()


def test_a_run_named_with_repo_from_outside_the_worktree_starts_at_the_root(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = _run(daemon, elsewhere, "--repo", "work", "--unconfined", "--yes", "--keep",
                  "--", "sh", "-c", PWD)  # fmt: skip
    _ok(result)
    record = _only_run(daemon)
    assert f"in {record.clone} (unconfined)\n" in result.stdout
    assert "starting at the sandbox's root" not in result.stdout + result.stderr
    assert (repo / "here.txt").read_bytes() == f"{record.clone}\n".encode()
    assert not (elsewhere / "here.txt").exists()


def test_a_nested_directory_with_spaces_and_non_ascii_bytes_is_started_in(
    daemon: Daemon, repo: Path, how: list[str]
) -> None:
    result = _run(daemon, repo / NESTED, *how, "--yes", "--keep", "--", "sh", "-c", PWD)
    _ok(result)
    record = _only_run(daemon)
    inside = os.fsencode(f"{record.clone}/{NESTED}")
    assert (repo / NESTED / "here.txt").read_bytes() == inside + b"\n"
    assert not (repo / "here.txt").exists()


def test_an_ignored_directory_starts_the_command_at_the_root_and_says_so(
    daemon: Daemon, repo: Path, how: list[str]
) -> None:
    build = repo / "sub" / "build"
    build.mkdir()
    (build / "out.o").write_bytes(b"ignored\n")
    result = _run(daemon, build, *how, "--yes", "--keep", "--", "sh", "-c", PWD)
    _ok(result)
    record = _only_run(daemon)
    note = "starting at the sandbox's root: sub/build is not in the sandbox (ignored by git)\n"
    assert note in result.stdout
    assert f"in {record.clone} (" in result.stdout
    assert (repo / "here.txt").read_bytes() == f"{record.clone}\n".encode()
    assert not (build / "here.txt").exists()
    assert not Path(record.clone, "sub", "build").exists()  # never made in the sandbox


def test_continue_from_a_directory_made_after_the_run_started_starts_at_the_root(
    daemon: Daemon, repo: Path
) -> None:
    _ok(_run(daemon, repo, "--unconfined", "--yes", "--keep", "--", "true"))
    record = _only_run(daemon)
    later = repo / "later"
    later.mkdir()
    again = ["--continue", record.run_id, "--unconfined", "--yes", "--keep"]
    result = _run(daemon, later, *again, "--", "sh", "-c", PWD)
    _ok(result)
    assert (
        "starting at the sandbox's root: later is not in the sandbox (not there when the "
        "sandbox was made, or removed by a step)\n"
    ) in result.stdout
    assert (repo / "here.txt").read_bytes() == f"{record.clone}\n".encode()
    assert not Path(record.clone, "later").exists()


def test_a_link_planted_by_a_step_where_the_persons_directory_is_is_never_followed(
    daemon: Daemon, repo: Path, tmp_path: Path, how: list[str]
) -> None:
    """An earlier step replaces ``sub`` in the sandbox by a link out of it (its own failure
    keeps the sandbox); the next step, typed in ``sub``, is refused before it runs."""
    outside = tmp_path / "outside"
    outside.mkdir()
    plant = f"rm -r sub && ln -s {outside} sub && exit 3"
    first = _run(daemon, repo, *how, "--yes", "--", "sh", "-c", plant)
    assert first.returncode != 0, first.stdout + first.stderr
    record = _only_run(daemon)
    again = ["--continue", record.run_id, *how, "--yes", "--", "sh", "-c", PWD]
    result = _run(daemon, repo / "sub", *again)
    assert result.returncode == PathUnsafe.exit_code, result.stdout + result.stderr
    assert result.stderr.startswith(
        f"sandbox kept: {record.clone}\nerror [path_unsafe] sub is a symbolic link in the "
        f"sandbox {record.clone} (an earlier step made it)"
    )
    assert "running" not in result.stdout
    assert list(outside.iterdir()) == []  # nothing ran there
    assert (repo / "sub" / "keep.txt").read_bytes() == b"kept\n"
    assert len(_only_run(daemon).steps) == 1  # no step began: no grant, nothing run


def test_a_run_typed_inside_dot_git_starts_at_the_root_and_says_so(
    daemon: Daemon, repo: Path
) -> None:
    inside = repo / ".git" / "refs"
    git_before = git_dir_digest(repo)
    result = _run(daemon, inside, "--repo", "work", "--unconfined", "--yes", "--keep",
                  "--", "sh", "-c", PWD)  # fmt: skip
    _ok(result)
    record = _only_run(daemon)
    assert (
        "starting at the sandbox's root: .git/refs is not in the sandbox (git's own "
        "directory is not the sandbox's)\n"
    ) in result.stdout
    assert (repo / "here.txt").read_bytes() == f"{record.clone}\n".encode()
    assert git_dir_digest(repo) == git_before


# a directory name holding a line of its own: what a confined run prints after its command
FORGED = "x (bwrap)\nconfined by bubblewrap; processes limited by 4096"
SHOWN = "x (bwrap)<U+000A>confined by bubblewrap; processes limited by 4096"


def test_a_directory_named_with_a_newline_never_prints_a_line_of_its_own(
    daemon: Daemon, repo: Path
) -> None:
    """A hostile repository's directory whose name holds a line feed and the line a
    confined run prints: typed in it, an unconfined run's ``running`` line (and, in an
    ignored one, the line saying why it starts at the root) shows the line feed as
    ``<U+000A>``, as does the line naming its untracked file that no precondition can
    describe: no line says the command was confined."""
    forged = repo / FORGED
    forged.mkdir()
    (forged / "x.txt").write_bytes(b"untracked\n")
    first = _run(daemon, forged, "--unconfined", "--yes", "--keep", "--", "true")
    _ok(first)
    record = _only_run(daemon)
    assert f"running true in {record.clone}/{SHOWN} (unconfined)\n" in first.stdout
    assert f"  {SHOWN}/x.txt: no precondition: " in first.stdout + first.stderr
    ignored = repo / "build" / FORGED
    ignored.mkdir(parents=True)
    again = ["--continue", record.run_id, "--unconfined", "--yes", "--keep"]
    second = _run(daemon, ignored, *again, "--", "sh", "-c", "true")
    _ok(second)
    assert (
        f"starting at the sandbox's root: build/{SHOWN} is not in the sandbox (ignored by " "git)\n"
    ) in second.stdout
    for line in (first.stdout + first.stderr + second.stdout + second.stderr).splitlines():
        assert not line.startswith("confined by bubblewrap"), line
