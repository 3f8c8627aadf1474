"""``promoter run`` starts from the person's worktree as it is (protocol: runs#sandbox-boundary,
TESTS S3).

A real daemon, a real repository with staged, unstaged, untracked, ignored, deleted,
executable and symlinked work of the person's, and a real shell command in the sandbox.
The person's edit during the run is made by the command itself (it writes the person's
worktree by the path it is given: nothing confines it in these tests), so the test
needs no timing. Exit statuses are those of the real CLI, run as a process.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from promoter.errors import MergeConflict, NotConfirmed, PromoterError, TargetDrift
from promoter.executor import confine, layers
from promoter.executor import sandbox as sandboxes
from tests.gitutil import commit_all, git, git_bytes
from tests.support import forkserver
from tests.support.daemon import Daemon
from tests.support.promotion import git_dir_digest, operation_receipt, tree_bytes
from tests.support.sandbox_view import sandbox_tree
from tests.workflow.test_run_command import _only_run, _run

ROOT = Path(__file__).resolve().parents[2]

FILES = {
    ".gitignore": b"*.log\n",
    "README.md": b"# project\n",
    "src/app.py": b"print('v1')\n",
    "tool.sh": b"echo tool\n",
    "old.txt": b"to be deleted by the person\n",
    "staged_only.txt": b"head content\n",
}
PERSON_README = b"# project\nthe person's unstaged line\n"
PERSON_APP = b"print('staged by the person')\n"
# a person shut out by a directory's mode: root without the capabilities that pass over it
SHUT_OUT = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
SHUT_OUT += ["--inh-caps=-dac_override,-dac_read_search"]
DEEP = 3000  # folders: 6000 bytes of path, past what the host names (4096)


pytestmark = pytest.mark.repo(files=FILES)


def _dirty(repo: Path) -> None:
    """The person's uncommitted work of every kind."""
    (repo / "README.md").write_bytes(PERSON_README)  # unstaged
    (repo / "src" / "app.py").write_bytes(PERSON_APP)
    git(repo, "add", "src/app.py")  # staged
    (repo / "staged_only.txt").write_bytes(b"staged, then put back in the worktree\n")
    git(repo, "add", "staged_only.txt")
    (repo / "staged_only.txt").write_bytes(FILES["staged_only.txt"])  # index differs only
    (repo / "notes.txt").write_bytes(b"the person's untracked notes\n")  # untracked
    (repo / "latest").symlink_to("notes.txt")  # an untracked link
    (repo / "tool.sh").chmod(0o755)  # an exec bit
    (repo / "old.txt").unlink()  # deleted, not staged
    (repo / "debug.log").write_bytes(b"ignored: never copied\n")  # ignored


def _cli(daemon: Daemon, *args: str, **env: str) -> Any:
    argv = [sys.executable, "-m", "promoter.cli.main", "run"]
    argv += ["--state-dir", str(daemon.state_dir), "--url", daemon.url, *args]
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    return forkserver.run(argv, env={**base, "PYTHONPATH": str(ROOT), **env}, timeout=600)


def _index(repo: Path) -> bytes:
    return git_bytes(repo, "ls-files", "-s", "-z")


