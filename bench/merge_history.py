"""Real history through ``promoter merge``: an agent's commits over a person's later edits.

For a git repository on disk (e.g. a clone of pallets/click) this replays pairs of
consecutive commits that modify the same Python file: commit X is the agent's change
(its bundle goes from ``f@X^`` to ``f@X``), and the next commit Y that touches the file is
the person's edit, applied with ``git apply`` to ``f@X^`` (pairs where it does not apply
there are skipped: the person's edit must be made on the same base). For each pair a real
daemon guards a real worktree: the bundle is submitted, the person writes their bytes,
the promotion is refused (``target_drift``), ``POST /v1/operations/{id}/merge`` merges;
a clean merge is approved and promoted. It counts clean rescues, conflicts and files not
merged, checks that a clean merge equals the history's own ``f@Y`` (both changes, as the
project made them), and measures the person's bytes lost: the bytes of every line the
person added that the file does not hold afterwards (clean: the promoted bytes;
otherwise: the worktree, which must still be exactly the person's bytes). Run::

    python -m bench.merge_history /path/to/click.git --pairs 120

Deliberately not here: the speed table (``bench.bench_table``); this prints its own.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import documents as bd
from bench.harness import daemon
from bench.variables import stop_on_unknown
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import sha256_hex
from promoter.domain.documents import grant_sha256
from promoter.domain.models import GrantV1
from promoter.errors import MergeConflict, MergeUnsupported

GIT_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


def git(cwd: Path | str, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, input=input, capture_output=True, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout


@dataclass(frozen=True)
class Pair:
    path: str
    agent_commit: str
    person_commit: str
    base: bytes
    agent: bytes
    person: bytes
    history: bytes  # f@Y: both changes as the project made them
    placed: bool  # Y's edit placed by line numbers (its context overlapped X's change)


@dataclass
class Tally:
    pairs: int = 0
    skipped: int = 0
    clean: int = 0
    conflicts: int = 0
    unsupported: int = 0
    promoted: int = 0
    equal_to_history: int = 0
    person_bytes_lost: int = 0
    person_bytes_total: int = 0
    agent_bytes_lost_in_clean: int = 0
    agent_bytes_total_in_clean: int = 0
    placed_by_line_numbers: int = 0
    conflicts_among_placed: int = 0
    seconds: float = 0.0
    merge_ms: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _apply(base: bytes, patch: bytes, name: str, *, zero: bool = False) -> bytes | None:
    """``patch`` (for ``name``) applied to ``base`` by ``git apply`` (``zero``: a patch
    without context, placed by line numbers); None if it does not apply."""
    with tempfile.TemporaryDirectory() as place:
        target = Path(place) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base)
        done = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", *(["--unidiff-zero"] if zero else []), "-"],
            cwd=place,
            env={**GIT_ENV, "GIT_CEILING_DIRECTORIES": place},
            input=patch,
            capture_output=True,
            check=False,
        )
        return target.read_bytes() if done.returncode == 0 else None


def find_pairs(source: Path, wanted: int, commits: int) -> tuple[list[Pair], int]:
    """Up to ``wanted`` pairs among the last ``commits`` non-merge commits; and the skips."""
    log = git(
        source,
        "log",
        f"-{commits}",
        "--no-merges",
        "--reverse",
        "--format=@%H",
        "--name-status",
        "--no-renames",
        "--",
        "*.py",
    ).decode()
    touches: dict[str, list[str]] = {}
    order: dict[str, int] = {}
    commit = ""
    for line in log.splitlines():
        if line.startswith("@"):
            commit = line[1:]
            order[commit] = len(order)
        elif line.startswith("M\t"):
            touches.setdefault(line[2:], []).append(commit)
    pairs: list[Pair] = []
    skipped = 0
    candidates = sorted(  # oldest agent commit first
        ((path, x, y) for path, seq in touches.items() for x, y in itertools.pairwise(seq)),
        key=lambda item: (order[item[1]], item[0]),
    )
    for path, x, y in candidates:
        if len(pairs) >= wanted:
            break
        base = git(source, "show", f"{x}^:{path}", check=False)
        agent = git(source, "show", f"{x}:{path}", check=False)
        before_y = git(source, "show", f"{y}^:{path}", check=False)
        history = git(source, "show", f"{y}:{path}", check=False)
        if before_y != agent:  # another commit touched it between (not a .py-only log)
            skipped += 1
            continue
        patch = git(source, "diff", "--no-color", "--no-ext-diff", f"{y}^", y, "--", path)
        person = _apply(base, patch, path)
        placed = person is None
        if person is None:  # Y's context overlaps X's change: place Y's lines by number
            bare = git(source, "diff", "-U0", "--no-color", "--no-ext-diff", f"{y}^", y, "--", path)
            person = _apply(base, bare, path, zero=True)
        if person is None or person in (base, agent) or b"\0" in base:
            skipped += 1
            continue
        pairs.append(Pair(path, x, y, base, agent, person, history, placed))
    return pairs, skipped


def _added_lines(before: bytes, after: bytes) -> Counter[bytes]:
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    added: Counter[bytes] = Counter()
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            added.update(b[j1:j2])
    return added


def _lost(person_added: Counter[bytes], final: bytes) -> int:
    missing = person_added - Counter(final.splitlines(keepends=True))
    return sum(len(line) * n for line, n in missing.items())


class Replay:
    def __init__(self, url: str, tokens: tuple[str, str], repo: Path, identity: str) -> None:
        """``tokens``: the orchestrator's and the operator's."""
        self.repo = repo
        self.identity = identity
        self.orchestrator = PromoterClient(url, tokens[0], timeout=120)
        self.operator = PromoterClient(url, tokens[1], timeout=700)
        token = self.orchestrator.mint_executor_token(bd.RUN_ID)["token"]
        self.executor = PromoterClient(url, token, timeout=120)
        self.orchestrator.set_lease(bd.WORKFLOW, bd.STAGE, bd.lease_document())

    def close(self) -> None:
        for client in (self.orchestrator, self.operator, self.executor):
            client.close()

    def _merge(self, operation_id: str, tally: Tally) -> Mapping[str, Any]:
        """The merge request, timed (clean: storing and holding the bundle included)."""
        started = time.perf_counter()
        try:
            return self.operator.merge(operation_id)
        finally:
            tally.merge_ms.append((time.perf_counter() - started) * 1000)

    def one(self, number: int, pair: Pair, tally: Tally) -> None:
        rel = f"p{number:04d}/{pair.path}"
        target = self.repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(pair.base)
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", f"base {number}")
        commit, tree = git(self.repo, "rev-parse", "HEAD", "HEAD^{tree}").decode().split()
        grant = bd.grant_document(
            self.identity, commit, tree, max_changes=10, grant_id=f"grt_merge_{number}"
        )
        self.orchestrator.register_grant(grant)
        digest = grant_sha256(GrantV1.model_validate(grant, strict=False))
        change = {
            "path": rel,
            "operation": "modify",
            "old": bd.state_of(pair.base),
            "new": bd.state_of(pair.agent),
        }
        bundle = bd.bundle_document(grant, digest, [change])
        for data in (pair.base, pair.agent):
            self.executor.put_blob(sha256_hex(data), data)
        submitted = self.executor.submit_bundle(bundle)
        receipt = submitted["verification_receipt"]["receipt_sha256"]
        target.write_bytes(pair.person)  # the person edits the same file meanwhile
        refused = self.orchestrator.promote(bundle["bundle_id"], receipt, bd.FENCE, wait=True)
        if refused.get("code") != "target_drift":
            raise RuntimeError(f"pair {number}: expected target_drift, got {refused}")
        person_added = _added_lines(pair.base, pair.person)
        tally.placed_by_line_numbers += pair.placed
        tally.person_bytes_total += sum(len(line) * n for line, n in person_added.items())
        try:
            merged = self._merge(str(refused["operation_id"]), tally)
        except MergeConflict:
            tally.conflicts += 1
            tally.conflicts_among_placed += pair.placed
            final = target.read_bytes()
            if final != pair.person:
                tally.notes.append(f"pair {number}: the worktree changed on a conflict")
        except MergeUnsupported as exc:
            tally.unsupported += 1
            tally.notes.append(f"pair {number}: not merged: {exc.detail}")
            final = target.read_bytes()
        else:
            tally.clean += 1
            held = merged["promotion"]["operation_id"]
            view = self.operator.approve(str(held), "bench", wait=True)
            if view["status"] == "completed":
                tally.promoted += 1
            final = target.read_bytes()
            if final == pair.history:
                tally.equal_to_history += 1
            agent_added = _added_lines(pair.base, pair.agent)
            tally.agent_bytes_total_in_clean += sum(len(x) * n for x, n in agent_added.items())
            tally.agent_bytes_lost_in_clean += _lost(agent_added, final)
        tally.person_bytes_lost += _lost(person_added, final)
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", f"after {number}")


def run(source: Path, wanted: int, commits: int) -> dict[str, Any]:
    pairs, skipped = find_pairs(source, wanted, commits)
    tally = Tally(pairs=len(pairs), skipped=skipped)
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "work"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "README").write_bytes(b"merge history replay\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "start")
        with daemon(Path(scratch) / "state", repo) as (url, services):
            identity = services.registry.by_name(bd.REPO_NAME).identity
            tokens = (services.tokens["orchestrator"], services.tokens["operator"])
            replay = Replay(url, tokens, repo, identity)
            started = time.perf_counter()
            try:
                for number, pair in enumerate(pairs):
                    replay.one(number, pair, tally)
            finally:
                replay.close()
            tally.seconds = time.perf_counter() - started
    result = {k: v for k, v in tally.__dict__.items() if k not in ("notes", "merge_ms")}
    times = sorted(tally.merge_ms)
    if times:  # the merge request alone; a clean one includes storing and holding the bundle
        result["merge_ms_median"] = round(statistics.median(times), 1)
        result["merge_ms_max"] = round(times[-1], 1)
    result["notes"] = tally.notes[:20]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a git repository (bare or not)")
    parser.add_argument("--pairs", type=int, default=100, help="pairs to replay at most")
    parser.add_argument("--commits", type=int, default=1500, help="recent commits to search")
    args = parser.parse_args(argv)
    result = run(args.source, args.pairs, args.commits)
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0 if result["person_bytes_lost"] == 0 else 1


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    sys.exit(main())
