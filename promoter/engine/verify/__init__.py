"""Verification of a bundle against its grant (protocol: bundles#verification-receipt,
promotion#step-authority, promotion#step-evidence).

Not here: anything that writes a worktree, and the promotion-time authority and
evidence checks on a stored bundle (``engine.intake.authority``).
"""