def test_the_persons_staged_unstaged_and_untracked_work_starts_the_sandbox_and_promotes(
    daemon: Daemon, repo: Path
) -> None:
    _dirty(repo)
    index_before = _index(repo)
    git_before = git_dir_digest(repo)
    script = "printf 'the agent line\\n' >> README.md; printf 'x = 1\\n' > src/new.py"
    result = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", "sh", "-c", script)
    assert result.exit_code == 0, result.output
    record = _only_run(daemon)
    # the sandbox held the person's files byte for byte (the agent's two edits on top)
    person = tree_bytes(repo)
    assert person.pop("debug.log")[0] == b"ignored: never copied\n"
    assert sandbox_tree(record) == person
    assert person["latest"] == (b"notes.txt", -1)
    assert person["tool.sh"][1] & 0o100
    assert "old.txt" not in person
    # only the agent's edits were handed in, the agent's line on top of the person's
    op = record.steps[0].operation_id
    assert op is not None
    targets = {t["path"]: t for t in operation_receipt(daemon, op)["targets"]}
    assert sorted(targets) == ["README.md", "src/new.py"]
    assert (repo / "README.md").read_bytes() == PERSON_README + b"the agent line\n"
    assert (repo / "src" / "app.py").read_bytes() == PERSON_APP
    assert (repo / "src" / "new.py").read_bytes() == b"x = 1\n"
    # the person's staging is untouched: the index and all of .git are byte-identical
    assert _index(repo) == index_before
    assert git_dir_digest(repo) == git_before
    # the grant's preconditions are the person's state, index entries included
    pre = {p["path"]: p for p in record.preconditions}
    assert sorted(pre) == [
        "README.md",
        "latest",
        "notes.txt",
        "old.txt",
        "src/app.py",
        "staged_only.txt",
        "tool.sh",
    ]
    assert pre["notes.txt"]["index"] is None
    assert pre["old.txt"]["old"] == {"exists": False, "sha256": None, "mode": None}
    assert pre["latest"]["old"]["mode"] == "120000"
    assert pre["tool.sh"]["old"]["mode"] == "100755"
    staged = git_bytes(repo, "rev-parse", ":staged_only.txt").decode().strip()
    assert pre["staged_only.txt"]["index"] == {"mode": "100644", "oid": staged, "stage": 0}
    assert pre["staged_only.txt"]["old"]["sha256"] == _sha(FILES["staged_only.txt"])


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_an_agent_edit_of_a_file_the_person_staged_promotes_and_keeps_the_staging(
    daemon: Daemon, repo: Path
) -> None:
    _dirty(repo)
    index_before = _index(repo)
    script = "printf 'print(2)\\n' >> src/app.py; printf 'agent\\n' > staged_only.txt"
    result = _run(daemon, "run", "--repo", "work", "--yes", "--", "sh", "-c", script)
    assert result.exit_code == 0, result.output
    assert (repo / "src" / "app.py").read_bytes() == PERSON_APP + b"print(2)\n"
    assert (repo / "staged_only.txt").read_bytes() == b"agent\n"
    assert _index(repo) == index_before  # what the person staged stays staged


def test_a_file_the_person_edits_during_the_run_drifts_and_is_named(
    daemon: Daemon, repo: Path
) -> None:
    _dirty(repo)
    script = (
        "printf 'agent\\n' >> README.md; printf 'agent\\n' >> notes.txt; "
        "printf 'print(3)\\n' > src/app.py; "
        'printf "the person saves during the run\\n" > "$PERSON_WORKTREE/README.md"'
    )
    before = tree_bytes(repo)
    done = _cli(
        daemon,
        "--repo",
        "work",
        "--yes",
        "--unconfined",  # CMD plays the person too: it writes their worktree
        "--",
        "sh",
        "-c",
        script,
        PERSON_WORKTREE=str(repo),
    )
    err = done.stderr.decode()
    # --yes answers the merge's question; the save conflicts with the agent's line
    assert done.returncode == MergeConflict.exit_code, err
    assert "[merge_conflict]" in err
    record = _only_run(daemon)
    readme_now = b"the person saves during the run\n"
    assert (
        f"drifted: README.md: reads 100644 sha256:{_sha(readme_now)[:12]} ({len(readme_now)} bytes) now, expected 100644 sha256:{_sha(PERSON_README)[:12]}"
        in " ".join(err.split())
    )
    drifted = [line for line in err.splitlines() if line.startswith("drifted: ")]
    assert len(drifted) == 1, err  # the other files the agent edited are as expected
    assert "promoter run --repo work -- CMD" in " ".join(err.split())
    assert f"sandbox kept: {record.clone}" in " ".join(err.split())
    # nothing of the run was written; the person's save stands
    after = tree_bytes(repo)
    assert after.pop("README.md")[0] == readme_now
    before.pop("README.md")
    assert after == before
    assert Path(record.clone).is_dir()
    assert record.steps[0].status == "merge_conflict"


def test_from_head_starts_at_head_and_an_edit_of_a_dirty_file_is_refused(
    daemon: Daemon, repo: Path
) -> None:
    _dirty(repo)
    before = tree_bytes(repo)
    result = _run(
        daemon,
        "run",
        "--repo",
        "work",
        "--from-head",
        "--yes",
        "--unconfined",  # CMD leaves what it saw beside the sandbox
        "--",
        "sh",
        "-c",
        "cat README.md > ../seen; printf 'agent\\n' >> README.md",
    )
    assert isinstance(result.exception, PromoterError), result.output
    assert result.exception.code == "target_drift"
    record = _only_run(daemon)
    assert record.start_tree is None and record.preconditions == []
    assert (Path(record.clone).parent / "seen").read_bytes() == FILES["README.md"]
    assert not (Path(record.clone) / "notes.txt").exists()
    assert "README.md changed since the run began" in result.exception.detail
    assert [p["path"] for p in result.exception.context["paths"]] == ["README.md"]
    assert tree_bytes(repo) == before


