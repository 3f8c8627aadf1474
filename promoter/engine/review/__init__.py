"""What a person reviews before a promotion writes: the diff and the approval gate.

Not here: the console that shows it (``api.ui``), the merge of a drifted file into a new
bundle held for approval (``engine.operation.merge``: it requests a promotion).
"""
