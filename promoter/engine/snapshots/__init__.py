"""Shadow snapshots of a worktree: capture, watch, list, diff
(protocol: snapshots#shadow-repository).

Not here: restoring one; that is ``engine.operation.restore``.
"""