def test_without_a_terminal_or_yes_the_run_exits_not_confirmed(daemon: Daemon, repo: Path) -> None:
    before = tree_bytes(repo)
    done = _cli(daemon, "--repo", "work", "--", "sh", "-c", "echo hi > src/app.py")
    err = " ".join(done.stderr.decode().split())
    assert done.returncode == NotConfirmed.exit_code != 70, err
    assert "[not_confirmed]" in err and "stays submitted" in err
    assert tree_bytes(repo) == before
    record = _only_run(daemon)
    assert record.steps[0].status == "declined" and Path(record.clone).is_dir()


def test_a_completed_runs_sandbox_is_removed_and_kept_with_keep(daemon: Daemon, repo: Path) -> None:
    first = _run(daemon, "run", "--repo", "work", "--yes", "--", "sh", "-c", "echo a > a.txt")
    assert first.exit_code == 0, first.output
    assert sandboxes.list_runs(daemon.state_dir) == []
    assert "removed" in first.stdout and (repo / "a.txt").read_bytes() == b"a\n"
    kept = _run(
        daemon, "run", "--repo", "work", "--yes", "--keep", "--", "sh", "-c", "echo b > b.txt"
    )
    assert kept.exit_code == 0, kept.output
    record = _only_run(daemon)
    assert Path(record.clone).is_dir()
    assert f"promoter run --continue {record.run_id}" in kept.stdout


def test_a_chain_edits_a_dirty_file_twice_and_the_persons_staging_stays(
    daemon: Daemon, repo: Path
) -> None:
    _dirty(repo)
    index_before = _index(repo)
    step = "printf 'step one\\n' >> src/app.py; printf 'one\\n' >> notes.txt"
    first = _run(daemon, "run", "--repo", "work", "--yes", "--keep", "--", "sh", "-c", step)
    assert first.exit_code == 0, first.output
    record = _only_run(daemon)
    step = "printf 'step two\\n' >> src/app.py; rm notes.txt"
    second = _run(daemon, "run", "--continue", record.run_id, "--yes", "--", "sh", "-c", step)
    assert second.exit_code == 0, second.output
    assert (repo / "src" / "app.py").read_bytes() == PERSON_APP + b"step one\nstep two\n"
    assert not (repo / "notes.txt").exists()
    op1 = operation_receipt(daemon, str(record.steps[0].operation_id))
    assert sorted(t["path"] for t in op1["targets"]) == ["notes.txt", "src/app.py"]
    assert _index(repo) == index_before
    assert sandboxes.list_runs(daemon.state_dir) == []  # completed, not kept: removed


def test_a_file_the_person_stages_during_the_run_drifts_on_its_index_entry(
    daemon: Daemon, repo: Path
) -> None:
    _dirty(repo)
    script = (
        "printf 'agent\\n' >> notes.txt; "
        'git -C "$PERSON_WORKTREE" add notes.txt'  # the person stages their notes meanwhile
    )
    done = _cli(
        daemon,
        "--repo",
        "work",
        "--yes",
        "--unconfined",  # CMD plays the person too: it writes their worktree
        "--",
        "sh",
        "-c",
        script,
        PERSON_WORKTREE=str(repo),
    )
    err = " ".join(done.stderr.decode().split())
    assert done.returncode == TargetDrift.exit_code, err
    assert "drifted: notes.txt: reads 100644" in err
    assert "the index entry differs from the precondition" in err
    assert (repo / "notes.txt").read_bytes() == b"the person's untracked notes\n"


def test_a_file_that_replaced_a_directory_still_registers_a_grant_and_promotes(
    daemon: Daemon, repo: Path
) -> None:
    (repo / "src" / "app.py").unlink()
    (repo / "src").rmdir()
    (repo / "src").write_bytes(b"a file where a directory was\n")
    script = "printf 'more\\n' >> src; printf 'agent\\n' > README.md"
    result = _run(daemon, "run", "--repo", "work", "--yes", "--", "sh", "-c", script)
    assert result.exit_code == 0, result.output
    assert "src/app.py: no precondition: its path collides" in result.stdout
    assert (repo / "src").read_bytes() == b"a file where a directory was\nmore\n"
    assert (repo / "README.md").read_bytes() == b"agent\n"


