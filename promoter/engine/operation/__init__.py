"""Operations that write a worktree: promote, recover, rollback, restore, and what they share.

Not here: verification of a bundle (``engine.verify``), receipts (``engine.receipts``).
"""
