"""A chain re-checked by one ``openat2`` answers as the component walk does, attack by attack.

``ParentChain.verify_chain`` (past a held directory's own check) first asks
``promoter.fs.openat2.chain_in_place``; only a tree still in place may pass there, and
anything else must end in exactly the walk's refusal (same error, message and context).
Each attack is made on a real tree after two chains were opened on it; one is re-checked
with ``openat2`` chosen, the other with the walk only, and the outcomes must be equal.
The whole module runs twice: on this kernel, and with the detector saying the kernel has
no ``openat2`` (the fallback a seccomp filter or an old kernel gives).
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from promoter.errors import PromoterError
from promoter.fs import openat2, syscalls
from promoter.fs.chain import ON_ANOTHER_MOUNT, ParentChain
from promoter.fs.root import Root
from tests.support.mounts import bind_mount

TARGET = "a/b/c/f.txt"
Outcome = tuple[str, str, dict[str, Any]]
IN_PLACE: Outcome = ("in place", "", {})


@pytest.fixture(params=["kernel_openat2", "forced_fallback"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "forced_fallback":  # as on a kernel without openat2
        monkeypatch.setattr(openat2, "kernel_has_it", lambda: False)
        monkeypatch.setattr(syscalls, "_openat2_impl", lambda: None)
    elif not openat2.kernel_has_it():
        pytest.skip("this kernel (or its seccomp filter) has no openat2")
    yield request.param


def _tree(tmp_path: Path) -> Path:
    top = tmp_path / "worktree"
    (top / "a" / "b" / "c").mkdir(parents=True)
    (top / "a" / "b" / "c" / "f.txt").write_bytes(b"held\n")
    return top


def _chain(root: Root, rel: str = TARGET) -> ParentChain:
    return root.open_parent(rel, create=False).chain


def _recheck(chain: ParentChain, *, use_openat2: bool, monkeypatch: pytest.MonkeyPatch) -> Outcome:
    monkeypatch.setattr(openat2, "_chosen", [use_openat2])
    try:
        chain.verify_chain()
    except PromoterError as exc:
        return (type(exc).__name__, exc.detail, dict(exc.context))
    return IN_PLACE


def _both(
    top: Path, attack: Callable[[Path], None], monkeypatch: pytest.MonkeyPatch
) -> tuple[Outcome, Outcome, Root]:
    root = Root.open(top)
    by_openat2, by_walk = _chain(root), _chain(root)
    attack(top)
    one = _recheck(by_openat2, use_openat2=True, monkeypatch=monkeypatch)
    other = _recheck(by_walk, use_openat2=False, monkeypatch=monkeypatch)
    by_openat2.close()
    by_walk.close()
    return one, other, root


def _symlink_in_the_middle(top: Path) -> None:
    os.rename(top / "a" / "b", top / "a" / "b_real")
    os.symlink("b_real", top / "a" / "b")


def _symlink_at_the_parent(top: Path) -> None:
    os.rename(top / "a" / "b" / "c", top / "a" / "b" / "c_real")
    os.symlink("c_real", top / "a" / "b" / "c")


def _symlink_with_dotdot_to_the_same_directory(top: Path) -> None:
    (top / "x").mkdir()
    os.rename(top / "a" / "b", top / "x" / "b")
    os.symlink("../x/b", top / "a" / "b")  # the held directories, reached through ``..``


def _directory_swapped(top: Path) -> None:
    os.rename(top / "a" / "b", top / "a" / "b_old")
    (top / "a" / "b" / "c").mkdir(parents=True)


def _ancestor_swapped_under_the_same_parent(top: Path) -> None:
    # the held parent itself is at its path again, but below a new ``a``
    os.rename(top / "a", top / "a_old")
    (top / "a").mkdir()
    os.rename(top / "a_old" / "b", top / "a" / "b")


def _parent_replaced_by_a_file(top: Path) -> None:
    os.rename(top / "a" / "b" / "c", top / "a" / "b" / "c_old")
    (top / "a" / "b" / "c").write_bytes(b"not a directory\n")


def _parent_moved_away(top: Path) -> None:
    os.rename(top / "a" / "b", top / "a" / "gone")


def _nothing(top: Path) -> None:
    del top


ATTACKS: dict[str, tuple[Callable[[Path], None], Outcome]] = {
    "nothing_changed": (_nothing, IN_PLACE),
    "symlink_in_the_middle": (
        _symlink_in_the_middle,
        ("PathUnsafe", "a path component is a symlink", {"path": TARGET, "at": "a/b"}),
    ),
    "symlink_at_the_parent": (
        _symlink_at_the_parent,
        ("PathUnsafe", "a path component is a symlink", {"path": TARGET, "at": "a/b/c"}),
    ),
    "dotdot_symlink_to_the_held_directories": (
        _symlink_with_dotdot_to_the_same_directory,
        ("PathUnsafe", "a path component is a symlink", {"path": TARGET, "at": "a/b"}),
    ),
    "directory_swapped": (
        _directory_swapped,
        ("PathUnsafe", "a held directory was swapped", {"path": TARGET, "at": "a/b"}),
    ),
    "ancestor_swapped_parent_moved_back": (
        _ancestor_swapped_under_the_same_parent,
        ("PathUnsafe", "a held directory was swapped", {"path": TARGET, "at": "a"}),
    ),
    "parent_replaced_by_a_file": (
        _parent_replaced_by_a_file,
        ("PathUnsafe", "a held directory was replaced", {"path": TARGET, "at": "a/b/c"}),
    ),
    "parent_moved_away": (
        _parent_moved_away,
        ("PathUnsafe", "a held directory was moved", {"path": TARGET, "at": "a/b"}),
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_one_call_recheck_refuses_exactly_what_the_walk_refuses(
    attack: str, kernel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make, expected = ATTACKS[attack]
    one, other, root = _both(_tree(tmp_path), make, monkeypatch)
    assert one == other == expected
    with root:
        answered = 1 if attack == "nothing_changed" and kernel == "kernel_openat2" else 0
        assert root.one_call_rechecks == answered  # an attack is always named by the walk
        assert root.rewalks == 2


def test_bind_mount_over_a_held_directory_is_refused_as_the_walk_refuses(
    kernel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = _tree(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "c").mkdir(parents=True)
    root = Root.open(top)
    by_openat2, by_walk = _chain(root), _chain(root)
    with bind_mount(elsewhere, top / "a" / "b"):
        one = _recheck(by_openat2, use_openat2=True, monkeypatch=monkeypatch)
        other = _recheck(by_walk, use_openat2=False, monkeypatch=monkeypatch)
    for chain in (by_openat2, by_walk, root):
        chain.close()
    assert one == other
    assert one[0] == "PathUnsafe" and one[2]["at"] == "a/b"
    assert root.one_call_rechecks == 0


def test_bind_mount_of_the_same_directory_is_refused_by_the_lookup(
    kernel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the mount shows the held directories themselves: same (device, inode) everywhere,
    # so only the mount crossing tells it; both refuse it at the mount point
    top = _tree(tmp_path)
    root = Root.open(top)
    by_openat2, by_walk = _chain(root), _chain(root)
    with bind_mount(top / "a" / "b", top / "a" / "b"):
        one = _recheck(by_openat2, use_openat2=True, monkeypatch=monkeypatch)
        other = _recheck(by_walk, use_openat2=False, monkeypatch=monkeypatch)
    for chain in (by_openat2, by_walk, root):
        chain.close()
    assert one == other
    if kernel == "kernel_openat2":  # RESOLVE_NO_XDEV in the walk's own lookups too
        assert one == ("PathUnsafe", ON_ANOTHER_MOUNT, {"path": TARGET, "at": "a/b"})
    assert root.one_call_rechecks == 0


def test_root_renamed_is_refused_before_either_lookup(
    kernel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = _tree(tmp_path)

    def rename_root(top: Path) -> None:
        os.rename(top, top.with_name("moved"))

    one, other, root = _both(top, rename_root, monkeypatch)
    root.close()
    assert one == other == ("PathUnsafe", "worktree root is gone", {"path": str(top)})


def test_a_file_in_the_root_is_checked_by_the_walk_of_no_component(
    kernel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = _tree(tmp_path)
    (top / "top.txt").write_bytes(b"top\n")
    with Root.open(top) as root, _chain(root, "top.txt") as chain:
        assert _recheck(chain, use_openat2=True, monkeypatch=monkeypatch) == IN_PLACE
        assert root.one_call_rechecks == 0


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("..", errno.EXDEV),
        ("a/../..", errno.EXDEV),
        ("a/b/../../../worktree", errno.EXDEV),
        ("/", errno.EXDEV),
        ("a/link", errno.ELOOP),
        ("a/b/c/f.txt", errno.ENOTDIR),
        ("a/missing", errno.ENOENT),
    ],
)
def test_lookup_beneath_the_root_refuses_dotdot_escapes_symlinks_and_non_directories(
    path: str, code: int, tmp_path: Path
) -> None:
    if not openat2.kernel_has_it():
        pytest.skip("this kernel (or its seccomp filter) has no openat2")
    top = _tree(tmp_path)
    os.symlink("b", top / "a" / "link")  # a symlink to a directory inside the root
    fd = os.open(top, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with pytest.raises(OSError) as raised:
            os.close(openat2.open_beneath(fd, path))
        assert raised.value.errno == code
        inside = openat2.open_beneath(fd, "a/b/../b/c")  # ``..`` that stays beneath is a path
        assert os.fstat(inside).st_ino == os.stat(top / "a" / "b" / "c").st_ino
        os.close(inside)
    finally:
        os.close(fd)


def test_setting_false_keeps_the_walk_and_true_uses_one_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not openat2.kernel_has_it():
        pytest.skip("this kernel (or its seccomp filter) has no openat2")
    top = _tree(tmp_path)
    with Root.open(top) as root, _chain(root) as chain:
        monkeypatch.setattr(openat2, "_chosen", [True])
        openat2.choose(False)
        chain.verify_chain()
        assert (root.rewalks, root.one_call_rechecks) == (1, 0)
        openat2.choose(True)
        chain.verify_chain()
        assert (root.rewalks, root.one_call_rechecks) == (2, 1)


def test_unavailable_openat2_is_probed_once_and_falls_back_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def refused(dir_fd: int, path: str | bytes, flags: int, resolve: int) -> int:
        calls.append(resolve)
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))  # or EPERM under seccomp

    monkeypatch.setattr(syscalls, "openat2", refused)
    monkeypatch.setattr(openat2, "_chosen", [True])  # whatever a daemon chose before
    monkeypatch.setattr(openat2, "kernel_has_it", functools.cache(openat2.probe))
    top = _tree(tmp_path)
    with Root.open(top) as root, _chain(root) as chain:
        for _ in range(3):
            chain.verify_chain()
        assert calls == [openat2.RESOLVE]  # the probe, once; every re-check walked
        assert (root.rewalks, root.one_call_rechecks) == (3, 0)
