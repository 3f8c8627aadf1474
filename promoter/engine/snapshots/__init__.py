"""Shadow snapshots of a worktree: capture, watch, list, diff (SPEC §8).

Not here: restoring one; that is ``engine.operation.restore``.
"""
