"""The debug switch ``PROMOTER_PHASE_TIMING``: a promotion's time and processor time by phase.

Against a real daemon and repository, a 1-file flow in one request (``POST
/v1/promotions:withEvidence``) and one promotion of a bundle submitted before (``POST
/v1/promotions``) each log one ``promoter.phases`` line with the phases they pass, in
order, whose milliseconds add up to the line's total; without the switch no line is
written.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

from promoter.api import phases
from promoter.api.logs import REQUEST_ID
from tests.api.test_promotion_with_evidence import _executor_token, _grant, _post, body
from tests.support.daemon import running_daemon
from tests.support.flows import make_bundle, sha

ONE, TWO = b"one\n", b"two\n"
Changes = list[tuple[str, bytes | None, bytes | None]]


def _create(path: str, data: bytes) -> Changes:
    return [(path, None, data)]


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "promoter.phases"]


def _phases(record: logging.LogRecord) -> list[str]:
    fields: dict[str, Any] = record.fields  # type: ignore[attr-defined]
    return [
        name.removesuffix("_ms")
        for name in fields
        if re.fullmatch(r"[a-z_]+(?<!cpu)_ms", name) and name != "lock_waited_ms"
    ]


def test_each_promotion_logs_its_phases_in_order(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(phases.ENV, "1")
    caplog.set_level(logging.INFO, logger="promoter.phases")
    with running_daemon(tmp_path / "state", {"demo": repo}) as daemon:
        with daemon.orchestrator() as orch:
            identity = orch.get("/v1/repositories").json()["repositories"][0]["repository_identity"]
        grant = _grant(daemon, repo, identity)
        executor = _executor_token(daemon, "run_1")
        one = make_bundle(grant, _create("one.txt", ONE))
        answer = _post(daemon, body(one, ONE), executor)
        assert answer.status_code == 200, answer.text
        assert answer.json()["operation"]["status"] == "completed"
        two = make_bundle(grant, _create("two.txt", TWO))
        with daemon.client(executor) as ex:
            stored = ex.put(f"/v1/blobs/sha256/{sha(TWO)}", content=TWO)
            assert stored.status_code in (200, 201), stored.text
            submitted = ex.post("/v1/bundles", json=two)
            assert submitted.status_code == 201, submitted.text
        receipt = submitted.json()["verification_receipt"]["receipt_sha256"]
        with daemon.orchestrator() as orch:
            promoted = orch.post(
                "/v1/promotions",
                json={
                    "bundle_id": two["bundle_id"],
                    "fence": 7,
                    "wait": True,
                    "verification_receipt_sha256": receipt,
                },
            )
        assert promoted.json()["status"] == "completed", promoted.text
    lines = _lines(caplog)
    assert [r.fields["route"] for r in lines] == [  # type: ignore[attr-defined]
        "/v1/promotions:withEvidence",
        "/v1/promotions",
    ]
    everything = list(phases.PHASES)
    assert _phases(lines[0]) == everything
    assert _phases(lines[1]) == [p for p in everything if p != "verification"]
    for record in lines:
        fields: dict[str, float] = record.fields  # type: ignore[attr-defined]
        total = float(record.getMessage().removeprefix("promotion phases ").removesuffix(" ms"))
        parts = [fields[f"{p}_ms"] for p in _phases(record)]
        assert all(part >= 0 for part in parts)
        assert abs(sum(parts) - total) <= 0.1 + 0.01 * len(parts)
        assert all(fields[f"{p}_cpu_ms"] >= 0 for p in _phases(record))
        assert 0 <= fields["lock_waited_ms"] <= fields["lock_wait_ms"]
    assert REQUEST_ID.get() is None


def test_without_the_switch_no_line_is_written(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(phases.ENV, raising=False)
    caplog.set_level(logging.INFO, logger="promoter.phases")
    with running_daemon(tmp_path / "state", {"demo": repo}) as daemon:
        with daemon.orchestrator() as orch:
            identity = orch.get("/v1/repositories").json()["repositories"][0]["repository_identity"]
        grant = _grant(daemon, repo, identity)
        executor = _executor_token(daemon, "run_1")
        one = make_bundle(grant, _create("one.txt", ONE))
        answer = _post(daemon, body(one, ONE), executor)
        assert answer.json()["operation"]["status"] == "completed", answer.text
    assert _lines(caplog) == []