def test_a_sandbox_that_could_not_take_the_persons_state_is_removed(
    daemon: Daemon, repo: Path
) -> None:
    _dirty(repo)
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    done = _cli(
        daemon, "--repo", "work", "--yes", "--", "true", PROMOTER_FAULTS="start_state_laid=EIO"
    )
    err = " ".join(done.stderr.decode().split())
    assert done.returncode == 74, err
    assert "[write_failed] your worktree could not be laid into the sandbox" in err
    left = sandboxes.runs_dir(daemon.state_dir).iterdir()
    answers = (layers.KEPT_ANSWER, confine.KEPT_PROBE)  # the probes' answers, kept
    assert [p.name for p in left if p.name not in answers] == []  # no sandbox
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before


def test_a_fifo_over_a_tracked_file_of_the_persons_is_named_as_theirs_with_the_remedy(
    daemon: Daemon, repo: Path
) -> None:
    """The person's worktree (not the command's) has FIFOs where git tracks files: git
    cannot read them, so no start state can be captured. ``promoter run``, from the
    repository, answers ``path_unsafe`` naming them as the person's, with what to do;
    nothing of theirs changes and no sandbox is left."""
    for name in ("README.md", "tool.sh"):
        (repo / name).unlink()
        os.mkfifo(repo / name)
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    argv = [sys.executable, "-m", "promoter.cli.main", "run", "--state-dir"]
    argv += [str(daemon.state_dir), "--url", daemon.url, "--yes", "--", "true"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    done = forkserver.run(argv, env={**base, "PYTHONPATH": str(ROOT)}, cwd=repo, timeout=600)
    assert done.returncode == 75, done.stderr
    assert done.stderr.decode() == (
        "error [path_unsafe] your worktree has a FIFO, socket or device where git tracks a "
        "file or directory ('README.md', 'tool.sh'): git cannot read it, so the run cannot "
        "start from your files; nothing was changed; next: remove it or move it out of the "
        "worktree and run again, or start at HEAD without your uncommitted work: "
        "promoter run --from-head -- CMD\n"
    )
    assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
    left = sandboxes.runs_dir(daemon.state_dir).iterdir()
    answers = (layers.KEPT_ANSWER, confine.KEPT_PROBE)  # the probes' answers, kept
    assert [p.name for p in left if p.name not in answers] == []  # no sandbox


@pytest.mark.parametrize("watched", [False, True], ids=["first", "watched"])
@pytest.mark.parametrize("layout", ["copy", "overlay"])
def test_a_fifo_or_socket_over_a_tracked_directory_of_the_persons_is_named_as_theirs(
    daemon: Daemon, repo: Path, layout: str, watched: bool
) -> None:
    """The person's worktree has a FIFO where git tracks the directory ``src`` and a
    socket where it tracks ``lib``: git sees only the files below them gone, which a
    start must not take for the person's deletions. ``promoter run``, from the
    repository, answers as for a FIFO over a file: ``path_unsafe`` naming both as the
    person's, with what to do; nothing of theirs changes and no sandbox is made, on
    either sandbox layout, and when the start is narrowed by the daemon's watch."""
    (repo / "lib").mkdir()
    (repo / "lib" / "util.py").write_bytes(b"def util(): pass\n")
    commit_all(repo, "a second tracked directory")
    if watched:  # a start before: the next one is narrowed by the daemon's watch
        first = _from_the_repo(daemon, repo, "--yes", "--", "true", layout=layout)
        assert first.returncode == 0, first.stderr
        assert list((daemon.state_dir / "starts").iterdir())  # its baseline
    runs = _sandboxes(daemon)
    (repo / "src" / "app.py").unlink()
    (repo / "src").rmdir()
    os.mkfifo(repo / "src")
    shutil.rmtree(repo / "lib")
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(repo / "lib"))
        before, git_before = tree_bytes(repo), git_dir_digest(repo)
        done = _from_the_repo(daemon, repo, "--yes", "--", "true", layout=layout)
        assert done.returncode == 75, done.stderr
        assert done.stderr.decode() == (
            "error [path_unsafe] your worktree has a FIFO, socket or device where git tracks "
            "a file or directory ('lib', 'src'): git cannot read it, so the run cannot start "
            "from your files; nothing was changed; next: remove it or move it out of the "
            "worktree and run again, or start at HEAD without your uncommitted work: "
            "promoter run --from-head -- CMD\n"
        )
        assert done.stdout == b""
        assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
        assert stat.S_ISFIFO((repo / "src").lstat().st_mode)
        assert stat.S_ISSOCK((repo / "lib").lstat().st_mode)
    assert _sandboxes(daemon) == runs


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a person who cannot read")
@pytest.mark.parametrize("watched", [False, True], ids=["first", "watched"])
@pytest.mark.parametrize("layout", ["copy", "overlay"])
def test_a_tracked_directory_the_person_made_mode_000_is_named_with_what_to_do(
    daemon: Daemon, repo: Path, layout: str, watched: bool
) -> None:
    """The person made the tracked directory ``src`` mode 000. Root reads it anyway; the
    person cannot, nor can git as the person, so the files the person has there cannot
    be started from (git would take HEAD's). ``promoter run``, from the repository, answers
    ``path_unsafe`` naming the directory and what to do, never git's bare failure, and
    nothing of the person's changes and no sandbox is made; the remedy it names,
    ``--from-head``, then runs and promotes. The person is root without the capabilities
    that pass over a mode (``SHUT_OUT``): ``nobody`` could not run this interpreter."""
    if watched:  # a start before: the next one is narrowed by the daemon's watch
        first = _from_the_repo(daemon, repo, "--yes", "--", "true", layout=layout)
        assert first.returncode == 0, first.stderr
        assert list((daemon.state_dir / "starts").iterdir())  # its baseline
    runs = _sandboxes(daemon)
    (repo / "src").chmod(0)
    try:
        before, git_before = tree_bytes(repo), git_dir_digest(repo)
        done = _from_the_repo(daemon, repo, "--yes", "--", "true", layout=layout, shut_out=True)
        assert done.returncode == 75, done.stderr
        assert done.stderr.decode() == (
            "error [path_unsafe] your worktree has a directory git tracks that git cannot "
            "open ('src': Permission denied): what you have in it cannot be read, so the run "
            "cannot start from your files; nothing was changed; next: make it readable "
            "(chmod u+rx src) and run again, or start at HEAD without your uncommitted "
            "work: promoter run --from-head -- CMD\n"
        )
        assert done.stdout == b""
        assert _sandboxes(daemon) == runs
        assert tree_bytes(repo) == before and git_dir_digest(repo) == git_before
        assert stat.S_IMODE((repo / "src").stat().st_mode) == 0
        script = ["sh", "-c", "echo agent > README.md"]
        at_head = _from_the_repo(
            daemon, repo, "--from-head", "--yes", "--", *script, layout=layout, shut_out=True
        )
        assert at_head.returncode == 0, at_head.stderr
        assert (repo / "README.md").read_bytes() == b"agent\n"
    finally:
        (repo / "src").chmod(0o755)
    assert (repo / "src" / "app.py").read_bytes() == FILES["src/app.py"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a person who cannot read")
@pytest.mark.parametrize("layout", ["copy", "overlay"])
def test_every_start_names_an_untracked_folder_the_person_cannot_read(
    daemon: Daemon, repo: Path, layout: str
) -> None:
    """The person's untracked folder ``private`` is mode 000: git, as the person, cannot
    open it while it lists untracked files. The first start reads the whole worktree and
    names it; the next ones are narrowed by the daemon's watch (nothing changed since),
    and each names it too: what it holds is never in a sandbox unsaid. Shut out as in
    ``SHUT_OUT``."""
    (repo / "private").mkdir()
    (repo / "private" / "secret.txt").write_bytes(b"the person's\n")
    (repo / "private").chmod(0)
    named = b"\n  private: git could not open it (Permission denied): what it holds is not in "
    named += b"the sandbox\n"
    try:
        for start in range(3):
            done = _from_the_repo(daemon, repo, "--yes", "--", "true", layout=layout, shut_out=True)
            assert done.returncode == 0, done.stderr
            assert named in done.stdout + done.stderr, (start, done.stdout + done.stderr)
        # the baseline the narrowed starts read keeps the folder among its candidates
        kept = [json.loads(b.read_bytes()) for b in (daemon.state_dir / "starts").iterdir()]
        assert [b"private".hex() in doc["dirty"] for doc in kept] == [True]
    finally:
        (repo / "private").chmod(0o755)
    assert (repo / "private" / "secret.txt").read_bytes() == b"the person's\n"


def _from_the_repo(
    daemon: Daemon, repo: Path, *args: str, layout: str, shut_out: bool = False
) -> Any:
    """``promoter run ARGS`` as the person types it in ``repo``, on sandbox ``layout``
    (``shut_out``: as a person a directory's mode shuts out, ``SHUT_OUT``)."""
    argv = [sys.executable, "-m", "promoter.cli.main", "run", "--state-dir"]
    argv += [str(daemon.state_dir), "--url", daemon.url, *args]
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env = {**base, "PYTHONPATH": str(ROOT), layers.LAYOUT_ENV: layout}
    if not shut_out:
        return forkserver.run(argv, env=env, cwd=repo, timeout=600)
    assert shutil.which(SHUT_OUT[0]), "setpriv (util-linux) runs the person shut out"
    argv = [*SHUT_OUT, *argv]
    return subprocess.run(argv, env=env, cwd=repo, capture_output=True, timeout=600, check=False)


def _sandboxes(daemon: Daemon) -> list[str]:
    """The sandboxes in the state directory (not the probes' answers, kept there)."""
    where = sandboxes.runs_dir(daemon.state_dir)
    answers = (layers.KEPT_ANSWER, confine.KEPT_PROBE)
    left = where.iterdir() if where.is_dir() else ()
    return sorted(p.name for p in left if p.name not in answers)


def test_an_untracked_folder_too_deep_for_git_is_named_at_the_start_not_dropped_silently(
    daemon: Daemon, repo: Path
) -> None:
    """The person's untracked work holds a file ``DEEP`` directories deep (6000 bytes of
    path): git cannot open the folder while it lists untracked files and goes on without
    it. The run still starts from the rest of the person's files, and its first line
    names the folder and why what it holds is not in the sandbox; the person's file is
    untouched and the agent's edit promotes."""
    (repo / "notes.txt").write_bytes(b"the person's untracked notes\n")
    try:
        _deep_file(repo, b"deep\n")
        _promote_beside(daemon, repo)
        assert _deep_file(repo, None) == b"deep\n"
    finally:  # removed here: a tree this deep is past a recursive removal's stack
        _remove_deep(repo)


def _deep_file(repo: Path, data: bytes | None) -> bytes:
    """``d/`` ``DEEP`` times then ``leaf``: written with ``data``, else read."""
    fd = os.open(repo, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(DEEP):
            if data is not None:
                os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        flags = os.O_RDONLY if data is None else os.O_WRONLY | os.O_CREAT | os.O_EXCL
        leaf = os.open("leaf", flags, 0o644, dir_fd=fd)
        try:
            return os.read(leaf, 100) if data is None else data[: os.write(leaf, data)]
        finally:
            os.close(leaf)
    finally:
        os.close(fd)


def _remove_deep(repo: Path) -> None:
    """Remove ``_deep_file``'s folders from the top, one at a time: each one's child is
    moved up beside it, then it is removed empty (the leaf unlinked at the bottom)."""
    top = os.open(repo, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            try:
                inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=top)
            except FileNotFoundError:
                return
            try:
                os.rename("d", "up", src_dir_fd=inner, dst_dir_fd=top)
            except FileNotFoundError:  # the deepest
                with contextlib.suppress(FileNotFoundError):
                    os.unlink("leaf", dir_fd=inner)
            finally:
                os.close(inner)
            os.rmdir("d", dir_fd=top)
            with contextlib.suppress(FileNotFoundError):
                os.rename("up", "d", src_dir_fd=top, dst_dir_fd=top)
    finally:
        os.close(top)


def _promote_beside(daemon: Daemon, repo: Path) -> None:
    argv = [sys.executable, "-m", "promoter.cli.main", "run", "--state-dir"]
    argv += [str(daemon.state_dir), "--url", daemon.url, "--yes", "--", "sh", "-c"]
    argv += ["cat notes.txt > copied.txt"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    done = forkserver.run(argv, env={**base, "PYTHONPATH": str(ROOT)}, cwd=repo, timeout=600)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    shown = ("d/" * 40)[:80] + "..."
    assert (
        f"\n  {shown}: too deep for the host to name: git could not open it, so what it "
        f"holds is not in the sandbox\n"
    ).encode() in said, said
    assert (repo / "copied.txt").read_bytes() == b"the person's untracked notes\n"
