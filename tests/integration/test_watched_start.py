"""A sandbox's start narrowed by the daemon's watch equals the full pass, byte for byte.

A real daemon (its inotify watch of the person's worktree), real git, real files: after
each of the person's edits the start is captured twice, once with the watch
(``start_watch.plan`` narrowing the status pass) and once in full, into two clones; the
clones, the start trees, the preconditions and the skipped paths must be identical, and
the watched one must really have been narrowed. Every unknown (another HEAD, a changed
exclude or config, an overflowed or restarted watch, a damaged baseline, too many
paths) must read the whole worktree.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from promoter.client.sync import PromoterClient
from promoter.config import RepositoryConfig
from promoter.executor import seeded as seeded_module
from promoter.executor import start_watch
from promoter.executor.seeded import SeededShadow
from promoter.executor.start_state import StartState, capture_into
from promoter.executor.start_watch import Plan, Watched
from promoter.git.layout import discover
from tests.gitutil import git
from tests.support.daemon import Daemon, running_daemon
from tests.support.process import DaemonProcess
from tests.support.promotion import git_dir_digest, tree_bytes
from tests.support.repos import init_repo

FILES = {f"src/m{i}.py": b"x = %d\n" % i for i in range(30)} | {"README.md": b"readme\n"}


class Starts:
    """Captures the person's worktree with and without the watch, and what was planned."""

    def __init__(self, tmp_path: Path, repo: Path, daemon: Daemon) -> None:
        self.tmp_path, self.repo, self.daemon = tmp_path, repo, daemon
        self.state_dir = tmp_path / "cli-state"
        self.state_dir.mkdir(exist_ok=True)
        self.plans: list[Plan] = []
        self.count = 0

    def ask(self, positions: list[tuple[str, int]]) -> Mapping[str, Any]:
        with PromoterClient(self.daemon.url, self.daemon.orchestrator_token) as client:
            return client.worktree_changes("lab", positions)

    def capture(self, watched: bool) -> tuple[StartState, dict[str, tuple[bytes, int]]]:
        self.count += 1
        home = self.tmp_path / f"home{self.count}"
        home.mkdir()
        clone = home / "clone"
        git(self.tmp_path, "clone", "-q", str(self.repo), str(clone))
        tree = git(self.repo, "rev-parse", "HEAD^{tree}")
        where = Watched(self.state_dir, self.ask) if watched else None
        state = capture_into(str(self.repo), clone, home, tree, watched=where)
        return state, tree_bytes(clone)

    def both(self) -> Plan:
        """The watched start and the full one: identical; the watched one's plan."""
        person, person_git = tree_bytes(self.repo), git_dir_digest(self.repo)
        watched, watched_files = self.capture(True)
        full, full_files = self.capture(False)
        assert watched_files == full_files
        assert watched.tree == full.tree
        assert watched.preconditions == full.preconditions
        assert watched.skipped == full.skipped
        assert tree_bytes(self.repo) == person and git_dir_digest(self.repo) == person_git
        return self.plans[-1]


@pytest.fixture
def starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Starts]:
    repo = init_repo(tmp_path / "work", FILES)
    with running_daemon(tmp_path / "state", {"lab": repo}) as daemon:
        found = Starts(tmp_path, repo, daemon)
        real = start_watch.plan

        def spy(watched: Watched, layout: Any, base_tree: str) -> Plan:
            planned = real(watched, layout, base_tree)
            found.plans.append(planned)
            return planned

        monkeypatch.setattr(start_watch, "plan", spy)
        yield found


