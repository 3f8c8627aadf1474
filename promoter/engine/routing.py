"""Who guards what, and where it answers: the ledger's map of hosts for routing.

``owner_address`` is the base URL the ledger records for a host (``hosts.address``, which
its daemon publishes once it listens); ``guardian`` names the other active host
configured for a repository identity, for an answer that sends the caller there (421
``owned_by_other_host``); ``repositories`` lists every repository of the cluster with the
host that guards it and that host's address, this host's first.

Deliberately not here: the answer itself (``promoter.api.problems`` adds ``owner_url``
and ``Location`` to a 421), following it (``promoter.client.follow``), and the rules of
which requests only the owner can serve (the use cases that raise
``OwnedByOtherHost``).
"""

from __future__ import annotations

from typing import Any, TypedDict

from promoter.engine.ports import Journaling, Routing
from promoter.engine.repos import Repository
from promoter.errors import OwnedByOtherHost, RepositoryUnknown
from promoter.store import hosts, journal


def owner_address(services: Journaling, host_id: str) -> str | None:
    """The base URL host ``host_id`` published, or None (none published, no such host)."""
    if host_id == services.owner.host and services.host.address:
        return services.host.address
    with journal.unit_of_work(services.db) as session:
        found = hosts.get(session, host_id)
    return None if found is None else found.address


def guardian(services: Journaling, identity: str) -> hosts.Host | None:
    """The other active host configured for repository ``identity``, or None."""
    with journal.unit_of_work(services.db) as session:
        return hosts.guardian(session, identity, besides=services.owner.host)


def refuse_unless_here(services: Routing, identity: str, **context: Any) -> None:
    """Raise ``owned_by_other_host`` naming the guardian when ``identity`` is not
    configured here and another host guards it; return otherwise (the caller answers
    ``repository_unknown`` for one nobody guards)."""
    if any(r.identity == identity for r in services.registry.all()):
        return
    owner = guardian(services, identity)
    if owner is not None:
        raise OwnedByOtherHost(
            f"repository {identity} is guarded by host {owner.host_id}: send the request there",
            owner_host=owner.host_id,
            repository_identity=identity,
            **context,
        )


def local_repository(services: Routing, identity: str) -> Repository:
    """The repository ``identity`` configured here; one another host guards is
    ``owned_by_other_host`` naming it, one nobody guards ``repository_unknown``."""
    try:
        return services.registry.by_identity(identity)
    except RepositoryUnknown:
        refuse_unless_here(services, identity)
        raise


class Listed(TypedDict):
    """A repository of the cluster as ``repositories`` lists it."""

    identity: str
    name: str | None
    host_id: str
    address: str | None
    this_host: bool


def repositories(services: Routing) -> list[Listed]:
    """Every repository of the cluster: identity, name, the active host guarding it and
    that host's address; this host's first, then the others' by host and name."""
    here = services.owner.host
    listed: list[Listed] = [
        {
            "identity": r.identity,
            "name": r.name,
            "host_id": here,
            "address": services.host.address,
            "this_host": True,
        }
        for r in services.registry.all()
    ]
    mine = {entry["identity"] for entry in listed}
    with journal.unit_of_work(services.db) as session:
        others = [h for h in hosts.all_hosts(session) if h.host_id != here]
    for host in others:
        if host.status != hosts.ACTIVE:
            continue
        names = host.repository_names or {}
        for identity in host.repositories:
            if identity in mine:
                continue
            listed.append(
                {
                    "identity": identity,
                    "name": names.get(identity),
                    "host_id": host.host_id,
                    "address": host.address,
                    "this_host": False,
                }
            )
    return listed
