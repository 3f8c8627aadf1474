"""A promoter daemon in its own process, for crash tests (SIGKILL, fault points).

The daemon is started with ``--port 0``; the test reads its stderr until the
``promoter: ready on URL`` line (a blocking read, no polling), then drains the rest in a
thread so the pipe never fills.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from promoter.client.wire import pool_limits, tls_context
from promoter.domain.blob_frames import (
    BATCH_BLOB_MAX,
    BATCH_MAX_BLOBS,
    BATCH_MAX_BYTES,
    frame_bytes,
    frame_header,
)
from tests.support import databases, forkserver
from tests.support.flows import make_bundle, make_grant, make_lease, sha


class DaemonProcess:
    def __init__(
        self,
        state_dir: Path,
        repositories: dict[str, Path],
        *,
        faults: str = "",
        extra_env: dict[str, str] | None = None,
        open_files: tuple[int, int] | None = None,
        workers: int | None = 1,
        container: bool = False,
    ) -> None:
        """``open_files``: the (soft, hard) ``RLIMIT_NOFILE`` the daemon starts with;
        ``workers``: its serving processes (None: the default, one per usable core);
        ``container``: it runs as PID 1 of a pid namespace of its own, with its own
        ``/proc``, as in a container (a SIGKILL of ``proc`` kills it and its workers)."""
        self.state_dir = state_dir
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("PROMOTER_") or k == "PROMOTER_DATABASE_URL"  # the test's database
        }
        if faults:
            env["PROMOTER_FAULTS"] = faults
        # as for an in-process test daemon: no start-up rehearsal unless a test asks for it
        env["PROMOTER_REHEARSE_AT_START"] = "false"
        # one serving process: the process a test kills or pauses is the one that writes
        # (a test of ``serve --workers`` asks for more, or for the default)
        if workers is not None:
            env["PROMOTER_WORKERS"] = str(workers)
        env.update(extra_env or {})
        databases.ensure(env.get("PROMOTER_DATABASE_URL"))  # made before the child opens it
        argv = [
            sys.executable,
            "-m",
            "promoter.cli.main",
            "serve",
            "--state-dir",
            str(state_dir),
            "--port",
            "0",
        ]
        for name, path in repositories.items():
            argv += ["--repo", f"{name}={path}"]

        def limits() -> None:
            if open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, open_files)

        self.proc: subprocess.Popen[bytes] | forkserver.Forked
        if container:  # the kernel kills the namespace's processes once its PID 1 is killed
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *argv]
        if forkserver.enabled() and not container:
            self.proc = forkserver.spawn(argv, env, nofile=open_files)
        else:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                preexec_fn=limits if open_files is not None else None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        self.log: list[str] = []
        self._logged = threading.Condition()  # told of each line the drain appends
        self.url = self._await_ready()
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()

    def _await_ready(self) -> str:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.log.append(line)
            if line.startswith("promoter: ready on "):
                return line.removeprefix("promoter: ready on ")
        raise RuntimeError("daemon exited before it was ready:\n" + "\n".join(self.log))

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            with self._logged:
                self.log.append(raw.decode(errors="replace").rstrip())
                self._logged.notify_all()

    def logged(self, text: str) -> str:
        """The first line of the log holding ``text``, waited for (bounded) as the drain
        reads it: a line the daemon wrote before an answer may still be in the pipe when
        the answer is read."""

        def found() -> str | None:
            return next((line for line in self.log if text in line), None)

        with self._logged:
            line = self._logged.wait_for(found, 60)
        assert line is not None, f"the daemon never logged {text!r}: {self.log[-20:]}"
        return line

    def _drained(self) -> None:
        """Once the daemon has ended: the drain has read its stderr to the end, so the log
        is whole (bounded: a child holding the pipe leaves it to the bound)."""
        self._drain.join(60)

    def token(self, role: str) -> str:
        return (self.state_dir / "credentials" / f"{role}.token").read_text().strip()

    def client(self, role: str = "orchestrator") -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            timeout=120,
            headers={"Authorization": f"Bearer {self.token(role)}"},
            verify=tls_context(self.url),
            limits=pool_limits(),  # idle connections reused well inside the keep-alive
        )

    def executor(self, run_id: str) -> httpx.Client:
        with self.client() as orch:
            token = orch.post(
                "/v1/executor-tokens", json={"executor_run_id": run_id, "ttl_seconds": 3600}
            ).json()["token"]
        return httpx.Client(
            base_url=self.url,
            timeout=120,
            headers={"Authorization": f"Bearer {token}"},
            verify=tls_context(self.url),
            limits=pool_limits(),  # idle connections reused well inside the keep-alive
        )

    def first_operation(self) -> str:
        """The id of the first operation ``GET /v1/operations`` lists to the operator."""
        with self.client("operator") as operator:
            listed = operator.get("/v1/operations").json()["operations"]
        return str(listed[0]["operation_id"])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._drained()

    def wait_exit(self, timeout: float = 120) -> int:
        status = self.proc.wait(timeout)
        self._drained()
        return status

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(60)
        self._drained()
        return status


def crash_in_promotion(daemon: DaemonProcess, request: dict[str, Any]) -> None:
    """``request`` posted to ``daemon``, which a fault point kills while it promotes: the
    daemon must die of ``SIGKILL`` (exit status 137)."""
    with daemon.client() as orch, contextlib.suppress(httpx.HTTPError):
        orch.post("/v1/promotions", json=request)  # the daemon dies mid-request
    assert daemon.wait_exit() == 137


def killed_promotion(
    state_dir: Path, repo: Path, changes: list[tuple[str, bytes | None, bytes | None]], faults: str
) -> dict[str, Any]:
    """A daemon on ``state_dir`` serving ``repo`` as ``work`` with ``faults``, asked for the
    promotion of ``changes``, which kills it (``crash_in_promotion``); the request."""
    first = DaemonProcess(state_dir, {"work": repo}, faults=faults)
    try:
        request = prepare_promotion(first, repo, changes)
        crash_in_promotion(first, request)
    finally:
        first.kill()
    return request


def upload_blobs(executor: httpx.Client, blobs: Iterable[bytes]) -> None:
    """Upload ``blobs``: small ones in framed ``POST /v1/blobs:batchUpdate`` requests (a
    thousand PUTs of small files took most of a crash test's time), big ones by ``PUT``;
    each must be stored."""
    batch: list[bytes] = []
    size = 0

    def send() -> None:
        body = b"".join(frame_header(sha(data), len(data)) + data for data in batch)
        answer = executor.post(
            "/v1/blobs:batchUpdate",
            content=body,
            headers={"Content-Type": "application/octet-stream"},
        )
        assert answer.status_code == 200, answer.text
        codes = [item.get("code") for item in answer.json()["responses"]]
        assert codes == [None] * len(batch), codes

    for data in sorted(blobs):
        if len(data) > BATCH_BLOB_MAX:
            answer = executor.put(f"/v1/blobs/sha256/{sha(data)}", content=data)
            assert answer.status_code in (200, 201), answer.text
            continue
        added = frame_bytes(sha(data), len(data))
        if batch and (len(batch) >= BATCH_MAX_BLOBS or size + added > BATCH_MAX_BYTES):
            send()
            batch, size = [], 0
        batch.append(data)
        size += added
    if batch:
        send()


def granted(orch: httpx.Client, repo: Path, *, lease_as_grant: bool = False, **grant: Any) -> Any:
    """A grant for ``repo`` (the daemon's first repository) registered with ``orch``, and
    the lease of its run (expiring in an hour, or with the grant); the grant."""
    identity = orch.get("/v1/repositories").json()["repositories"][0]["repository_identity"]
    document = make_grant(repo, identity, **grant)
    assert orch.post("/v1/grants", json=document).status_code == 201
    lease = make_lease(expires_at=document["expires_at"] if lease_as_grant else None)
    assert orch.put("/v1/leases/wf_1/implement", json=lease).status_code == 200
    return document


def promotion_request(bundle: dict[str, Any], verified: httpx.Response) -> dict[str, Any]:
    """The body of ``POST /v1/promotions`` for ``bundle``, as ``verified`` (its answer to
    ``POST /v1/bundles``) names its verification receipt."""
    return {
        "bundle_id": bundle["bundle_id"],
        "fence": 7,
        "wait": True,
        "verification_receipt_sha256": verified.json()["verification_receipt"]["receipt_sha256"],
    }


def prepare_promotion(
    daemon: DaemonProcess,
    repo: Path,
    changes: list[tuple[str, bytes | None, bytes | None]],
    *,
    batched: bool = True,
) -> dict[str, Any]:
    """Grant, lease, blobs and a verified bundle; returns the promotion request body.
    ``batched=False`` uploads one ``PUT`` a blob (a batch syncs its blobs as one group,
    which a test counting ``after_group_sync`` hits must leave out)."""
    with daemon.client() as orch:
        grant = granted(orch, repo)
    bundle = make_bundle(grant, changes)
    with daemon.executor("run_1") as ex:
        blobs = {d for _, old, new in changes for d in (old, new) if d is not None}
        if batched:
            upload_blobs(ex, blobs)
        else:
            for data in blobs:
                answer = ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data)
                assert answer.status_code in (200, 201), answer.text
        answer = ex.post("/v1/bundles", json=bundle)
        assert answer.status_code == 201, answer.text
    return promotion_request(bundle, answer)
