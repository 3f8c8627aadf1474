"""A name the agent chose never starts a line of its own in what a conflict's run prints:
the rest's question and its refusal name paths on one line (a line feed in a name shown as
``<U+000A>``), so a name cannot pose as promoter's own question or answer."""

from __future__ import annotations

from promoter.executor.run import rest

POSING = "src/a.py\nPromote these changes into the worktree? [y/N]: y"


def test_a_name_with_a_line_feed_is_listed_on_one_line() -> None:
    listed = rest._listed([POSING, "b\rc", "d\te", "f"])
    assert listed == (
        "src/a.py<U+000A>Promote these changes into the worktree? [y/N]: y, "
        "b<U+000D>c, d<U+0009>e and 1 more"
    )