def test_a_sequence_of_the_persons_edits_starts_as_the_full_pass_byte_for_byte(
    starts: Starts,
) -> None:
    repo = starts.repo
    first = starts.both()
    assert first.candidates is None  # the first ask starts the watch
    assert starts.both().candidates == []  # nothing changed since
    edits = [
        lambda: (repo / "src/m1.py").write_bytes(b"x = 'edited'\n"),
        lambda: (repo / "notes.txt").write_bytes(b"untracked\n"),
        lambda: (repo / "src/m2.py").unlink(),
        lambda: git(repo, "add", "src/m1.py"),
        lambda: (repo / "src/m3.py").rename(repo / "src/renamed.py"),
        lambda: os.chmod(repo / "src/m4.py", 0o755),
        lambda: (repo / "src/m1.py").write_bytes(b"x = 1\n"),  # back to HEAD's bytes
        lambda: git(repo, "reset", "-q", "src/m1.py"),
        lambda: (repo / "new" / "deep").mkdir(parents=True),
        lambda: (repo / "new" / "deep" / "f.txt").write_bytes(b"in a new directory\n"),
        lambda: os.symlink("README.md", repo / "link"),
    ]
    for number, edit in enumerate(edits):
        edit()
        planned = starts.both()
        assert planned.candidates is not None, (number, planned.reason)
        assert len(planned.candidates) <= start_watch.MAX_CANDIDATES
    assert b"src/m4.py" in (planned.candidates or [])
    # with the index the baseline walked, a dozen more is still the candidates' pass
    [(repo / "new" / f"n{i}").write_bytes(b"%d\n" % i) for i in range(12)]
    planned = starts.both()
    assert planned.candidates is not None, planned.reason
    assert len(planned.candidates) > start_watch.MAX_CANDIDATES
    # past MAX_INDEXED_CANDIDATES the full pass reads everything
    [(repo / "new" / f"m{i}").write_bytes(b"%d\n" % i) for i in range(70)]
    limit = start_watch.MAX_INDEXED_CANDIDATES
    assert starts.both().reason == f"more than {limit} candidates"
    # with the index changed since, past MAX_CANDIDATES
    [(repo / "new" / f"k{i}").write_bytes(b"%d\n" % i) for i in range(12)]
    git(repo, "add", "src/m4.py")
    assert starts.both().reason == f"more than {start_watch.MAX_CANDIDATES} candidates"


def test_a_write_finished_just_before_the_run_is_never_missed(starts: Starts) -> None:
    starts.both()
    for round_ in range(20):
        path = starts.repo / "src" / f"m{round_ % 3}.py"
        path.write_bytes(b"saved just now %d\n" % round_)  # then at once the run
        state, files = starts.capture(True)
        assert starts.plans[-1].candidates is not None
        assert files[f"src/m{round_ % 3}.py"][0] == b"saved just now %d\n" % round_
        assert f"src/m{round_ % 3}.py" in {p["path"] for p in state.preconditions}


def _narrowed_once(starts: Starts) -> None:
    starts.both()
    (starts.repo / "src/m1.py").write_bytes(b"edited\n")
    assert starts.both().candidates is not None


def test_a_changed_exclude_file_reads_the_whole_worktree(starts: Starts) -> None:
    _narrowed_once(starts)
    (starts.repo / "scratch.log").write_bytes(b"log\n")
    starts.both()
    exclude = starts.repo / ".git" / "info" / "exclude"
    exclude.write_bytes(exclude.read_bytes() + b"*.log\n")  # no event in the worktree
    planned = starts.both()
    assert planned.candidates is None and "excludes" in planned.reason
    assert starts.both().candidates is not None  # the full pass made a new baseline


def test_a_changed_repository_config_reads_the_whole_worktree(starts: Starts) -> None:
    _narrowed_once(starts)
    git(starts.repo, "config", "core.autocrlf", "true")
    planned = starts.both()
    assert planned.candidates is None and "config" in planned.reason


def test_a_new_head_reads_the_whole_worktree(starts: Starts) -> None:
    _narrowed_once(starts)
    git(starts.repo, "commit", "-q", "-am", "the person commits")
    planned = starts.both()
    assert planned.candidates is None and "HEAD" in planned.reason


def test_a_changed_gitignore_starts_a_new_generation(starts: Starts) -> None:
    _narrowed_once(starts)
    (starts.repo / "notes.txt").write_bytes(b"notes\n")
    assert starts.both().candidates is not None
    (starts.repo / ".gitignore").write_bytes(b"*.txt\n")  # notes.txt ignored from now
    planned = starts.both()
    assert planned.candidates is None
    assert starts.both().candidates is not None  # a new generation, a new baseline


