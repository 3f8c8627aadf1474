"""The pure resolver (protocol: bundles#symlinks-by-resolution) on the named attacks, without a
filesystem."""

from __future__ import annotations

import pytest

from promoter.domain.resolve import MAX_HOPS, final_tree_problems, resolve


def problems(
    new: dict[str, bytes | None], existing: dict[str, bytes] | None = None
) -> dict[str, str]:
    base = existing or {}
    return dict(final_tree_problems(new, base, base.get))


def test_two_links_that_resolve_outside_together_are_refused() -> None:
    found = problems({"p/q": b"..", "p/r": b"q/../.."})
    assert list(found) == ["p/r"]
    assert found["p/r"] == "resolves outside the worktree through p/q"


def test_a_link_through_a_link_to_a_file_outside_is_refused() -> None:
    assert "p/o" in problems({"p/q": b"..", "p/o": b"q/../outside"})


def test_dotdot_after_a_link_goes_up_from_where_the_link_leads() -> None:
    links = {"x/l1": b"l2/..", "x/l2": b"l3", "x/l3": b".."}
    assert resolve("x/l3", links.get).resolved == ""
    assert not resolve("x/l1", links.get).inside
    links["x/l3"] = b"../d/e"  # now l2 leads to d/e and l2/.. to d: inside
    assert resolve("x/l1", links.get).resolved == "d"


def test_a_link_into_dot_git_through_an_existing_link_is_refused() -> None:
    found = problems({"src/x": b"../hooks/pre-commit"}, {"hooks": b".git/hooks"})
    assert found == {"src/x": "resolves into .git through hooks"}
    assert problems({"b": b"a/.GiT/config"}, {"a": b"."})["b"].startswith("resolves into .git")


def test_an_existing_link_made_to_escape_by_a_new_link_is_refused() -> None:
    found = problems({"p": b"."}, {"d/e": b"../p/.."})
    assert list(found) == ["d/e"]
    assert "through p" in found["d/e"]


def test_an_existing_escaping_link_the_bundle_does_not_reach_is_not_the_bundles() -> None:
    assert problems({"src/l": b"../README.md"}, {"out": b"/etc", "up": b"../.."}) == {}


def test_a_loop_is_refused_like_the_kernels_eloop() -> None:
    found = problems({"l1": b"l2", "l2": b"l1"})
    assert found["l1"] == f"follows more than {MAX_HOPS} links (a loop)"
    chain = {f"l{i}": f"l{i + 1}".encode() for i in range(MAX_HOPS)}
    chain[f"l{MAX_HOPS}"] = b"src"
    assert resolve("l1", chain.get).inside  # 40 links followed in all: allowed
    assert not resolve("l0", {**chain, "l0": b"l1"}.get).inside  # 41: refused


def test_an_absolute_link_met_on_the_way_is_refused() -> None:
    assert problems({"x": b"abs/y"}, {"abs": b"/etc"})["x"] == "reaches abs, an absolute link"


@pytest.mark.parametrize(
    ("links", "path", "resolved"),
    [
        ({"a": b"b/c"}, "a", "b/c"),
        ({"x/y": b"../z"}, "x/y", "z"),
        ({"l1": b"l2", "l2": b"src"}, "l1", "src"),
        ({"d/l": b"../e/l2/f", "e/l2": b"../g"}, "d/l", "g/f"),
        ({"l": b"missing/../src/./app.py"}, "l", "src/app.py"),
    ],
)
def test_links_that_stay_inside_resolve_where_the_kernel_would(
    links: dict[str, bytes], path: str, resolved: str
) -> None:
    assert resolve(path, links.get).resolved == resolved
    assert problems(dict(links.items())) == {}


def test_a_link_replaced_by_a_file_is_no_longer_followed() -> None:
    assert problems({"q": None, "r": b"q/.."}, {"q": b"sub/deeper"}) == {}
