"""Two daemons, two hosts, one ledger: one key set, and envelopes signed once by their maker.

Host A verifies a bundle, promotes it and rolls it back; each receipt's DSSE envelope is
made by A when A makes the receipt. Host B serves the same bytes, never signs them itself,
and lists A's keys (host id, status, window) in its ``/v1/keys`` and ``/v1/keys.pem``; the
CLI verifies what B serves with the key set fetched from B (``--keys-from``). A receipt
whose envelope is not stored (made before envelopes were) is signed only by its maker. A
rotation on A keeps A's older envelopes verifying with the ledger's key set. Runs on the
suite's PostgreSQL database when there is one, else both daemons share one SQLite file.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.support.flows import init_repo, sha
from tests.support.pause import Pause
from tests.support.process import DaemonProcess, prepare_promotion

# several daemons a test, each a process: seconds alone
pytestmark = pytest.mark.slow

V1, V2 = b"one\n", b"two\n"


class Hosts:
    def __init__(self, tmp_path: Path, faults: str = "") -> None:
        self.url = os.environ.get("PROMOTER_DATABASE_URL") or f"sqlite:///{tmp_path / 'ledger.db'}"
        self.tmp = tmp_path
        self.repo_a = init_repo(tmp_path / "work-a", {"src/app.txt": V1})
        repo_b = init_repo(tmp_path / "work-b", {"src/app.txt": V1})
        self.daemons: list[DaemonProcess] = []
        try:
            for name, repo in (("a", self.repo_a), ("b", repo_b)):
                self.daemons.append(
                    DaemonProcess(
                        tmp_path / f"state-{name}",
                        {name: repo},
                        extra_env=self.env(name),
                        faults=faults if name == "a" else "",
                    )
                )
        except BaseException:
            for daemon in self.daemons:  # A started, B did not
                daemon.kill()
            raise
        self.a, self.b = self.daemons

    def env(self, name: str) -> dict[str, str]:
        return {"PROMOTER_HOST_ID": f"host-{name}", "PROMOTER_DATABASE_URL": self.url}

    def cli(self, *args: str, host: str = "a") -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
        env.update({**self.env(host), "COLUMNS": "400", "NO_COLOR": "1"})
        return subprocess.run(
            [sys.executable, "-m", "promoter.cli.main", *args],
            cwd=self.tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def promote_on_a(self) -> str:
        request = prepare_promotion(self.a, self.repo_a, [("src/app.txt", V1, V2)])
        with self.a.client() as orch:
            view = orch.post("/v1/promotions", json=request).json()
        assert view["status"] == "completed", view
        return str(view["operation_id"])

    def rollback_on_a(self, operation_id: str) -> None:
        with self.a.client("operator") as operator:
            rolled = operator.post(f"/v1/operations/{operation_id}/rollback")
        assert rolled.status_code == 200, rolled.text

    def forget_envelopes(self) -> None:
        """The ledger as it was before envelopes were stored: receipts without one."""
        engine = sa.create_engine(self.url)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text("DELETE FROM receipt_envelopes"))
        finally:
            engine.dispose()


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    with start(tmp_path) as made:
        yield made


def fetched(daemon: DaemonProcess, path: str) -> httpx.Response:
    with daemon.client() as orch:
        return orch.get(path)


def envelope(daemon: DaemonProcess, path: str) -> bytes:
    answer = fetched(daemon, path)
    assert answer.status_code == 200, answer.text
    return answer.content


def key_set(daemon: DaemonProcess) -> dict[str, Any]:
    answer = httpx.get(daemon.url + "/v1/keys", timeout=60)
    assert answer.status_code == 200, answer.text
    served: dict[str, Any] = answer.json()
    return served


def signer_of(data: bytes) -> str:
    [signature] = json.loads(data)["signatures"]
    return str(signature["keyid"])


def predicate_of(data: bytes) -> dict[str, Any]:
    statement: dict[str, Any] = json.loads(base64.b64decode(json.loads(data)["payload"]))
    predicate: dict[str, Any] = statement["predicate"]
    return predicate


@contextlib.contextmanager
def start(tmp_path: Path, faults: str = "") -> Iterator[Hosts]:
    made: Hosts | None = None
    try:
        made = Hosts(tmp_path, faults)
        yield made
    finally:
        for daemon in made.daemons if made is not None else []:
            daemon.kill()


def test_receipt_made_by_a_fetched_from_b_is_a_s_bytes_and_verifies_with_b_s_key_set(
    hosts: Hosts,
) -> None:
    op_id = hosts.promote_on_a()
    a_keys, b_keys = key_set(hosts.a), key_set(hosts.b)
    a_key, b_key = a_keys["active_keyid"], b_keys["active_keyid"]
    assert (a_keys["host_id"], b_keys["host_id"], a_key != b_key) == ("host-a", "host-b", True)
    listed = {(k["keyid"], k["host_id"], k["status"], k["not_after"]) for k in b_keys["keys"]}
    assert listed == {(a_key, "host-a", "active", None), (b_key, "host-b", "active", None)}
    assert b_keys["keys"][0]["keyid"] == b_key  # the answering host's active key first
    pem = httpx.get(hosts.b.url + "/v1/keys.pem", timeout=60).text
    assert f"keyid: {a_key}\nhost_id: host-a\nstatus: active\n-----BEGIN PUBLIC KEY-----" in pem
    assert pem.count("-----BEGIN PUBLIC KEY-----") == 2

    promotion = f"/v1/operations/{op_id}/receipt.dsse"
    bundle_id = predicate_of(envelope(hosts.a, promotion))["bundle_id"]
    verification = f"/v1/bundles/{bundle_id}/verification.dsse"
    rollback = f"/v1/operations/{op_id}/rollback-receipt.dsse"
    for path in (promotion, verification, rollback):
        if path == rollback:
            hosts.rollback_on_a(op_id)  # (the promotion receipt is served until then)
        from_a, from_b = envelope(hosts.a, path), envelope(hosts.b, path)
        assert from_b == from_a, path  # byte for byte: stored once, by A
        assert signer_of(from_b) == a_key != b_key  # B never signs A's receipt
        (hosts.tmp / "from-b.dsse").write_bytes(from_b)
        done = hosts.cli("receipt", "verify", "from-b.dsse", "--keys-from", hosts.b.url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"signature: verified with key {a_key} of host host-a" in done.stdout

    (hosts.tmp / "b-only.pem").write_text(b_keys["keys"][0]["public_key_pem"])
    wrong = hosts.cli("receipt", "verify", "from-b.dsse", "--public-key", "b-only.pem")
    assert wrong.returncode == 65, wrong.stdout + wrong.stderr
    assert "wrong key" in wrong.stderr
    (hosts.tmp / "ledger.pem").write_text(pem)  # the PEM key set verifies as the JSON one does
    by_pem = hosts.cli("receipt", "verify", "from-b.dsse", "--public-key", "ledger.pem")
    assert by_pem.returncode == 0, by_pem.stdout + by_pem.stderr
    assert f"verified with key {a_key} of host host-a" in by_pem.stdout


def test_b_never_signs_a_receipt_a_made_before_envelopes_were_stored(hosts: Hosts) -> None:
    op_id = hosts.promote_on_a()
    path = f"/v1/operations/{op_id}/receipt.dsse"
    stored = envelope(hosts.a, path)
    hosts.forget_envelopes()
    refused = fetched(hosts.b, path)
    problem = refused.json()
    assert (refused.status_code, problem["code"], problem["owner_host"]) == (
        421,
        "owned_by_other_host",
        "host-a",
    ), refused.text
    assert problem["receipt_sha256"] == predicate_of(stored)["receipt_sha256"]
    assert envelope(hosts.a, path) == stored  # the maker signs it again: Ed25519, same key
    assert envelope(hosts.b, path) == stored  # and from then on any host serves it


def test_a_rotated_key_keeps_verifying_a_s_older_envelopes_from_b(hosts: Hosts) -> None:
    op_id = hosts.promote_on_a()
    promotion = f"/v1/operations/{op_id}/receipt.dsse"
    before = envelope(hosts.b, promotion)
    old_key = key_set(hosts.a)["active_keyid"]
    rotated = hosts.cli("keys", "rotate", "--state-dir", str(hosts.a.state_dir), "--json")
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    assert "not published" not in rotated.stderr
    new_key = json.loads(rotated.stdout)["active_keyid"]
    # published by the rotation itself: B lists it before A signed anything with it
    a_listed = {k["keyid"]: k for k in key_set(hosts.b)["keys"] if k["host_id"] == "host-a"}
    assert set(a_listed) == {old_key, new_key}
    assert (a_listed[old_key]["status"], a_listed[new_key]["status"]) == ("retired", "active")
    assert a_listed[old_key]["not_after"] == a_listed[new_key]["not_before"] is not None

    assert envelope(hosts.b, promotion) == before  # nothing re-signed
    hosts.rollback_on_a(op_id)
    after = envelope(hosts.b, f"/v1/operations/{op_id}/rollback-receipt.dsse")
    assert (signer_of(before), signer_of(after)) == (old_key, new_key)
    for name, data, key in (("before.dsse", before, old_key), ("after.dsse", after, new_key)):
        (hosts.tmp / name).write_bytes(data)
        done = hosts.cli("receipt", "verify", name, "--keys-from", hosts.b.url + "/v1/keys")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"signature: verified with key {key} of host host-a" in done.stdout
    old = hosts.cli("receipt", "verify", "before.dsse", "--keys-from", hosts.b.url)
    assert f"before {old_key} was retired at {a_listed[old_key]['not_after']}" in old.stdout


def test_a_rotation_while_a_receipt_is_made_never_signs_it_with_the_retired_key(
    tmp_path: Path,
) -> None:
    """The key is looked up before the receipt exists; a rotation in between retires it at
    a time before the receipt's ``promoted_at``, so the new key must sign."""
    pause = Pause(tmp_path, "before_receipt")
    with start(tmp_path, pause.spec) as made:
        request = prepare_promotion(made.a, made.repo_a, [("src/app.txt", V1, V2)])
        old_key = key_set(made.a)["active_keyid"]
        with made.a.client() as orch, ThreadPoolExecutor(1) as pool:
            answer = pool.submit(orch.post, "/v1/promotions", json=request)
            pause.reached()
            rotated = made.cli("keys", "rotate", "--state-dir", str(made.a.state_dir), "--json")
            assert rotated.returncode == 0, rotated.stdout + rotated.stderr
            pause.release()
            view = answer.result().json()
        assert view["status"] == "completed", view
        new_key = json.loads(rotated.stdout)["active_keyid"]
        data = envelope(made.b, f"/v1/operations/{view['operation_id']}/receipt.dsse")
        assert signer_of(data) == new_key != old_key
        (made.tmp / "raced.dsse").write_bytes(data)
        done = made.cli("receipt", "verify", "raced.dsse", "--keys-from", made.b.url)
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_host_started_with_another_host_s_key_refuses_to_start(tmp_path: Path) -> None:
    """A copied credentials directory would let B sign as A: the ledger names the key A's."""
    url = os.environ.get("PROMOTER_DATABASE_URL") or f"sqlite:///{tmp_path / 'ledger.db'}"
    repo = init_repo(tmp_path / "work", {"src/app.txt": V1})
    env = {"PROMOTER_DATABASE_URL": url}
    a = DaemonProcess(tmp_path / "state-a", {"a": repo}, extra_env={**env, "PROMOTER_HOST_ID": "a"})
    try:
        a_key = key_set(a)["active_keyid"]
        (tmp_path / "state-b").mkdir(mode=0o700)
        shutil.copytree(a.state_dir / "credentials", tmp_path / "state-b" / "credentials")
        with pytest.raises(RuntimeError) as refused:
            DaemonProcess(
                tmp_path / "state-b", {"b": repo}, extra_env={**env, "PROMOTER_HOST_ID": "b"}
            )
        assert f"signing key {a_key} is already published by host a, not b" in str(refused.value)
        assert [(k["keyid"], k["host_id"]) for k in key_set(a)["keys"]] == [(a_key, "a")]
    finally:
        a.kill()


