"""Taking work in: bundles, grants, chained runs, and the authority checks on them.

Not here: running a promotion (``engine.operation``).
"""
