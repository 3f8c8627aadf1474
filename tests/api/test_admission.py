"""A flood of costly reads by one role cannot starve the operator (TESTS E3,
protocol: api#work-bounded-per-caller).

An executor token may read its own bundle's diff. Two hundred of those at once used to
take every shared worker thread (the diff's own slots made them wait inside the threads),
and the operator's ``GET /v1/operations`` and ``/readyz`` waited behind them for as long
as the flood went on. Here the diffs that are admitted are held at the fault point
``bundle_diff_file`` (inside the diff computation) until the test releases them, so the
flood provably occupies its role's places while the operator asks; the requests past the
places and the queue are answered ``429 too_many_requests`` with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from promoter import faults
from promoter.api.admission import Gate, is_costly
from promoter.config import load_settings
from tests.support.daemon import Daemon, running_daemon
from tests.support.pause import Pause
from tests.support.promotion import promote, submit

FLOOD = 200
RUNNING = 2  # the executor role's places (and its credential's)
QUEUE = 4  # requests that may wait for one
RETRY_AFTER = 3
BOUND = 60.0  # for a broken test only: how long the test waits for the flood's answers
CHANGE = [("src/app.py", b"print('v1')\n", b"print('v2')\n")]


@pytest.fixture
def limited(tmp_path: Path, repo: Path) -> Iterator[Daemon]:
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        admission_role_limits={"executor": RUNNING},
        admission_credential_limits={"executor": RUNNING},
        admission_queue=QUEUE,
        admission_wait_seconds=120.0,  # the queued ones wait for the release, not the clock
        admission_retry_after_seconds=RETRY_AFTER,
    ) as daemon:
        yield daemon


class _Flood:
    """``FLOOD`` concurrent GETs of one URL from another thread; answers as they come."""

    def __init__(self, daemon: Daemon, path: str, token: str) -> None:
        self.url = daemon.url + path
        self.token = token
        self.answers: list[tuple[int, dict[str, str], bytes]] = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=FLOOD + 10, max_keepalive_connections=0)
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(timeout=300, limits=limits, headers=headers) as client:

            async def one() -> None:
                answer = await client.get(self.url)
                with self.changed:
                    self.answers.append((answer.status_code, dict(answer.headers), answer.content))
                    self.changed.notify_all()

            await asyncio.gather(*(one() for _ in range(FLOOD)))

    def wait_for(self, status: int, count: int) -> None:
        def enough() -> bool:
            return sum(1 for s, _, _ in self.answers if s == status) >= count

        with self.changed:
            if not self.changed.wait_for(enough, BOUND):
                seen = sorted({s for s, _, _ in self.answers})
                raise AssertionError(
                    f"{count} answers {status} never came: {len(self.answers)} answers, {seen}"
                )


def test_two_hundred_executor_diffs_leave_the_operator_its_routes_and_readyz(
    limited: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = limited.services.registry.by_name("work").identity
    grant, bundle, _ = submit(limited, repo, identity, CHANGE)
    with limited.executor(grant["executor_run_id"]) as executor:
        token = executor.headers["Authorization"].removeprefix("Bearer ")
        expected = executor.get(f"/v1/bundles/{bundle['bundle_id']}/diff")
    assert expected.status_code == 200, expected.text

    pause = Pause(tmp_path, "bundle_diff_file")
    monkeypatch.setenv(faults.ENV, f"bundle_diff_file=pause:{pause.release_file}@1+")
    faults.reset()
    flood = _Flood(limited, f"/v1/bundles/{bundle['bundle_id']}/diff", token)
    flood.thread.start()
    try:
        pause.reached()  # an admitted diff is held inside its computation
        flood.wait_for(429, FLOOD - RUNNING - QUEUE)  # every place and the queue are taken
        assert len(flood.answers) == FLOOD - RUNNING - QUEUE  # none of the held ones ended

        with httpx.Client(
            base_url=limited.url,
            headers={"Authorization": f"Bearer {limited.operator_token}"},
            timeout=30,  # generous: the flood holds the executor's places all along
        ) as operator:
            listed = operator.get("/v1/operations")
            ready = operator.get("/readyz")
        assert listed.status_code == 200, listed.text
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "ready"
        assert len(flood.answers) == FLOOD - RUNNING - QUEUE  # still held while they answered
    finally:
        pause.release()
        flood.thread.join(BOUND)
    assert not flood.thread.is_alive()

    statuses = sorted(s for s, _, _ in flood.answers)
    assert statuses == [200] * (RUNNING + QUEUE) + [429] * (FLOOD - RUNNING - QUEUE)
    for status, headers, body in flood.answers:
        if status == 200:
            assert json.loads(body) == expected.json()
            continue
        problem = json.loads(body)
        assert headers["retry-after"] == str(RETRY_AFTER)
        assert headers["content-type"] == "application/problem+json"
        assert (problem["code"], problem["status"], problem["retry_after"]) == (
            "too_many_requests",
            429,
            RETRY_AFTER,
        )
        assert problem["instance"] == f"/v1/bundles/{bundle['bundle_id']}/diff"
    with limited.client() as anyone:
        metrics = anyone.get("/metrics").text
    refused = FLOOD - RUNNING - QUEUE
    counted = [line for line in metrics.splitlines() if 'status="429"' in line]
    assert counted == [
        'promoter_http_requests_total{method="GET",route="/v1/bundles/{bundle_id}/diff",'
        f'status="429"}} {float(refused)}'
    ], counted


def test_another_role_keeps_its_places_while_the_executor_role_is_full(
    limited: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestrator's costly reads are admitted (not queued) while the executor's
    places are all held: roles never share a count."""
    identity = limited.services.registry.by_name("work").identity
    grant, bundle, _ = submit(limited, repo, identity, CHANGE)
    pause = Pause(tmp_path, "bundle_diff_file")
    monkeypatch.setenv(faults.ENV, f"bundle_diff_file=pause:{pause.release_file}@1+")
    faults.reset()
    with limited.executor(grant["executor_run_id"]) as executor:
        token = executor.headers["Authorization"].removeprefix("Bearer ")
    flood = _Flood(limited, f"/v1/bundles/{bundle['bundle_id']}/diff", token)
    flood.thread.start()
    try:
        pause.reached()
        flood.wait_for(429, FLOOD - RUNNING - QUEUE)
        with limited.orchestrator() as orchestrator:
            document = orchestrator.get(f"/v1/bundles/{bundle['bundle_id']}")
            feed = orchestrator.get("/v1/events")
        assert document.status_code == 200, document.text
        assert document.json()["bundle_id"] == bundle["bundle_id"]
        assert feed.status_code == 200, feed.text
    finally:
        pause.release()
        flood.thread.join(BOUND)


