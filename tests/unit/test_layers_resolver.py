"""``layers.Resolver`` answers as ``layers.resolve`` does, and reads each path once.

Three plain directories stand for a sandbox's layers (top first): files, directories
over files and files over directories, links, a whiteout (a 0/0 character device,
where this process may make one) and an opaque directory (its ``user.overlay.opaque``
attribute, where the filesystem keeps it). Every path of every layer, absent paths and
odd spellings are asked of both, in two orders, and twice.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from promoter.executor import layers


def _whiteout(path: Path) -> bool:
    try:
        os.mknod(path, 0o600 | 0o020000, os.makedev(0, 0))
    except PermissionError:
        return False
    return True


def _opaque(path: Path) -> bool:
    try:
        os.setxattr(path, layers.OPAQUE, b"y")
    except OSError:
        return False
    return True


def _stack(root: Path) -> tuple[list[Path], bool, bool]:
    top, mid, base = root / "top", root / "mid", root / "base"
    files = {
        base: ["a.txt", "src/x.py", "src/pkg/y.py", "src/pkg/z.py", "gone/k", "shut/b",
               "file_then_dir", "deep/1/2/3/4/f", "hidden/w"],
        mid: ["src/pkg/y.py", "dir_then_file", "shut/m", "deep/1/2/m"],
        top: ["a.txt", "src/new.py", "file_then_dir/inner", "shut/t", "deep/1/2/3/t"],
    }  # fmt: skip
    (base / "dir_then_file").mkdir(parents=True)
    (base / "dir_then_file" / "below").write_bytes(b"below")
    for layer, paths in files.items():
        for path in paths:
            (layer / path).parent.mkdir(parents=True, exist_ok=True)
            (layer / path).write_bytes(path.encode())
    (top / "link").symlink_to("src")
    (mid / "src" / "pkg" / "link_file").symlink_to("y.py")
    whiteouts = _whiteout(top / "gone") and _whiteout(mid / "src" / "x.py")
    (top / "hidden").mkdir()
    opaque = _opaque(top / "shut") and _opaque(top / "hidden")
    return [top, mid, base], whiteouts, opaque


def _asked(stack: list[Path]) -> list[str]:
    paths = {""}
    for layer in stack:
        for folder, dirs, names in os.walk(layer):
            rel = os.path.relpath(folder, layer)
            for name in [*dirs, *names]:
                paths.add(name if rel == "." else f"{rel}/{name}")
    paths |= {p + "/nothing" for p in list(paths) if p}
    return sorted(paths | {"absent", "src//x.py", "/a.txt", "link/x.py", "src/pkg/link_file/y"})


def _seen(found: tuple[bytes, os.stat_result] | None) -> tuple[bytes, int, int] | None:
    return None if found is None else (found[0], found[1].st_ino, found[1].st_mode)


@pytest.mark.parametrize("order", ["sorted", "reversed"])
def test_a_resolver_answers_every_path_as_resolve_does(tmp_path: Path, order: str) -> None:
    stack, whiteouts, opaque = _stack(tmp_path)
    asked = _asked(stack)
    resolver = layers.Resolver(stack)
    for path in reversed(asked) if order == "reversed" else asked:
        expected = _seen(layers.resolve(stack, path))
        assert _seen(resolver(path)) == expected, path
        assert _seen(resolver(path)) == expected, path  # asked again: the same answer
    assert _seen(resolver("src/pkg/y.py"))[0] == os.fsencode(stack[1] / "src/pkg/y.py")  # type: ignore[index]
    assert resolver("dir_then_file/below") is None  # a file above hides the directory
    assert resolver("file_then_dir/inner") is not None
    if whiteouts:
        assert resolver("gone/k") is None and resolver("gone") is None
        assert resolver("src/x.py") is None
    if opaque:
        assert resolver("shut/b") is None and resolver("shut/m") is None
        assert resolver("shut/t") is not None and resolver("hidden/w") is None


def test_a_resolver_reads_a_path_and_a_shared_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, _, _ = _stack(tmp_path)
    looked: list[bytes] = []
    real = layers._lstat

    def counted(path: bytes) -> os.stat_result | None:
        looked.append(path)
        return real(path)

    monkeypatch.setattr(layers, "_lstat", counted)
    resolver = layers.Resolver(stack)
    resolver("src/pkg/y.py")
    first = len(looked)
    assert first == 7  # src and src/pkg in each of the three layers, y.py in mid
    resolver("src/pkg/y.py")
    assert len(looked) == first  # the same path: no further look-up
    resolver("src/pkg/z.py")
    assert len(looked) == first + 2  # its folder known: only the name, in mid then base
    looked.clear()
    layers.resolve(stack, "src/pkg/z.py")
    assert len(looked) > 2  # what the walk alone costs, every time
