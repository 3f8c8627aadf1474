"""``store.durable``: a state-directory write leaves no name behind while it is made.

Every point between the syscalls of a write is observed in-process (``durable.point``
replaced by a recorder that lists the directory there): with ``O_TMPFILE`` no name but
the final one ever appears; without it (``state_tmpfile=EOPNOTSUPP``, as on a filesystem
that has none) the only other name is a ``temp_name()`` that names this process. New
directories have their parents fsynced, level by level.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter import faults
from promoter.fs import flush
from promoter.store import durable
from promoter.store.state_temps import PREFIX, is_own_temp
from tests.support.fsutil import anonymous_temps_work


@pytest.fixture(params=[True, False], ids=["anonymous", "named"])
def anonymous(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[bool]:
    monkeypatch.setattr(durable, "_no_tmpfile", set())  # this test's own view of the disk
    if request.param and not anonymous_temps_work(tmp_path):
        pytest.skip("this filesystem has no O_TMPFILE")
    if not request.param:
        monkeypatch.setenv(faults.ENV, "state_tmpfile=EOPNOTSUPP@1+")
    faults.reset()
    yield request.param
    faults.reset()


def _record_points(monkeypatch: pytest.MonkeyPatch, directory: Path) -> list[tuple[str, list[str]]]:
    """Each fault point reached, with the names in ``directory`` at that moment."""
    seen: list[tuple[str, list[str]]] = []
    real = faults.point

    def recorder(name: str) -> None:
        names = sorted(os.listdir(directory)) if directory.is_dir() else []
        seen.append((name, names))
        real(name)

    monkeypatch.setattr(durable, "point", recorder)
    return seen


def test_a_new_document_shows_no_name_but_its_writers_temp_while_written(
    anonymous: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind = tmp_path / "receipts" / "promotion"
    seen = _record_points(monkeypatch, kind)
    assert durable.write_new(kind / "op_1.json", b'{"a":1}', fault="audit_promotion") is True
    seen = [(name, names) for name, names in seen if name != "state_tmpfile"]
    points = [name for name, _ in seen]
    expected = [
        "audit_promotion_after_mkdir",
        "audit_promotion_after_mkdir_sync",
        "audit_promotion_after_mkdir",
        "audit_promotion_after_mkdir_sync",
        "audit_promotion_after_create",
        "state_write",
        "audit_promotion_after_write",
        "audit_promotion_after_fsync",
        "audit_promotion_after_link",
    ]
    expected += [] if anonymous else ["audit_promotion_after_unlink_temp"]
    assert points == [*expected, "audit_promotion_after_dir_fsync"]
    for name, names in seen:
        others = [n for n in names if n != "op_1.json"]
        unnamed = ("audit_promotion_after_unlink_temp", "audit_promotion_after_dir_fsync")
        if anonymous or name in unnamed or "mkdir" in name:
            assert others == [], (name, names)
        else:
            assert len(others) == 1 and is_own_temp(others[0]), (name, names)
            assert f"-{os.getpid()}-" in others[0]  # it names its writer
    assert os.listdir(kind) == ["op_1.json"]
    assert (kind / "op_1.json").read_bytes() == b'{"a":1}'
    assert (kind / "op_1.json").stat().st_mode & 0o777 == 0o444


def test_an_existing_document_is_never_replaced_and_no_temp_stays(
    anonymous: bool, tmp_path: Path
) -> None:
    path = tmp_path / "grants" / "grt_1.json"
    assert durable.write_new(path, b"first") is True
    assert durable.write_new(path, b"second") is False
    assert path.read_bytes() == b"first"
    assert os.listdir(path.parent) == ["grt_1.json"]


def test_a_replace_links_its_temp_only_for_the_rename(
    anonymous: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "quota" / "q.json"
    durable.write_replace(path, b"1")
    seen = _record_points(monkeypatch, path.parent)
    durable.write_replace(path, b"22", mode=0o600)
    named_at = [name for name, names in seen if any(n.startswith(PREFIX) for n in names)]
    written = ["state_after_create", "state_write", "state_after_write", "state_after_fsync"]
    # anonymous: the temp is named only between its link and the rename over the target;
    # named: from its creation to the rename
    assert named_at == (["state_after_link"] if anonymous else written)
    assert [name for name, _ in seen][-2:] == ["state_after_rename", "state_after_dir_fsync"]
    assert path.read_bytes() == b"22"
    assert path.stat().st_mode & 0o777 == 0o600
    assert os.listdir(path.parent) == ["q.json"]


def test_a_staged_replace_flushes_nothing_until_it_is_finished(
    anonymous: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "quota" / "q.json"
    durable.write_replace(path, b"1")
    before = flush.flushes()
    dropped = durable.StagedReplace(path, b"22")
    assert flush.flushes() - before == {}  # the caller's group sync makes it durable
    dropped.close()
    dropped.close()
    assert path.read_bytes() == b"1"
    assert os.listdir(path.parent) == ["q.json"]  # a dropped temp leaves no name
    seen = _record_points(monkeypatch, path.parent)
    staged = durable.StagedReplace(path, b"333")
    assert path.read_bytes() == b"1"
    staged.finish()
    assert flush.flushes() - before == {"fsync": 1}  # the folder's, after the rename
    names = [name for name, _ in seen]
    assert "state_after_fsync" not in names
    assert names[-2:] == ["state_after_rename", "state_after_dir_fsync"]
    assert path.read_bytes() == b"333"
    assert os.listdir(path.parent) == ["q.json"]


@pytest.mark.parametrize("at", ["state_write", "state_after_write", "state_after_fsync"])
def test_a_failed_write_leaves_no_temp_and_no_target(
    anonymous: bool, at: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = os.environ.get(faults.ENV, "")
    monkeypatch.setenv(faults.ENV, ",".join(filter(None, [spec, f"{at}=ENOSPC"])))
    faults.reset()
    path = tmp_path / "audit" / "bundles" / "bnd_1.json"
    with pytest.raises(OSError) as raised:
        durable.write_new(path, b"bytes")
    assert raised.value.errno == errno.ENOSPC
    assert os.listdir(path.parent) == []


def test_make_dirs_fsyncs_the_parent_of_every_level_it_creates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    real = durable.fsync_dir

    def recording(path: Path) -> None:
        synced.append(path)
        real(path)

    monkeypatch.setattr(durable, "fsync_dir", recording)
    (tmp_path / "a").mkdir()
    durable.make_dirs(tmp_path / "a" / "b" / "c" / "d", mode=0o700)
    assert synced == [tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"]
    assert (tmp_path / "a" / "b" / "c" / "d").is_dir()
    synced.clear()
    durable.make_dirs(tmp_path / "a" / "b")  # nothing created: nothing fsynced
    assert synced == []
    durable.make_dirs(tmp_path / "e", sync=False)  # the caller syncs the filesystem after
    assert synced == [] and (tmp_path / "e").is_dir()


def test_make_dirs_refuses_a_file_where_a_directory_goes(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"user")
    with pytest.raises(OSError):
        durable.make_dirs(tmp_path / "a" / "b")
    assert (tmp_path / "a").read_bytes() == b"user"