def test_an_overflowed_watch_reads_the_whole_worktree(starts: Starts) -> None:
    _narrowed_once(starts)
    flood = starts.repo / "src"  # watched: a new directory's files are named by it
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    for number in range(limit + 10):  # more events than the kernel queues
        (flood / f"f{number}").touch()
    for number in range(limit + 10):
        (flood / f"f{number}").unlink()
    planned = starts.both()
    assert planned.candidates is None
    assert starts.both().candidates is not None  # a new generation, a new baseline


def test_a_restarted_daemon_reads_the_whole_worktree(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    with running_daemon(tmp_path / "state", {"lab": repo}) as daemon:
        starts = Starts(tmp_path, repo, daemon)
        planned = start_watch.plan(Watched(starts.state_dir, starts.ask), discover(repo), "0" * 40)
        assert planned.candidates is None
        starts.capture(True)
        layout = discover(repo)
        tree = git(repo, "rev-parse", "HEAD^{tree}")
        again = start_watch.plan(Watched(starts.state_dir, starts.ask), layout, tree)
        assert again.candidates == []
    with running_daemon(tmp_path / "state", {"lab": repo}) as daemon:
        starts.daemon = daemon
        after = start_watch.plan(Watched(starts.state_dir, starts.ask), layout, tree)
        assert after.candidates is None and after.generation != again.generation


def test_a_damaged_baseline_reads_the_whole_worktree_and_is_replaced(starts: Starts) -> None:
    _narrowed_once(starts)
    layout = discover(starts.repo)
    baseline = start_watch.baseline_path(starts.state_dir, layout, starts.plans[-1].generation)
    good = baseline.read_bytes()
    for damage in [b"", b"{", good.replace(b'"dirty": [', b'"dirty": [7, '), good[:-9]]:
        baseline.write_bytes(damage)
        planned = starts.both()
        assert planned.candidates is None and planned.reason == "no baseline"
        assert baseline.read_bytes() != damage  # replaced by the full pass's
    assert starts.both().candidates is not None


def test_a_flood_of_changes_is_answered_unknown_not_listed(starts: Starts) -> None:
    starts.both()
    many = starts.repo / "src"  # watched: a new directory's files are named by it
    for number in range(400):
        (many / f"f{number}").write_bytes(b"new\n")
    answer = starts.ask([(starts.plans[-1].generation, starts.plans[-1].clock)])
    assert answer["paths"] is None and "more than 256" in answer["reason"]
    planned = starts.both()
    assert planned.candidates is None


def test_an_index_changed_while_the_narrowed_pass_reads_is_read_again_in_full(
    starts: Starts, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = starts.repo
    (repo / ".git" / "info" / "exclude").write_bytes(b"*.log\n")
    (repo / "keep.log").write_bytes(b"tracked, though its name is ignored\n")
    git(repo, "add", "-f", "keep.log")
    git(repo, "commit", "-q", "-m", "a tracked file an ignore rule matches")
    _narrowed_once(starts)
    real = SeededShadow._seeded
    moved: list[bool] = []
    passes: list[bool] = []  # narrowed or not, each status pass of the watched start

    def person_untracks_meanwhile(self: SeededShadow, base: str) -> Any:
        passes.append(self._only is not None)
        found = real(self, base)
        if self._only is not None and not moved:  # the narrowed pass has read the index
            git(repo, "rm", "-q", "--cached", "keep.log")  # now ignored: a deletion
            moved.append(True)
        return found

    monkeypatch.setattr(SeededShadow, "_seeded", person_untracks_meanwhile)
    watched, watched_files = starts.capture(True)
    assert moved and starts.plans[-1].candidates is not None  # it was narrowed, then moved
    assert passes == [True, False]  # read again, in full
    full, full_files = starts.capture(False)
    assert watched_files == full_files and watched.tree == full.tree
    assert watched.preconditions == full.preconditions


def test_a_nested_repository_keeps_every_start_a_full_pass(starts: Starts) -> None:
    init_repo(starts.repo / "vendor" / "lib")  # its HEAD moves with no event we read
    for _ in range(3):
        planned = starts.both()
        assert planned.candidates is None and planned.reason == "no baseline"
    assert start_watch.baseline_paths(starts.state_dir, discover(starts.repo)) == []


def test_a_gitlink_in_the_index_keeps_every_start_a_full_pass(starts: Starts) -> None:
    head = git(starts.repo, "rev-parse", "HEAD")
    git(starts.repo, "update-index", "--add", "--cacheinfo", f"160000,{head},sub")
    for _ in range(3):
        planned = starts.both()
        assert planned.candidates is None and planned.reason == "no baseline"


def test_an_attributes_file_the_watch_names_reads_the_whole_worktree(starts: Starts) -> None:
    _narrowed_once(starts)
    (starts.repo / "src" / ".gitattributes").write_bytes(b"*.py -text\n")
    planned = starts.both()
    assert planned.candidates is None and "attributes" in planned.reason


def test_a_repository_not_watched_is_answered_unknown(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    config = RepositoryConfig(path=repo, snapshot_watch=False)
    with running_daemon(tmp_path / "state", {"lab": config}) as daemon:
        starts = Starts(tmp_path, repo, daemon)
        for _ in range(2):
            answer = starts.ask([])
            assert answer == {
                "generation": "",
                "clock": 0,
                "paths": None,
                "reason": "the repository's worktree is not watched",
            }
        assert daemon.services.start_watches == {}


def test_the_index_is_walked_again_only_when_its_bytes_changed(
    starts: Starts, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = starts.repo
    (repo / "src" / ".gitattributes").write_bytes(b"*.py diff=python\n")  # harmless
    git(repo, "add", "src/.gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    walks: list[bool] = []
    real = seeded_module.plain_index

    def counted(data: bytes) -> Any:
        walks.append(True)
        return real(data)

    monkeypatch.setattr(seeded_module, "plain_index", counted)
    starts.both()  # a full pass: walks (the full capture in both() walks too)
    (repo / "src/m1.py").write_bytes(b"edited\n")
    walks.clear()
    planned = starts.both()
    assert planned.candidates is not None and planned.index_walk is not None
    assert planned.index_walk[1].attributes == ("src/.gitattributes",)
    assert len(walks) == 1  # the full capture's only: the watched one reused the walk
    git(repo, "add", "src/m1.py")  # new index bytes
    walks.clear()
    assert starts.both().candidates is not None
    assert len(walks) == 2  # walked again


class _Served:
    """A ``promoter serve`` process seen as ``Starts`` sees a daemon."""

    def __init__(self, process: DaemonProcess) -> None:
        self.url = process.url
        self.orchestrator_token = process.token("orchestrator")


def test_starts_on_new_connections_to_two_workers_stay_narrowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    process = DaemonProcess(tmp_path / "state", {"lab": repo}, workers=2)
    try:
        starts = Starts(tmp_path, repo, _Served(process))  # type: ignore[arg-type]
        real = start_watch.plan

        def spy(watched: Watched, layout: Any, base_tree: str) -> Plan:
            planned = real(watched, layout, base_tree)
            starts.plans.append(planned)
            return planned

        monkeypatch.setattr(start_watch, "plan", spy)
        generations: set[str] = set()
        full = 0
        for number in range(40):  # each ask a new connection: the kernel picks the worker
            (repo / "src" / f"m{number % 5}.py").write_bytes(b"edit %d\n" % number)
            starts.capture(True)
            planned = starts.plans[-1]
            assert planned.generation, planned.reason
            full += planned.candidates is None
            if planned.generation not in generations:
                generations.add(planned.generation)
                assert planned.candidates is None  # this worker's first ask starts its watch
            else:
                assert planned.candidates is not None, (number, planned.reason)
            if len(generations) == 2 and number >= 15:
                break
        assert len(generations) == 2  # both workers answered
        assert full == 2  # once a worker: every other start narrowed
    finally:
        process.kill()


def test_a_baseline_of_another_workers_generation_is_never_used_for_this_workers_answer(
    starts: Starts,
) -> None:
    _narrowed_once(starts)
    own = starts.plans[-1]
    layout = discover(starts.repo)
    forged = "0123456789abcdef"  # another worker's generation, asked with clock 0
    own_file = start_watch.baseline_path(starts.state_dir, layout, own.generation)
    other_file = start_watch.baseline_path(starts.state_dir, layout, forged)
    good = own_file.read_bytes()
    other_file.write_bytes(good.replace(own.generation.encode(), forged.encode()))
    (starts.repo / "src/m7.py").write_bytes(b"edited\n")
    # the worker answers for its own position only: never "since clock 0" of another's
    only_other = starts.ask([(forged, 0)])
    assert only_other["generation"] == own.generation and only_other["paths"] is None
    both = starts.ask([(forged, 0), (own.generation, own.clock)])
    assert both["generation"] == own.generation and both["paths"] == ["src/m7.py"]
    # the command line compares an answer with its generation's baseline, never another's
    lied = {"generation": forged, "clock": 9, "paths": [], "reason": ""}
    os.unlink(other_file)
    tree = git(starts.repo, "rev-parse", "HEAD^{tree}")
    planned = start_watch.plan(Watched(starts.state_dir, lambda _: lied), layout, tree)
    assert planned.candidates is None and planned.reason == "another generation of the watch"
    # a file whose name and generation differ is not as written: never trusted
    own_file.write_bytes(b"")
    other_file.write_bytes(good)  # named for the forged generation, holding the own one
    planned = starts.both()
    assert planned.candidates is None and planned.reason == "no baseline"
    assert starts.both().candidates is not None  # the full pass kept a good baseline


def test_a_forged_or_duplicated_position_list_is_refused(starts: Starts) -> None:
    starts.both()
    own = starts.plans[-1]
    many = [{"generation": f"{n:016x}", "clock": 1} for n in range(9)]
    twice = [{"generation": own.generation, "clock": c} for c in (0, own.clock)]
    bodies: list[dict[str, Any]] = [
        {"positions": many},  # more than the command line ever keeps
        {"positions": twice},  # a generation twice: which clock would count?
        {"generation": own.generation, "clock": 0, "positions": twice[1:]},
        {"positions": [{"generation": "XYZ", "clock": 1}]},
        {"positions": [{"generation": own.generation, "clock": -1}]},
    ]
    with starts.daemon.orchestrator() as client:
        for body in bodies:
            answer = client.post("/v1/repositories/lab/changes", json=body)
            assert answer.status_code == 422, body
            assert answer.json()["code"] == "validation_failed"
        fine = client.post("/v1/repositories/lab/changes", json={"positions": many[:8]})
        assert fine.status_code == 200 and fine.json()["paths"] is None


def test_the_oldest_baselines_past_the_bound_are_dropped(starts: Starts) -> None:
    starts.both()
    layout = discover(starts.repo)
    own = start_watch.baseline_paths(starts.state_dir, layout)
    assert [g for g, _ in own] == [starts.plans[-1].generation]
    data = own[0][1].read_bytes()
    olds = [f"{n:016x}" for n in range(start_watch.MAX_BASELINES + 2)]
    for age, generation in enumerate(olds):  # older than the worker's own
        path = start_watch.baseline_path(starts.state_dir, layout, generation)
        path.write_bytes(data.replace(starts.plans[-1].generation.encode(), generation.encode()))
        os.utime(path, ns=(age, age))
    (starts.repo / "src/m1.py").write_bytes(b"edited\n")
    planned = starts.both()  # asks with the 8 most recent: the worker's own among them
    assert planned.candidates == [b"src/m1.py"]
    kept = start_watch.baseline_paths(starts.state_dir, layout)
    assert [g for g, _ in kept] == [planned.generation, *reversed(olds[-7:])]


def test_a_link_named_as_an_old_baseline_is_never_removed_nor_followed(
    starts: Starts, tmp_path: Path
) -> None:
    """The trim removes only regular files of ``starts/``: a symbolic link there, named as
    the oldest baseline of this worktree, stays, and so does the file it points at."""
    starts.both()
    layout = discover(starts.repo)
    data = start_watch.baseline_paths(starts.state_dir, layout)[0][1].read_bytes()
    target = tmp_path / "persons-file"
    target.write_bytes(b"mine\n")
    olds = [f"{n:016x}" for n in range(start_watch.MAX_BASELINES + 1)]
    link = start_watch.baseline_path(starts.state_dir, layout, olds[0])
    link.symlink_to(target)
    for age, generation in enumerate(olds[1:], start=1):
        path = start_watch.baseline_path(starts.state_dir, layout, generation)
        path.write_bytes(data)
        os.utime(path, ns=(age, age))
    (starts.repo / "src/m1.py").write_bytes(b"edited again\n")
    starts.both()
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == b"mine\n"
    kept = start_watch.baseline_paths(starts.state_dir, layout)
    assert len(kept) == start_watch.MAX_BASELINES


def _git_with(repo: Path, env: dict[str, str], *args: str) -> str:
    """``git args`` in ``repo`` with ``env`` added to the tests' hermetic environment."""
    import subprocess

    from tests.gitutil import git_env

    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        env=git_env() | env,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return done.stdout.decode().strip()


def test_an_unchanged_index_is_read_only_at_the_candidates_entries(
    starts: Starts, monkeypatch: pytest.MonkeyPatch
) -> None:
    _narrowed_once(starts)
    copies: list[bool] = []
    small: list[bool] = []
    real_copy, real_small = seeded_module.copy_index, seeded_module.candidates_index

    def copy(source: str, dest: str) -> Any:
        copies.append(True)
        return real_copy(source, dest)

    def candidates(*args: Any) -> Any:
        found = real_small(*args)
        small.append(True)
        return found

    monkeypatch.setattr(seeded_module, "copy_index", copy)
    monkeypatch.setattr(seeded_module, "candidates_index", candidates)
    for number in range(3):
        (starts.repo / "src" / f"m{number}.py").write_bytes(b"edited %d\n" % number)
        copies.clear()
        small.clear()
        assert starts.both().candidates is not None
        assert (len(small), len(copies)) == (1, 1)  # the watched start's, the full one's


def _entry_at(data: bytes, path: bytes) -> int:
    """Where the entry of ``path`` begins in a version 2 index."""
    off = 12
    for _ in range(int.from_bytes(data[8:12], "big")):
        length = int.from_bytes(data[off + 60 : off + 62], "big") & 0xFFF
        if data[off + 62 : off + 62 + length] == path:
            return off
        off += (62 + length + 8) & ~7
    raise AssertionError(path)


def test_an_index_rewritten_in_place_with_its_size_and_mtime_starts_as_the_full_pass(
    starts: Starts,
) -> None:
    import hashlib

    repo, index = starts.repo, starts.repo / ".git" / "index"
    data = index.read_bytes()
    count = int.from_bytes(data[8:12], "big")
    off = 12
    for _ in range(count):  # the entries alone: no cache tree to go stale below
        off += (62 + (int.from_bytes(data[off + 60 : off + 62], "big") & 0xFFF) + 8) & ~7
    body = data[:off]
    (repo / ".git" / "index.new").write_bytes(
        body + hashlib.sha1(body, usedforsecurity=False).digest()
    )
    os.replace(repo / ".git" / "index.new", index)  # a new file, as git writes one
    _narrowed_once(starts)
    assert starts.both().candidates is not None
    other = bytes.fromhex(git(repo, "rev-parse", "HEAD:src/m6.py"))
    at = _entry_at(body, b"src/m5.py") + 40  # its blob id: another file's content staged
    staged = body[:at] + other + body[at + 20 :]
    stamp = index.stat()
    with open(index, "r+b") as same_file:  # in place: same inode, same size
        same_file.write(staged + hashlib.sha1(staged, usedforsecurity=False).digest())
    os.utime(index, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # and the mtime set back
    assert (index.stat().st_ino, index.stat().st_size) == (stamp.st_ino, stamp.st_size)
    planned = starts.both()  # the preconditions name src/m5.py's staged entry in both
    assert planned.candidates is not None and b"src/m5.py" in planned.candidates


def test_a_git_add_between_two_runs_with_the_worktree_unchanged_starts_as_the_full_pass(
    starts: Starts,
) -> None:
    repo = starts.repo
    _narrowed_once(starts)  # src/m1.py edited
    other = git(repo, "rev-parse", "HEAD:src/m6.py")
    for stage in (
        lambda: git(repo, "add", "src/m1.py"),
        lambda: git(repo, "rm", "-q", "--cached", "src/m5.py"),  # now untracked
        lambda: git(repo, "update-index", "--cacheinfo", f"100644,{other},src/m8.py"),
        lambda: git(repo, "reset", "-q", "--", "src/m1.py", "src/m5.py", "src/m8.py"),
    ):
        worktree = tree_bytes(repo)
        stage()
        assert tree_bytes(repo) == worktree
        planned = starts.both()
        assert planned.candidates is not None, planned.reason


def test_a_head_moved_by_a_ref_update_only_starts_as_the_full_pass(starts: Starts) -> None:
    repo = starts.repo
    _narrowed_once(starts)
    head = git(repo, "rev-parse", "HEAD")
    same = git(repo, "commit-tree", "-p", head, "-m", "same tree", f"{head}^{{tree}}")
    git(repo, "update-ref", "refs/heads/main", same)  # no event, no index change
    assert starts.both().candidates is not None  # the same tree: the same answer
    scratch = {"GIT_INDEX_FILE": str(starts.tmp_path / "scratch-index")}
    _git_with(repo, scratch, "read-tree", "HEAD")
    blob = git(repo, "rev-parse", "HEAD:src/m6.py")
    _git_with(repo, scratch, "update-index", "--cacheinfo", f"100644,{blob},src/m2.py")
    tree = _git_with(repo, scratch, "write-tree")
    moved = git(repo, "commit-tree", "-p", same, "-m", "another tree", tree)
    git(repo, "update-ref", "refs/heads/main", moved)
    planned = starts.both()
    assert planned.candidates is None and planned.reason == "another HEAD tree"
    assert starts.both().candidates is not None


def test_an_untracked_file_in_a_tracked_directory_holding_a_repository_is_found(
    starts: Starts,
) -> None:
    """The candidates' index holds an entry below each leading directory of a candidate:
    without one git takes ``src/`` (tracked, now holding a ``.git``) for an untracked
    nested repository and never looks inside, while the whole index says it is tracked."""
    repo = starts.repo
    starts.both()
    git(repo / "src", "init", "-q")  # src/.git: the person's own repository in it
    starts.both()
    assert starts.both().candidates == []
    (repo / "src" / "new.py").write_bytes(b"new\n")
    planned = starts.both()  # the full pass lists it: so must the candidates' index
    assert planned.candidates == [b"src/new.py"]
    state = starts.capture(True)[0]
    assert "src/new.py" in {p["path"] for p in state.preconditions + state.skipped}, state


def test_a_narrowed_start_of_an_overlay_layer_starts_two_git_processes(
    starts: Starts,
) -> None:
    """As ``promoter run`` starts an overlay sandbox after reading its base (HEAD's tree
    named by git): the layer's object reader (started first, while the daemon answers),
    which also reads the trees of the candidates' pruned HEAD, and the status pass; the
    blobs it stored are laid from its own loose objects and HEAD for the gitlink check is
    read from its files, with no process."""
    from promoter.executor import layers
    from promoter.git import runner
    from promoter.git.head import head_on_branch

    repo = starts.repo
    _narrowed_once(starts)
    layout = discover(str(repo))
    on = head_on_branch(layout, "refs/heads/main")
    assert on is not None and on.commit is not None and on.tree is not None
    (repo / "src/m2.py").write_bytes(b"edited\n")
    (repo / "src/new.py").write_bytes(b"new\n")
    full, full_files = starts.capture(False)
    layer, home = starts.tmp_path / "layer", starts.tmp_path / "overlay-home"
    home.mkdir()
    layers.lay_git(layer, "refs/heads/main", on.commit)
    objects = str(repo / ".git" / "objects")
    where = Watched(starts.state_dir, starts.ask)
    with runner.counting() as started:
        state = capture_into(
            str(repo),
            layer,
            home,
            on.tree,
            whiteouts=True,
            alternates=objects,
            found=layout,
            watched=where,
        )
    assert starts.plans[-1].candidates == [b"src/m1.py", b"src/m2.py", b"src/new.py"]
    assert started == ["cat-file", "status"]
    assert state.tree == full.tree and state.preconditions == full.preconditions
    laid = {path: data for path, data in tree_bytes(layer).items() if path != ".git"}
    assert laid == {p: full_files[p] for p in ("src/m1.py", "src/m2.py", "src/new.py")}
