"""An overlay's upper layer holding what its owner cannot read
(protocol: runs#upper-layer-bundle): the command, running as the person, made a directory
or a file mode 000. Root reads it anyway; the person, who builds the bundle, cannot: the
build refuses, naming it, instead of failing with the host's error. A copy clone's
directory made mode 000, which git's listing of untracked files leaves out with a
warning, is refused the same way, never left out of the bundle.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from promoter.domain.bundle_records import grant_record
from promoter.errors import PromoterError
from promoter.executor import layers, upper
from promoter.executor.builder import build_bundle
from tests.gitutil import commit_all, git
from tests.support.flows import make_grant

IDENTITY = "repo_" + "0" * 32
NOBODY = 65534


def _as_nobody(box: layers.Layers, source: Path) -> dict[str, object]:
    """What ``build_from_layers`` answers when run as ``nobody`` (the tree's owner)."""

    def build() -> None:
        here = layers.Layers(Path(box.home.name), tuple(Path(b.name) for b in box.bases))
        upper.build_from_layers(here, grant).close()

    grant = grant_record(make_grant(source, IDENTITY))
    return _built_by_nobody(box.home.parent, build)


def _built_by_nobody(top: Path, build: Callable[[], None]) -> dict[str, object]:
    """What ``build`` answers when run as ``nobody``, the owner of everything under
    ``top``, in ``top`` (its parents are root's own, mode 700: reached as root)."""
    for where, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            os.chown(os.path.join(where, name), NOBODY, NOBODY, follow_symlinks=False)
    said, heard = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no longer root, then the build
        code = 1
        try:
            os.close(said)
            os.chdir(top)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                build()
                answer: dict[str, object] = {"built": True}
            except PromoterError as exc:
                answer = {"code": exc.code, "detail": exc.detail, **exc.context}
            except OSError as exc:
                answer = {"oserror": exc.errno}
            os.write(heard, json.dumps(answer).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(heard)
    with os.fdopen(said, "rb") as reading:
        data = reading.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    loaded: dict[str, object] = json.loads(data)
    return loaded


@pytest.fixture
def source(tmp_path: Path) -> Path:
    repo = tmp_path / "source"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README.md").write_bytes(b"# project\n")
    commit_all(repo, "first")
    return repo


def _box(tmp_path: Path) -> layers.Layers:
    home = tmp_path / "runs" / "run_1"
    base = tmp_path / "runs" / "base"
    base.mkdir(parents=True)
    (base / "README.md").write_bytes(b"# project\n")
    box = layers.Layers(home, (base,))
    layers.make_dirs(box)
    return box


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to build as another user")
def test_a_directory_the_command_made_unreadable_is_refused_by_name(
    tmp_path: Path, source: Path
) -> None:
    box = _box(tmp_path)
    locked = box.upper / "locked"
    locked.mkdir()
    (locked / "f.py").write_bytes(b"hidden from the build\n")
    locked.chmod(0)
    answer = _as_nobody(box, source)
    assert answer.get("code") == "path_unsafe", answer
    assert answer["path"] == "locked"
    assert "cannot be read" in str(answer["detail"])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to build as another user")
def test_a_file_the_command_made_unreadable_is_refused_by_name(
    tmp_path: Path, source: Path
) -> None:
    box = _box(tmp_path)
    (box.upper / "README.md").write_bytes(b"changed, then made unreadable\n")
    (box.upper / "README.md").chmod(0)
    answer = _as_nobody(box, source)
    assert answer.get("code") == "path_unsafe", answer
    assert answer["path"] == "README.md"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to build as another user")
def test_a_directory_made_unreadable_in_a_copy_clone_is_refused_not_left_out(
    source: Path,
) -> None:
    """The clone is reached by its absolute path: it lies where ``nobody`` may walk."""
    with tempfile.TemporaryDirectory() as reachable:
        os.chmod(reachable, 0o755)
        clone = Path(reachable) / "clone"
        shutil.copytree(source, clone, symlinks=True)
        locked = clone / "locked"
        locked.mkdir()
        (locked / "f.py").write_bytes(b"hidden from git's listing\n")
        locked.chmod(0)
        grant = grant_record(make_grant(clone, IDENTITY))
        os.chown(clone, NOBODY, NOBODY)  # git's safe.directory: the worktree is the person's
        answer = _built_by_nobody(clone, lambda: build_bundle(clone, grant).close())
    assert answer.get("code") == "path_unsafe", answer
    assert answer["path"] == "locked"
    assert answer["detail"] == (
        "a path in the worktree cannot be read (its mode shuts its owner out): locked"
    )
