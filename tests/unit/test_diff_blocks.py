"""How the console cuts a unified diff into per-file blocks of classified lines.

The diffs it is given are cut at a byte limit (so a hunk may end early), name files the
way git quotes them, and carry git's own lines (``index``, ``Binary files``, ``\\ No
newline``): every line is kept as it came, with its class.
"""

from __future__ import annotations

from promoter.api.ui.diffview import FOLD_LINES, file_blocks

DIFF = (
    "diff --git a/bin.dat b/bin.dat\n"
    "index 88768ef..3e3315e 100644\n"
    "Binary files a/bin.dat and b/bin.dat differ\n"
    'diff --git "a/\\303\\244 b.txt" "b/\\303\\244 b.txt"\n'
    "index 71ac1b5..e00739d 100644\n"
    '--- "a/\\303\\244 b.txt"\n'
    '+++ "b/\\303\\244 b.txt"\n'
    "@@ -1,8 +1,8 @@\n"
    " a\n"
    "-b\n"
    "+B\n"
    "\\ No newline at end of file\n"
    " c\n"  # the diff is cut here, five lines short of its hunk
)


def test_each_file_is_a_block_and_every_line_keeps_its_text_and_class() -> None:
    blocks = file_blocks(DIFF)
    assert [block.lines for block in blocks] == [
        [
            ("meta", "diff --git a/bin.dat b/bin.dat"),
            ("meta", "index 88768ef..3e3315e 100644"),
            ("meta", "Binary files a/bin.dat and b/bin.dat differ"),
        ],
        [
            ("meta", 'diff --git "a/\\303\\244 b.txt" "b/\\303\\244 b.txt"'),
            ("meta", "index 71ac1b5..e00739d 100644"),
            ("meta", '--- "a/\\303\\244 b.txt"'),
            ("meta", '+++ "b/\\303\\244 b.txt"'),
            ("hunk", "@@ -1,8 +1,8 @@"),
            ("ctx", " a"),
            ("del", "-b"),
            ("add", "+B"),
            ("ctx", "\\ No newline at end of file"),
            ("ctx", " c"),
        ],
    ]
    assert not any(block.folded for block in blocks)


def test_a_diff_without_git_headers_is_one_block_and_a_long_block_folds() -> None:
    lines = ["--- a/src/app.py", "+++ b/src/app.py", "@@ -1 +1 @@"]
    lines += ["+x"] * (FOLD_LINES - 3)
    (block,) = file_blocks("\n".join(lines))
    assert [kind for kind, _ in block.lines[:4]] == ["meta", "meta", "hunk", "add"]
    assert not block.folded
    (longer,) = file_blocks("\n".join([*lines, "+y"]))
    assert longer.folded
    assert file_blocks("") == []
