"""Verification of a bundle against its grant (protocol: bundles#verification-receipt,
promotion#step-authority, promotion#step-evidence).

Not here: anything that writes a worktree.
"""