def test_an_operations_current_targets_are_a_costly_read_admitted_per_role(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GET /v1/operations/{id}?current=true`` reads and hashes every target in the
    worktree: past the orchestrator's one place (no queue) a second one is ``429`` at once,
    while the operation without ``current`` (a journal read) is answered as before."""
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        admission_role_limits={"orchestrator": 1},
        admission_credential_limits={"orchestrator": 1},
        admission_queue=0,
        admission_retry_after_seconds=RETRY_AFTER,
    ) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
        operation_id = promote(daemon, bundle, receipt).json()["operation_id"]
        path = f"/v1/operations/{operation_id}?current=true"
        pause = Pause(tmp_path, "operation_current_targets")
        monkeypatch.setenv(faults.ENV, pause.spec)
        faults.reset()
        held: list[httpx.Response] = []

        def read() -> None:
            with daemon.orchestrator() as orchestrator:
                held.append(orchestrator.get(path))

        reader = threading.Thread(target=read)
        reader.start()
        try:
            pause.reached()  # the first read holds the role's one place
            with daemon.orchestrator() as orchestrator:
                second = orchestrator.get(path)
                plain = orchestrator.get(f"/v1/operations/{operation_id}")
        finally:
            pause.release()
            reader.join(BOUND)
    assert (second.status_code, second.json()["code"]) == (429, "too_many_requests"), second.text
    assert second.headers["retry-after"] == str(RETRY_AFTER)
    assert plain.status_code == 200, plain.text
    assert "current_targets" not in plain.json()
    [first] = held
    assert first.status_code == 200, first.text
    assert [(t["path"], t["matches"]) for t in first.json()["current_targets"]] == [
        ("src/app.py", "new")
    ]


def test_a_preflight_is_a_costly_read_admitted_per_role(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preflight re-reads every blob of the bundle and the worktree: a read, though a
    POST. Past the orchestrator's one place (no queue) a second one is ``429`` at once,
    and nothing of it ran."""
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        admission_role_limits={"orchestrator": 1},
        admission_credential_limits={"orchestrator": 1},
        admission_queue=0,
        admission_retry_after_seconds=RETRY_AFTER,
    ) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, _ = submit(daemon, repo, identity, CHANGE)
        path = f"/v1/bundles/{bundle['bundle_id']}/preflight"
        pause = Pause(tmp_path, "preflight_read_back")
        monkeypatch.setenv(faults.ENV, pause.spec)
        faults.reset()
        held: list[httpx.Response] = []

        def check() -> None:
            with daemon.orchestrator() as orchestrator:
                held.append(orchestrator.post(path, json={"fence": 7}))

        checker = threading.Thread(target=check)
        checker.start()
        try:
            pause.reached()  # the first preflight holds the role's one place
            with daemon.orchestrator() as orchestrator:
                second = orchestrator.post(path, json={"fence": 7})
        finally:
            pause.release()
            checker.join(BOUND)
        hits = faults.hits("preflight_read_back")
    assert (second.status_code, second.json()["code"]) == (429, "too_many_requests"), second.text
    assert second.headers["retry-after"] == str(RETRY_AFTER)
    assert hits == 1  # the refused one read nothing
    [first] = held
    assert (first.status_code, first.json()["status"]) == (200, "passed"), first.text


