"""The start-up sweep removes only promoter's own leftover temps, in promoter's own places.

A temp is removed when its name is promoter's temp pattern, it is a regular file, it sits
in one of the state directory's own stores, and the process that named it is provably
gone. Everything else stays: a live writer's temp (another daemon or a CLI command on the
same state directory), a look-alike inside a sandbox's clone (the executor's worktree) or
in git's own folders of a shadow repository, a directory or a symlink with such a name,
and every ordinary file. Also: a kill in the middle of a sandbox's ``run.json`` write
leaves the old record whole, and its temp is swept.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from promoter.store import state_temps
from promoter.store.state_temps import PREFIX, sweep, temp_name
from tests.support.fsutil import free_start_tick


def _dead_writer_name() -> str:
    """A temp name of a process that has exited (as a killed writer leaves it)."""
    code = "from promoter.store.state_temps import temp_name; print(temp_name())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    return out.stdout.decode().strip()


def _gone_from_the_machine(name: str) -> str:
    """``name`` with a start time no process of the machine has (one before this one's,
    so none can have it later): a writer a shared directory's sweep proves gone, whatever
    else started in the same tick as the one that named it."""
    free = free_start_tick()
    boot, pid, _, rest = name.removeprefix(PREFIX).split("-")
    return f"{PREFIX}{boot}-{pid}-{free}-{rest}"


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_killed_writers_temps_are_removed_from_every_own_store(tmp_path: Path) -> None:
    state = tmp_path / "state"
    places = [
        "",
        "replacements",  # a replacement's record is written new through a temp
        "audit",
        "audit/tmp",
        "audit/grants",
        "audit/receipts/promotion",
        "credentials",
        "quota",
        "runs/run_0a",
        "snapshots/repo_1.git",
        "snapshots/repo_1.git/info",
    ]
    dead = [_touch(state / place / _dead_writer_name()) for place in places]
    legacy = [
        _touch(state / "audit/bundles/.tmp-0123456789abcdef"),
        _touch(state / "credentials/.tmp-fedcba9876543210"),
        _touch(state / "runs/run_0a/run.tmp"),
    ]
    kept = [
        _touch(state / "audit/grants/grt_1.json"),
        _touch(state / "runs/run_0a/run.json"),
        _touch(state / "credentials/operator.token"),
    ]
    removed = sweep(state, shared_with=None)
    assert sorted(removed) == sorted(dead + legacy)
    assert not any(p.exists() for p in dead + legacy)
    assert all(p.read_bytes() == b"x" for p in kept)


def test_a_live_writers_temp_is_kept(tmp_path: Path) -> None:
    mine = _touch(tmp_path / "audit" / "grants" / temp_name())  # this process: alive
    reused = mine.with_name(  # this pid, but not this process's start time: gone
        f"{PREFIX}{state_temps._BOOT}-{os.getpid()}-1-{'0' * 16}"
    )
    _touch(reused)
    other_boot = _touch(mine.with_name(f"{PREFIX}ffffffff-{os.getpid()}-1-{'1' * 16}"))
    if state_temps._BOOT == "ffffffff":
        pytest.skip("this boot id starts with ffffffff")
    assert sorted(sweep(tmp_path, shared_with=None)) == sorted([reused, other_boot])
    assert mine.exists()


def test_a_shared_directory_keeps_every_temp_not_provably_gone_on_this_machine(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another host may write in the directory: a temp of another boot, and an older
    version's name that names no boot, may be its live writer's; only a temp of this boot
    whose writer ended (no process of the machine started when it did) is removed, and
    one line counts and names the kept."""
    state = tmp_path / "state"
    boot = "eeeeeeee" if state_temps._BOOT == "ffffffff" else "ffffffff"
    other_boot = _touch(state / "audit/tmp" / f"{PREFIX}{boot}-4242-991-{'0' * 16}", b"a's")
    legacy = _touch(state / "credentials/.tmp-0123456789abcdef", b"a's too")
    dead = _touch(state / "audit/tmp" / _gone_from_the_machine(_dead_writer_name()))
    with caplog.at_level("WARNING", logger="promoter.state"):
        assert sweep(state, shared_with="host host-a (active, not fenced)") == [dead]
    assert (other_boot.read_bytes(), legacy.read_bytes()) == (b"a's", b"a's too")
    (line,) = [r.getMessage() for r in caplog.records if "kept" in r.getMessage()]
    assert line == (
        "kept 2 temps whose writer may be alive on another machine or in another pid "
        "namespace: host host-a (active, not fenced) may write in "
        f"{state} (a start after its fence removes them): "
        f"{other_boot}, {legacy}"
    )


