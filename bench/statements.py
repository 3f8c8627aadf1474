"""Every SQL statement a 1-file flow in one request runs, grouped by the promotion's phase.

``python -m bench.statements`` starts a daemon in this process (SQLite ledger, a copy of
the ``bench.workload`` source), makes one untimed one-request flow (``POST
/v1/promotions:withEvidence`` with ``wait``), then watches the next one: every statement
the engine sends (SQLAlchemy's ``before_cursor_execute``) is put under the phase the
request was in when it was sent (``promoter.api.phases``' clock, switched on here, which the
request's worker threads and its attempt's thread share; a phase is named once closed, so
the plan's journal, closed by ``after_journal``, is counted with ``writes``), beside the
last fault point (``promoter.faults``) passed before it. A statement sent outside the
request's context (another thread of the daemon's) is under ``outside``. It prints the
phases in order with each statement's count, then the total; ``--flows N`` watches N flows
and prints the counts per flow.

``watch`` is the listener itself, for tests that pin the count
(``tests/api/test_hot_statements.py``).

Deliberately not here: timing (``bench.rows_one_request`` times the same flow), and any
other route.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from bench.variables import stop_on_unknown
from promoter import faults
from promoter.api import phases

OUTSIDE = "outside"
_SPACE = re.compile(r"\s+")


def _phase() -> str:
    """The phase the current context's promotion is in: the one after its last mark."""
    clock = phases._CLOCK.get()
    if clock is None:
        return OUTSIDE
    done = [phases.PHASES.index(name) for name in clock.wall]
    return phases.PHASES[max(done) + 1] if done else phases.PHASES[0]


def shape(statement: str) -> str:
    """One line of a statement: its words, its placeholders as sent."""
    return _SPACE.sub(" ", statement).strip()


@contextmanager
def watch(engine: Engine) -> Iterator[list[tuple[str, str, str]]]:
    """(phase, the last fault point passed, statement) of every statement ``engine``
    sends while this is entered (the point is the process's: one flow at a time)."""
    seen: list[tuple[str, str, str]] = []
    last = ["-"]

    def passed(name: str) -> None:
        last[0] = name

    def sending(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        seen.append((_phase(), last[0], shape(statement)))

    faults.OBSERVERS.append(passed)
    event.listen(engine, "before_cursor_execute", sending)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", sending)
        faults.OBSERVERS.remove(passed)


def _flows(work: Path, flows: int) -> list[tuple[str, str, str]]:
    from bench import documents as bd
    from bench import workload as wl
    from bench.harness import daemon
    from bench.rows_one_request import _change
    from promoter.client.sync import PromoterClient
    from promoter.domain.canonical import sha256_hex

    source = wl.make_source(work, wl.make_workload(115, 4096))
    ours = wl.copy_repo(source.path, work / "promoter")
    with ExitStack() as stack:
        url, services = stack.enter_context(daemon(work / "state", ours))
        identity = services.registry.by_name(bd.REPO_NAME).identity
        grant = bd.grant_document(
            identity, source.base_commit, source.base_tree, max_changes=10, grant_id="grt_one"
        )
        orch = stack.enter_context(
            PromoterClient(url, services.tokens["orchestrator"], timeout=600)
        )
        registered = orch.register_grant(grant)
        token = str(orch.mint_executor_token(bd.RUN_ID)["token"])
        orch.set_lease(bd.WORKFLOW, bd.STAGE, bd.lease_document())

        def one(n: int) -> None:
            data = b"one request %d\n" % n
            change: dict[str, Any] = _change(f"one-{n}.txt", data)
            bundle = bd.bundle_document(grant, registered["grant_sha256"], [change])
            blob = [(sha256_hex(data), len(data), data)]
            done = orch.promote_with_evidence(
                bundle, blob, bd.FENCE, executor_token=token, wait=True
            )
            if done["operation"].get("status") != "completed":
                raise AssertionError(f"the promotion ended {done['operation']}")

        one(0)  # untimed: connections, folders and statements made
        with watch(services.db.engine) as seen:
            for n in range(1, flows + 1):
                one(n)
        return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=1)
    parser.add_argument("--width", type=int, default=240, help="characters of each statement")
    args = parser.parse_args()
    os.environ[phases.ENV] = "1"  # the phases' clock: read before the app is made
    with tempfile.TemporaryDirectory(prefix="promoter-statements-") as work:
        seen = _flows(Path(work), args.flows)
    order = [*phases.PHASES, OUTSIDE]
    counts = Counter(seen)
    for phase in order:
        mine = [(key[1:], n) for key, n in counts.items() if key[0] == phase]
        if not mine:
            continue
        total = sum(n for _, n in mine)
        print(f"## {phase}: {total / args.flows:g}")
        for (point, statement), n in mine:
            print(f"{n / args.flows:5g}  [{point}] {statement[: args.width]}")
    print(f"## total: {len(seen) / args.flows:g} statements a flow")


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    main()
