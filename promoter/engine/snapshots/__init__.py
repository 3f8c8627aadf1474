"""Shadow snapshots of a worktree: capture, list, diff (protocol: snapshots#shadow-repository).

Not here: restoring one; that is ``engine.operation.restore``; the worktree watch a
capture starts from (``promoter.git.shadow_watch``).
"""
