"""The directory an unconfined command starts in is entered without following a link.

``where.opened`` (a copy clone, entered by descriptor) and the overlay's mount shim
(``layers.Overlay.wrap(..., into=)``, entered in the mount's namespace) open the
person's directory a component at a time with ``O_NOFOLLOW``: a link in its place,
swapped in after ``where.start_dir`` looked (by a process an earlier unconfined step left
running), is refused, never entered. Real directories, a real overlay mount.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from promoter.errors import PathUnsafe
from promoter.executor import layers
from promoter.executor.run import where


def test_a_link_swapped_in_after_the_check_is_not_entered_in_a_copy_clone(
    tmp_path: Path,
) -> None:
    clone = tmp_path / "clone"
    (clone / "sub" / "deep").mkdir(parents=True)
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    assert where.start_dir(clone, "sub/deep", stack=None, layout=None) == ("sub/deep", None)
    (clone / "sub" / "deep").rmdir()
    (clone / "sub").rmdir()
    (clone / "sub").symlink_to(outside)
    with pytest.raises(PathUnsafe) as refused:
        where.opened(clone, "sub/deep")
    assert refused.value.context["path"] == "sub/deep"


def test_a_link_in_the_overlay_is_not_entered_by_the_mount_shim(tmp_path: Path) -> None:
    home = tmp_path / "run"
    for name in ("layers/start", "layers/upper", "layers/work", "base/sub/deep", "clone"):
        (home / name).mkdir(parents=True)
    if not layers.available(tmp_path):
        pytest.skip("an overlay cannot be mounted in a user namespace here")
    overlay = layers.Overlay(layers.Layers(home, (home / "base",)), home)
    entered = subprocess.run(
        overlay.wrap(["pwd"], into="sub/deep"), capture_output=True, check=False, timeout=30
    )
    assert entered.returncode == 0, entered.stderr
    assert entered.stdout == f"{home}/clone/sub/deep\n".encode()
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (home / "layers/upper/sub").symlink_to(outside)  # the link, over the base's directory
    refused = subprocess.run(
        overlay.wrap(["sh", "-c", ": > planted"], into="sub/deep"),
        capture_output=True,
        check=False,
        timeout=30,
    )
    assert refused.returncode == 125
    assert refused.stderr.startswith(b"promoter: sub/deep: not a directory of the sandbox: ")
    assert list((outside / "deep").iterdir()) == []
    assert os.listdir(home / "layers/upper") == ["sub"]