def test_look_alikes_outside_promoters_own_places_are_never_swept(tmp_path: Path) -> None:
    name = _dead_writer_name()
    state = tmp_path / "state"
    in_clone = _touch(state / "runs/run_0a/clone" / name)  # the executor's worktree
    in_clone_legacy = _touch(state / "runs/run_0a/clone/run.tmp")
    in_objects = _touch(state / "snapshots/repo_1.git/objects/ab" / name)
    in_blobs = _touch(state / "audit/blobs/sha256/ab" / name)
    legacy_in_top = _touch(state / ".tmp-0123456789abcdef")  # only the stores had those
    directory = state / "audit" / _dead_writer_name()
    _touch(directory / "inside")
    target = _touch(tmp_path / "outside.txt")
    link = state / "audit" / _dead_writer_name()
    link.symlink_to(target)
    unrelated = _touch(state / "audit" / f"{PREFIX}not-a-temp")
    assert sweep(state, shared_with=None) == []
    for path in (in_clone, in_clone_legacy, in_objects, in_blobs, legacy_in_top, unrelated):
        assert path.read_bytes() == b"x"
    assert (directory / "inside").read_bytes() == b"x"
    assert link.is_symlink() and target.read_bytes() == b"x"


def test_a_symlinked_store_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    victim = _touch(outside / _dead_writer_name())
    state = tmp_path / "state"
    state.mkdir()
    (state / "quota").symlink_to(outside)
    assert sweep(state, shared_with=None) == []
    assert victim.exists()


KILLED_SAVE = """
import sys
from pathlib import Path
from promoter.executor import sandbox
record = sandbox.RunRecord(run_id="run_0a", repository="work", worktree="/w",
    branch="refs/heads/main", base_commit="0" * 40, base_tree="1" * 40, clone="/c",
    created_at="2026-12-05T00:00:00Z")
state = Path(sys.argv[1])
sandbox.save(state, record)
record.steps.append(sandbox.Step(grant_id="grt_1", status="completed"))
sandbox.save(state, record)  # killed at the fault point of this second write
"""


@pytest.mark.parametrize(
    "point",
    [
        "run_record_after_create",
        "run_record_after_write",
        "run_record_after_fsync",
        "run_record_after_link",
    ],
)
@pytest.mark.parametrize("named", [False, True], ids=["anonymous", "named"])
def test_a_kill_while_a_sandbox_record_is_saved_leaves_the_old_record_and_no_temp(
    point: str, named: bool, tmp_path: Path
) -> None:
    if named and point == "run_record_after_link":
        pytest.skip("a named temp is renamed over run.json without a link")
    state = tmp_path / "state"
    faults = f"{point}=kill@2" + (",state_tmpfile=EOPNOTSUPP@1+" if named else "")
    env = {**os.environ, "PROMOTER_FAULTS": faults}
    done = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(state)], env=env, check=False)
    assert done.returncode == 137
    home = state / "runs" / "run_0a"
    names = sorted(os.listdir(home))
    record = (home / "run.json").read_text()
    assert '"steps": []' in record and "grt_1" not in record
    temps = [n for n in names if n.startswith(PREFIX)]
    leaves_name = named or point == "run_record_after_link"  # a replace links, then renames
    assert len(temps) == (1 if leaves_name else 0) and len(names) == 1 + len(temps)
    assert [p.name for p in sweep(state, shared_with=None)] == temps
    assert os.listdir(home) == ["run.json"]


KILLED_SHADOW = """
import sys
from promoter.git.shadow_files import ensure_shadow
ensure_shadow(sys.argv[1])  # killed while its staging directory is being filled
"""


