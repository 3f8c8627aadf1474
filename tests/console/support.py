"""Console test helpers: a gated repository, a held promotion, a logged-in HTTP client, and
the texts of a drift the agent and the person both made."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from promoter.client.wire import tls_context
from tests.support.daemon import Daemon
from tests.support.promotion import promote, submit

OLD = b"print('v1')\n"
NEW = b"print('approved')\n"
HOSTILE_PATH = 'src/<img src=x onerror="window.pwned=1">.py'
HOSTILE_CONTENT = b"<script>window.pwned=2</script>\n"
# a file the agent and the person both edit, far enough apart to merge
BASE = b"".join(b"line %d\n" % n for n in range(1, 13))
AGENT = BASE.replace(b"line 2\n", b"line 2 by the agent\n")
PERSON = BASE.replace(b"line 11\n", b"line 11 by the person\n")


def hidden(html: str, name: str = "csrf") -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found is not None, html
    return found.group(1)


@contextmanager
def login(daemon: Daemon, token: str | None = None) -> Iterator[httpx.Client]:
    """An httpx client holding a console session for ``token`` (the operator's)."""
    with httpx.Client(base_url=daemon.url, timeout=60, verify=tls_context(daemon.url)) as client:
        yield _logged_in(client, daemon, token)


def _logged_in(client: httpx.Client, daemon: Daemon, token: str | None) -> httpx.Client:
    form = client.get("/ui/login")
    assert form.status_code == 200, form.text
    answer = client.post(
        "/ui/login",
        data={"csrf": hidden(form.text), "token": token or daemon.operator_token},
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/ui/operations"
    return client


def held(
    daemon: Daemon,
    repo: Path,
    identity: str,
    changes: list[Any],
    grant_id: str = "grt_test1",
    **grant: Any,
) -> str:
    """Submit ``changes`` and ask for its promotion: the gate holds it; its operation id."""
    _, bundle, receipt = submit(daemon, repo, identity, changes, grant_id=grant_id, **grant)
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 202, answer.text
    assert answer.json()["status"] == "awaiting_approval"
    return str(answer.json()["operation_id"])


def unreconciled(daemon: Daemon, repo: Path, identity: str, changes: list[Any]) -> str:
    """Promote ``changes`` into a repository whose check fails: a ``needs_reconciliation`` id."""
    _, bundle, receipt = submit(daemon, repo, identity, changes)
    view = promote(daemon, bundle, receipt).json()
    assert view["status"] == "needs_reconciliation", view
    return str(view["operation_id"])
