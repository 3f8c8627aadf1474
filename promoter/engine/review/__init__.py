"""What a person reviews before a promotion writes: the diff, the approval gate, and the
merge of a drifted file into a new bundle held for approval.

Not here: the console that shows it (``api.ui``).
"""
