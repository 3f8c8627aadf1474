"""The repository lock as the engine takes it (protocol: promotion#step-lock)."""

from __future__ import annotations

from promoter.engine.ports import Locking
from promoter.engine.repos import Repository
from promoter.fs.lock import RepoLock


def repo_lock(services: Locking, repository: Repository) -> RepoLock:
    """The lock on ``<git common dir>/promoter.lock``; git's index.lock makes it wait."""
    return RepoLock(
        repository.layout.common_dir,
        timeout=services.settings.lock_timeout,
        index_lock_dirs=[repository.layout.git_dir],
        holder=services.owner.host,  # named in the lock file: a waiter's error names it
    )