@pytest.mark.database_free  # its commands run with no database settings at all
@pytest.mark.parametrize("ledger", ["absent", "empty"])
@pytest.mark.parametrize("command", [("keys", "rotate"), ("gc",)])
def test_a_command_that_needs_the_ledger_refuses_without_one_and_creates_nothing(
    tmp_path: Path, ledger: str, command: tuple[str, ...]
) -> None:
    """No database settings and a state directory with no ledger (or an empty file, never
    migrated): the command refuses in one line with exit 78 and creates nothing: no
    ``promoter.db``, no key, no directory."""
    empty = tmp_path / "EMPTY"
    empty.mkdir()
    if ledger == "empty":
        (empty / "promoter.db").write_bytes(b"")
    before = sorted(str(p.relative_to(empty)) for p in empty.rglob("*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    argv = [sys.executable, "-m", "promoter.cli.main", *command, "--state-dir", str(empty)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 78, done.stdout + done.stderr
    assert sorted(str(p.relative_to(empty)) for p in empty.rglob("*")) == before
    assert (empty / "promoter.db").exists() is (ledger == "empty")
    if ledger == "empty":
        assert (empty / "promoter.db").read_bytes() == b""
    (line,) = done.stderr.splitlines()
    code = "ledger_missing" if ledger == "absent" else "schema_mismatch"
    assert line.startswith(f"error [{code}] "), line
    assert ("no ledger at " if ledger == "absent" else "promoter db upgrade") in line


def test_keys_list_reads_the_recorded_daemons_keys_and_never_makes_one(tmp_path: Path) -> None:
    """``promoter keys list`` run elsewhere, with no flag: the recorded daemon's keys, the
    same active key ``GET /v1/keys`` serves; where there is no key (a state directory that
    is not a daemon's, a folder with none recorded) it refuses with exit 78 and makes
    none, where it once made a fresh private key in ``./.promoter``."""
    repo = init_repo(tmp_path / "work", {"src/app.txt": V1})
    daemon = DaemonProcess(tmp_path / "state", {"demo": repo})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}

    def keys_list(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "promoter.cli.main", "keys", "list", *args]
        return subprocess.run(
            argv, cwd=elsewhere, capture_output=True, text=True, env={**env, **extra}, timeout=120
        )

    try:
        served = key_set(daemon)["active_keyid"]
        listed = keys_list("--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["active_keyid"] == served
        nowhere = tmp_path / "nowhere"
        for refused, folder in (
            (keys_list("--state-dir", str(nowhere)), nowhere / "credentials"),
            # the default ``./.promoter``, named where it is looked for
            (
                keys_list(XDG_CONFIG_HOME=str(tmp_path / "no-config")),
                elsewhere / ".promoter/credentials",
            ),
        ):
            assert refused.returncode == 78, refused.stdout + refused.stderr
            assert refused.stdout == ""
            assert refused.stderr == (
                f"error [config_error] no signing key in {folder}: it is not a daemon's state; "
                "point --state-dir at the daemon's state directory (the daemon makes its first "
                "key when it starts)\n"
            )
        assert not nowhere.exists()
        assert list(elsewhere.iterdir()) == []
        assert key_set(daemon)["active_keyid"] == served
    finally:
        daemon.kill()


def test_gc_collects_the_recorded_daemons_blobs(tmp_path: Path) -> None:
    """``promoter gc`` run elsewhere, with no flag: it collects in the recorded daemon's
    state directory and its ledger (an old blob nothing references is removed, the
    bundle's are kept), as ``keys`` and ``credentials`` find it, where it once looked for
    a ledger in ``./.promoter``."""
    repo = init_repo(tmp_path / "work", {"src/app.txt": V1})
    state = tmp_path / "state"
    daemon = DaemonProcess(state, {"demo": repo})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PROMOTER_") or k == "PROMOTER_DATABASE_URL"  # the daemon's
    }

    def gc(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "promoter.cli.main", "gc", *args]
        return subprocess.run(argv, cwd=elsewhere, capture_output=True, text=True, env=env)

    blobs = state / "audit" / "blobs" / "sha256"
    try:
        prepare_promotion(daemon, repo, [("src/app.txt", V1, V2)])
        with daemon.executor("run_1") as ex:
            answer = ex.put(f"/v1/blobs/sha256/{sha(b'orphan')}", content=b"orphan")
            assert answer.status_code == 201, answer.text
        old = 1_000_000_000
        for data in (b"orphan", V1, V2):
            os.utime(blobs / sha(data)[:2] / sha(data), (old, old))
        dry = gc("--dry-run")
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert dry.stderr == (
            "examined 3 blobs; would remove 1 (6 B); snapshots not pruned (--dry-run)\n"
        )
        assert len(list(blobs.glob("*/*"))) == 3
        done = gc()
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stderr == (
            "examined 3 blobs; removed 1 (6 B); pruned snapshots of 1 repository "
            "(demo; the newest 100 kept)\n"
        )
        assert sorted(p.name for p in blobs.glob("*/*")) == sorted([sha(V1), sha(V2)])
        assert list(elsewhere.iterdir()) == []
    finally:
        daemon.kill()


def test_gc_prunes_the_snapshots_of_the_worktrees_the_recorded_daemon_serves(
    tmp_path: Path,
) -> None:
    """``promoter gc --keep-snapshots 1`` run elsewhere, with no flag, against a daemon
    served with ``--repo`` flags (as ``make serve`` does): it prunes the snapshots of the
    worktrees that daemon recorded it serves and names them, where it once pruned none."""
    repo = init_repo(tmp_path / "work", {"src/app.txt": V1})
    state = tmp_path / "state"
    daemon = DaemonProcess(state, {"demo": repo})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PROMOTER_") or k == "PROMOTER_DATABASE_URL"  # the daemon's
    }
    try:
        with daemon.client("operator") as operator:
            trees = []
            for n in range(3):
                (repo / "src" / "app.txt").write_bytes(b"%d\n" % n)
                made = operator.post("/v1/repositories/demo/snapshots", json={})
                assert made.status_code == 201, made.text
                trees.append(made.json()["tree"])
            listed = operator.get("/v1/repositories/demo/snapshots").json()["snapshots"]
            assert sorted(item["tree"] for item in listed) == sorted(trees)
            argv = [sys.executable, "-m", "promoter.cli.main", "gc", "--keep-snapshots", "1"]
            done = subprocess.run(argv, cwd=elsewhere, capture_output=True, text=True, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            assert done.stderr == (
                "examined 0 blobs; removed 0 (0 B); pruned snapshots of 1 repository "
                "(demo; the newest 1 kept)\n"
            )
            listed = operator.get("/v1/repositories/demo/snapshots").json()["snapshots"]
            assert [item["tree"] for item in listed] == [trees[-1]]
        assert list(elsewhere.iterdir()) == []
    finally:
        daemon.kill()