def test_a_shadow_repository_staged_by_a_killed_writer_is_removed_whole(tmp_path: Path) -> None:
    state = tmp_path / "state"
    shadow = state / "snapshots" / "repo_1.git"
    env = {**os.environ, "PROMOTER_FAULTS": "shadow_after_fsync=kill@2"}
    done = subprocess.run([sys.executable, "-c", KILLED_SHADOW, str(shadow)], env=env, check=False)
    assert done.returncode == 137
    staged = list((state / "snapshots").iterdir())
    assert len(staged) == 1 and staged[0].name.startswith(PREFIX) and staged[0].is_dir()
    assert (staged[0] / "HEAD").read_bytes() == b"ref: refs/heads/main\n"
    live = state / "snapshots" / temp_name()  # one this process is staging now
    live.mkdir()
    assert sweep(state, shared_with=None) == staged
    assert sorted(p.name for p in (state / "snapshots").iterdir()) == [live.name]
    subprocess.run([sys.executable, "-c", KILLED_SHADOW, str(shadow)], check=True)
    assert (shadow / "HEAD").is_file() and (shadow / "objects" / "pack").is_dir()


def _dead_review_scratch_name() -> str:
    """A review diff's directory name of a process that has exited (as a kill leaves it)."""
    code = (
        "from promoter.store.state_temps import review_scratch_name; print(review_scratch_name())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    return out.stdout.decode().strip()


def test_a_killed_review_diffs_links_are_removed_and_the_stored_blob_stays(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    blob = _touch(state / "audit" / "blobs" / "sha256" / "ab" / ("ab" * 32), b"stored\n")
    dead = state / "audit" / "tmp" / _dead_review_scratch_name()
    (dead / "o").mkdir(parents=True)
    (dead / "n").mkdir()
    os.link(blob, dead / "o" / "000000")
    live = state / "audit" / "tmp" / state_temps.review_scratch_name()  # this process's
    (live / "n").mkdir(parents=True)
    os.link(blob, live / "n" / "000000")
    look_alike = _touch(state / "audit" / "tmp" / "review-diff-notes.txt")

    assert sweep(state, shared_with=None) == [dead]
    assert sorted(p.name for p in (state / "audit" / "tmp").iterdir()) == sorted(
        [live.name, look_alike.name]
    )
    assert blob.read_bytes() == b"stored\n"
    assert blob.stat().st_nlink == 2  # the live diff's link only


# a writer in a pid namespace of its own (a container of the same machine), its process id
# there one that names another process here, or none; alive until its stdin closes
IN_ITS_OWN_NAMESPACE = """
import os, sys
from pathlib import Path
from promoter.store import state_temps
while True:
    child = os.fork()
    if child == 0 and os.getpid() < 1000:  # past the kernel's own threads' ids
        os._exit(0)
    if child == 0:
        name = state_temps.temp_name()
        (Path(sys.argv[1]) / name).write_bytes(b"in flight")
        print(name, flush=True)
        sys.stdin.read()
        os._exit(0)
    os.waitpid(child, 0)
    if child >= 1000:
        sys.exit(0)
"""


def test_a_live_writer_in_another_pid_namespace_keeps_its_temp_in_a_shared_directory(
    tmp_path: Path,
) -> None:
    """A replacement on the same machine in a container of its own shares the boot id,
    not the process ids: its live writer's temp names a process id that here is another
    process, or none, and a shared directory's sweep removed it while it was written. A
    writer is gone only if no process of the machine started at the tick its name
    records (seen whole from the initial pid namespace, as here): the temp is kept while
    its writer lives (removed once gone:
    ``test_a_shared_directory_keeps_every_temp_not_provably_gone_on_this_machine``)."""
    if os.stat("/proc/self/ns/pid").st_ino != 0xEFFFFFFC:
        pytest.skip("not in the initial pid namespace: a shared directory keeps such temps")
    state = tmp_path / "state"
    place = state / "audit" / "tmp"
    place.mkdir(parents=True)
    argv = ["bwrap", "--unshare-pid", "--dev-bind", "/", "/", "--proc", "/proc"]
    shared = "host host-a (active, not fenced)"
    with subprocess.Popen(
        [*argv, sys.executable, "-c", IN_ITS_OWN_NAMESPACE, str(place)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as writer:
        assert writer.stdin is not None and writer.stdout is not None
        temp = place / writer.stdout.readline().decode().strip()
        assert temp.name.startswith(f"{PREFIX}{state_temps._BOOT}-")  # this boot's
        assert sweep(state, shared_with=shared) == []
        assert temp.read_bytes() == b"in flight"
        writer.stdin.close()
        assert writer.wait(60) == 0
