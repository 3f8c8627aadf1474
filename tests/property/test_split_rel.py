"""Property: ``split_rel`` refuses exactly the paths its per-component rule refuses.

``split_rel`` looks at the whole path first and checks component by component only a
path that might fail; whatever it answers must be what checking every component gives:
the parts for a safe path, else ``PathUnsafe`` naming the first unsafe component.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.errors import PathUnsafe
from promoter.fs.leaf import _check_component, split_rel

# pieces that meet every rule: separators, dots, NUL, .git spelled in other cases and
# with characters whose case folding differs in length, a lone surrogate (a byte path),
# and a long name
_PIECES = [
    "a",
    "/",
    ".",
    "..",
    "\x00",
    ".git",
    ".GIT",
    ".Git",
    "git",
    "G",
    "İ",
    "ß",
    "ǰ",
    "K",
    "\udcff",
    "é",
    "x" * 120,
]
paths = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=3)), max_size=10).map("".join)


def _component_refused(name: str) -> bool:
    """The rule of every component, one name at a time, as the per-component check the
    whole-path look stands in for applies it (``promoter.fs.leaf._check_component``)."""
    try:
        _check_component(name, name)
    except PathUnsafe:
        return True
    return False


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(paths)
def test_split_rel_refuses_exactly_what_a_component_refuses(rel: str) -> None:
    whole_refused = (
        not rel or rel.startswith("/") or len(rel.encode("utf-8", "surrogateescape")) > 4096
    )
    first_bad = next((name for name in rel.split("/") if _component_refused(name)), None)
    if whole_refused or first_bad is not None:
        with pytest.raises(PathUnsafe) as info:
            split_rel(rel)
        if not whole_refused:
            assert info.value.context["component"] == first_bad
    else:
        assert split_rel(rel) == rel.split("/")
