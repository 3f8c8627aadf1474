"""promoter: the trusted gate between low-trust executors and a real git worktree."""

__version__ = "0.1.0"
