"""Taking work in: bundles, grants, chained runs.

Not here: running a promotion (``engine.operation``).
"""