def test_admission_defaults_bound_every_role() -> None:
    settings = load_settings(None, admission_role_limits={"executor": 3})
    gate = Gate(settings)
    assert gate.role_limits == {"executor": 3, "orchestrator": 32, "operator": 16}
    assert gate.credential_limits == {"executor": 4, "orchestrator": 32, "operator": 8}


@pytest.mark.parametrize(
    ("method", "path", "costly"),
    [
        ("GET", "/v1/bundles/bnd_x/diff", True),
        ("GET", "/v1/bundles/bnd_x/diff/files", True),
        ("HEAD", "/v1/bundles/bnd_x", True),
        ("GET", "/v1/events", True),
        ("GET", "/v1/trace", True),
        ("GET", "/v1/blobs/sha256/" + "0" * 64, True),
        ("GET", "/v1/operations/op_x/receipt", True),
        ("GET", "/v1/operations", False),
        ("GET", "/v1/operations/op_x", False),
        ("GET", "/v1/operations/op_x?current=false", False),
        ("GET", "/v1/operations/op_x?current=true", True),
        ("GET", "/v1/operations/op_x?wait=5&current=1", True),
        ("POST", "/v1/bundles", False),
        ("POST", "/v1/bundles/bnd_x/preflight", True),
        ("GET", "/v1/bundles/bnd_x/preflight", False),
        ("GET", "/readyz", False),
    ],
)
def test_which_requests_are_costly_reads(method: str, path: str, costly: bool) -> None:
    path, _, query = path.partition("?")
    assert is_costly(method, path, query.encode()) is costly


def test_a_costly_read_with_a_bad_token_is_refused_as_before_and_takes_no_place(
    limited: Daemon,
) -> None:
    for token in ("pex_" + "x" * 43, "pop_" + "y" * 43, None):
        with limited.client(token) as caller:
            answer = caller.get("/v1/bundles/bnd_" + "0" * 32 + "/diff")
        assert answer.status_code == 401, answer.text
        assert answer.json()["code"] == "unauthenticated"
        assert answer.headers["www-authenticate"] == "Bearer"
