"""Replay a history with certificate symlinks, as psf/requests has, commit by commit.

psf/requests keeps its test certificates under ``tests/certs/<kind>/`` with ``ca``
entries that are symbolic links into a shared directory; a v1 replay stopped at the
commit that added them. This history is built here (no network): it adds such links,
retargets one, turns a file into a link and back, adds a link to a file in another
directory and deletes one. Each commit is built by the executor with a grant of
``symlinks: inside``, verified and promoted into the user's worktree; after every
commit ``git ls-files -s`` (modes and blob ids, so link texts) and every link's text
equal the history's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from promoter.domain.models import GrantV1
from promoter.executor import build_bundle, upload_and_submit
from tests.gitutil import commit_all, git
from tests.support.daemon import running_daemon
from tests.support.flows import make_grant
from tests.support.promotion import leased_clients
from tests.support.repos import clone

CA = b"-----BEGIN CERTIFICATE-----\nMIIB...ca\n-----END CERTIFICATE-----\n"


def _link(root: Path, path: str, target: str) -> None:
    where = root / path
    where.parent.mkdir(parents=True, exist_ok=True)
    if where.is_symlink() or where.is_file():
        where.unlink()
    os.symlink(target, where)


def _file(root: Path, path: str, data: bytes) -> None:
    where = root / path
    where.parent.mkdir(parents=True, exist_ok=True)
    if where.is_symlink():
        where.unlink()
    where.write_bytes(data)


def _commits() -> list[Callable[[Path], None]]:
    """The steps after the first commit, each a change a requests contributor made."""
    return [
        lambda r: (  # the commit that adds the tests/certs/*/ca links
            _link(r, "tests/certs/mtls/ca", "../expired/ca"),
            _link(r, "tests/certs/valid/ca", "../expired/ca"),
        ),
        lambda r: (  # a link retargeted, and a link to a file one level up
            _link(r, "tests/certs/valid/ca", "../mtls/ca"),
            _link(r, "tests/certs/valid/ca.crt", "../expired/ca/ca.crt"),
        ),
        lambda r: _link(r, "tests/certs/README.md", "expired/README.md"),  # a file becomes a link
        lambda r: _file(r, "tests/certs/README.md", b"# test certificates\n"),  # and back
        lambda r: (r / "tests/certs/valid/ca.crt").unlink(),  # a link deleted
    ]


def _links(root: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in dirs + files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                found[os.path.relpath(path, root)] = os.readlink(path)
    return found


def test_requests_certificate_symlinks_replay_byte_exact(tmp_path: Path) -> None:
    history = tmp_path / "history"
    history.mkdir()
    git(history, "init", "-q", "-b", "main")
    _file(history, "tests/certs/README.md", b"# certificates\n")
    _file(history, "tests/certs/expired/ca/ca.crt", CA)
    _file(history, "tests/certs/expired/README.md", b"expired\n")
    commits = [commit_all(history, "commit 0")]
    listings = [git(history, "ls-files", "-s")]
    for number, change in enumerate(_commits(), start=1):
        change(history)
        commits.append(commit_all(history, f"commit {number}"))
        listings.append(git(history, "ls-files", "-s"))
    assert "120000" in listings[1]

    source = clone(history, tmp_path / "source")
    git(source, "checkout", "-q", "-B", "main", commits[0])
    executor = clone(history, tmp_path / "executor")

    with running_daemon(tmp_path / "state", {"source": source}) as daemon:
        identity = daemon.services.registry.by_name("source").identity
        orchestrator, client = leased_clients(daemon, "run_certs", fence=1)
        for number in range(1, len(commits)):
            git(executor, "checkout", "-q", "--detach", commits[number])
            grant = make_grant(
                source,
                identity,
                grant_id=f"grt_certs_{number}",
                run_id="run_certs",
                fence=1,
                symlinks="inside",
            )
            orchestrator.register_grant(grant)
            with build_bundle(executor, GrantV1.model_validate(grant)) as built:
                receipt = upload_and_submit(client, built)
            assert receipt.status == "passed", receipt
            view = orchestrator.promote(built.bundle_id, receipt.receipt_sha256, 1, wait=True)
            assert view["status"] == "completed", (number, view)
            receipt_doc = json.loads(orchestrator.get_receipt(view["operation_id"]))
            link_targets = [t for t in receipt_doc["targets"] if t["mode"] == "120000"]
            assert all(t["exists"] for t in link_targets)

            assert _links(source) == _links(executor), f"commit {number}"
            commit_all(source, f"the user commits replay {number}")
            assert git(source, "ls-files", "-s") == listings[number], f"commit {number}"
            assert git(source, "rev-parse", "HEAD^{tree}") == git(
                history, "rev-parse", f"{commits[number]}^{{tree}}"
            )
        orchestrator.close()
        client.close()
