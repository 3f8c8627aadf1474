"""The configured repositories: name -> worktree layout and identity
(protocol: promotion#repository-identity).

Repositories are configured by the operator only, never named by executors. Each is
checked at start: a path that is not a git worktree, a bare repository or a SHA-256
repository is refused with a clear message.
"""

from __future__ import annotations

from dataclasses import dataclass

from promoter.config import RepositoryConfig, Settings
from promoter.errors import ConfigError, RepositoryInvalid, RepositoryUnknown
from promoter.git.readback import RepoLayout, discover, repository_identity


@dataclass(frozen=True)
class Repository:
    name: str
    config: RepositoryConfig
    layout: RepoLayout
    identity: str

    @property
    def worktree(self) -> str:
        return self.layout.worktree


class Registry:
    def __init__(self, repositories: list[Repository]) -> None:
        self._by_name = {repo.name: repo for repo in repositories}
        self._by_identity = {repo.identity: repo for repo in repositories}

    @classmethod
    def from_settings(cls, settings: Settings) -> Registry:
        repos: list[Repository] = []
        for name, config in sorted(settings.repositories.items()):
            try:
                layout = discover(config.path)
            except RepositoryInvalid as exc:
                raise ConfigError(f"repository {name!r} at {config.path}: {exc.detail}") from exc
            repos.append(Repository(name, config, layout, repository_identity(layout)))
        seen: dict[str, str] = {}
        for repo in repos:
            if repo.identity in seen:
                raise ConfigError(
                    f"repositories {seen[repo.identity]!r} and {repo.name!r} are the same"
                )
            seen[repo.identity] = repo.name
        return cls(repos)

    def all(self) -> list[Repository]:
        return list(self._by_name.values())

    def by_name(self, name: str) -> Repository:
        try:
            return self._by_name[name]
        except KeyError:
            raise RepositoryUnknown(
                f"no repository named {name!r} is configured", name=name
            ) from None

    def by_identity(self, identity: str) -> Repository:
        try:
            return self._by_identity[identity]
        except KeyError:
            raise RepositoryUnknown(
                f"no configured repository has identity {identity}", repository_identity=identity
            ) from None

    def lookup(self, key: str) -> Repository:
        """By identity (``repo_…``) or by name."""
        return self._by_identity.get(key) or self.by_name(key)
