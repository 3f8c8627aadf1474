"""``promoter grant create`` run again with the same flags, through the installed CLI.

Its window counts from now (to the second), so once a second has passed the second grant
differs from the first in its window alone: the daemon keeps the first (a grant is stored
once, never replaced: protocol: grants#grant-registration) and the command says so,
naming the registered grant, its window and what to do; a grant with other content under
the same id names the fields that differ. Another ``--ttl`` stands for the later second
(no waiting): it moves ``expires_at`` as the clock would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import Daemon

PROMOTER = Path(sys.executable).parent / "promoter"  # the installed entry point


def _create(daemon: Daemon, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [str(PROMOTER), "grant", "create", "--repo", "work", "--grant-id", "grt_again"]
    argv += ["--run", "run_a", "--workflow", "wf_a", "--stage", "s", "--url", daemon.url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env["PROMOTER_TOKEN"] = daemon.orchestrator_token
    return subprocess.run([*argv, *extra], capture_output=True, text=True, env=env, check=False)


def test_grant_create_again_with_the_same_flags_names_the_registered_grant(
    daemon: Daemon,
) -> None:
    first = _create(daemon, "--allow", "src/**:create")
    assert first.returncode == 0, first.stderr
    with daemon.orchestrator() as orch:
        stored = orch.get("/v1/grants/grt_again").json()
    again = _create(daemon, "--allow", "src/**:create", "--ttl", "3601")
    assert (again.returncode, again.stdout) == (75, "")
    assert again.stderr == (
        f"error [grant_conflict] grant grt_again is already registered (grant_sha256 "
        f"{stored['grant_sha256']}), the same but for its window (made at "
        f"{stored['not_before']}, expires {stored['expires_at']}; each grant create counts "
        "--ttl from now): a grant is never replaced; use the registered one as it is until "
        "it expires (e.g. bundle build --grant grt_again), or pass a new --grant-id for a "
        "new window\n"
    )
    other = _create(daemon, "--allow", "docs/**:create", "--ttl", "3601")
    assert (other.returncode, other.stdout) == (75, "")
    assert other.stderr == (
        f"error [grant_conflict] grant grt_again is already registered (grant_sha256 "
        f"{stored['grant_sha256']}) with other content (its write_allowlist differs; it "
        f"expires {stored['expires_at']}): a grant is never replaced; pass a new --grant-id\n"
    )
    with daemon.orchestrator() as orch:
        assert orch.get("/v1/grants/grt_again").json() == stored  # the first, untouched
