"""Verification of a bundle against its grant (SPEC §3.6, §5.4 steps 1–2).

Not here: anything that writes a worktree, and the promotion-time authority and
evidence checks on a stored bundle (``engine.intake.authority``).
"""
