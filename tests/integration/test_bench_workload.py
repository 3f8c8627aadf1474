"""The benchmarks' bare variants and agent-sized change write exactly the target tree.

``bench.workload``'s bare writers (the per-file durable loop, its batched order and the
one-``syncfs`` write) each turn a copy of a real git repository on the base commit into
exactly the workload's target files; ``bench.rows_fixed``'s agent-sized change, as the
patch handed to ``git apply``, gives exactly the files the bundle's changes name, and so
do ``bench.rows_agent``'s changes of 5-17 files to the click-like project, none of a
round touching a file an earlier one touched. No speed is asserted here (that is
``bench``'s job).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench import rows_agent, rows_fixed
from bench import workload as wl


@pytest.mark.parametrize("variant", [wl.bare_loop, wl.bare_batched, wl.bare_syncfs])
def test_a_bare_variant_writes_exactly_the_target_tree(
    tmp_path: Path, variant: Callable[[Path, list[wl.Step]], None]
) -> None:
    workload = wl.make_workload(60, 256)
    assert workload.counts == {"modify": 36, "create": 12, "delete": 12}
    source = wl.make_source(tmp_path, workload)
    copy = wl.copy_repo(source.path, tmp_path / "copy")
    variant(copy, workload.steps)
    assert wl.tree_files(copy) == workload.target
    assert not list(copy.rglob(".bench-tmp*"))


def test_the_agent_sized_change_as_a_patch_gives_the_changed_files(tmp_path: Path) -> None:
    workload = wl.make_workload(115, 4096)
    source = wl.make_source(tmp_path, workload)
    base = wl.tree_files(source.path)
    steps = rows_fixed.agent_change(1, 0, base)
    assert [step.operation for step in steps] == ["create"] * 3 + ["modify"] * 7
    changed = []  # lines of a new file, lines rewritten in a modified one
    for step in steps:
        assert step.new is not None
        new = step.new.splitlines()
        if step.old is None:
            changed.append(len(new))
        else:
            changed.append(sum(a != b for a, b in zip(step.old.splitlines(), new, strict=True)))
    assert changed == [57, 29, 42, 29, 42, 55, 27, 40, 53, 25]
    patch = tmp_path / "agent.patch"
    patch.write_bytes(rows_fixed.agent_patch(steps))
    wl.git(source.path, "apply", str(patch))
    expected = dict(base)
    expected.update({step.path: step.new for step in steps if step.new is not None})
    assert wl.tree_files(source.path) == expected


def test_the_agent_changes_of_one_request_apply_as_patches_on_disjoint_files(
    tmp_path: Path,
) -> None:
    source = rows_agent.make_source(tmp_path)
    base = wl.tree_files(source.path)
    assert len(base) == 166
    changes = [rows_agent.agent_steps(n, 0, base) for n in range(rows_agent.FLOWS + 1)]
    assert [len(steps) for steps in changes] == [10, 5, 17, 9, 13, 7, 15, 11]
    created = [sum(step.old is None for step in steps) for steps in changes]
    assert created == [3, 1, 5, 2, 3, 2, 4, 3]
    touched = [step.path for steps in changes for step in steps]
    assert len(touched) == len(set(touched)) == 87
    expected = dict(base)
    for n, steps in enumerate(changes):
        for step in steps:
            assert step.new is not None and step.new != step.old
            if step.old is None:
                assert step.path.startswith(f"src/clicklike/agent_{n}/")
        patch = tmp_path / f"agent{n}.patch"
        patch.write_bytes(rows_fixed.agent_patch(steps))
        wl.git(source.path, "apply", str(patch))
        expected.update({step.path: step.new for step in steps if step.new is not None})
        assert wl.tree_files(source.path) == expected
