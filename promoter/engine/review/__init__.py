"""What a person reviews before a promotion writes: the diff, and the approval gate.

Not here: the console that shows it (``api.ui``).
"""
