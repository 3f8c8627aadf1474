"""The processor time of the person's command line: start, a question, an answer, an exit.

``python -m bench.cli_start [--rounds 5] [--full]`` (and ``make bench``, after the table)
measures the user plus system CPU of ``promoter`` processes, as the operating system
counted it for each child (``os.wait4``; a child's own waited-for children, git's for
instance, included), the median of ``--rounds`` (at least 5) runs each, interleaved:

- ``help``: ``promoter --help``; ``python``: ``python -c pass`` beside it, the floor;
- ``run_list``: ``promoter run --list`` with one kept sandbox whose step waits for
  approval (so the daemon is asked);
- ``review``: ``promoter review`` with that promotion held, its diff printed;
- ``receipt_verify``: ``promoter receipt verify`` of the bundle's signed verification
  receipt with the ledger's keys saved from ``GET /v1/keys`` (offline);
- ``bundle_build``: ``promoter bundle build`` of one changed file in a checked-out
  repository of 10 000 files (100 000 with ``--full``, written by
  ``bench.rows_builder.make_large_repository``), over ``git status --porcelain`` of the
  same worktree: the ratio, and both CPU figures.

``--before TREE`` times each command of another tree of promoter too (the same
interpreter, ``TREE`` first on ``PYTHONPATH``), interleaved with the rest: a
before/after in one run.

The daemon is ``promoter serve`` in its own process on a 166-file repository whose
promotions need approval; the sandbox is made by ``promoter run --unconfined`` (no
bubblewrap needed here). The goals are absolute (seconds of CPU; the ratio for the
build), printed beside the figures with the load average before and after. What this
does not do: gate anything (it reports), or keep its files (a temporary directory under
``PROMOTER_BENCH_DIR`` when set).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench import harness
from bench.rows_builder import _grant, make_large_repository
from bench.variables import stop_on_unknown

PROMOTER = [sys.executable, "-m", "promoter.cli.main"]
PROGRAM = Path(sys.executable).parent / "promoter"  # the installed entry point
GOALS: dict[str, tuple[float, str]] = {
    "help": (0.15, "s"),
    "run_list": (0.15, "s"),
    "review": (0.15, "s"),
    "receipt_verify": (0.15, "s"),
    "bundle_build": (1.5, "x"),
}
SMALL_FILES = 166
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def cpu_of(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    """User plus system seconds of one run of ``argv`` (and its waited-for children)."""
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    error = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[3:]} exited {proc.returncode}: {error.decode()[-400:]}")
    return usage.ru_utime + usage.ru_stime


def _small_repository(path: Path) -> None:
    env = {**os.environ, **_GIT_ENV}
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    for i in range(SMALL_FILES):
        target = path / "src" / f"d{i % 10}" / f"f{i}.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"line %d\n" % i)
    subprocess.run(["git", "add", "-A"], cwd=path, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=path, check=True, env=env)


@contextmanager
def _serving(state: Path, config: Path) -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    argv = [*PROMOTER, "serve", "--state-dir", str(state), "--config", str(config)]
    argv += ["--workers", "1"]  # one serving process, as the figures were measured
    proc = subprocess.Popen(
        [*argv, "--port", "0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        url = harness.ready_url(proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(60)


def _prepare(work: Path, url: str, state: Path, repo: Path) -> dict[str, list[str]]:
    """One held run; the envelope and keys saved; the commands, by row."""
    env = {**os.environ, "PROMOTER_URL": url, "PROMOTER_STATE_DIR": str(state)}
    change = "echo changed > src/d1/f1.txt; echo new > src/new.txt"
    argv = [*PROMOTER, "run", "--unconfined", "--repo", "demo", "--yes", "--", "sh", "-c"]
    subprocess.run([*argv, change], cwd=repo, env=env, check=True, capture_output=True)
    operator = (state / "credentials" / "operator.token").read_text().strip()
    listed = subprocess.run(
        [*PROMOTER, "ops", "list", "--json"],
        env={**env, "PROMOTER_TOKEN": operator},
        check=True,
        capture_output=True,
    ).stdout
    held = [op for op in json.loads(listed) if op["status"] == "awaiting_approval"]
    envelope, keys = work / "verification.dsse", work / "keys.json"
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {operator}"}) as http:
        path = f"/v1/bundles/{held[0]['bundle_id']}/verification.dsse"
        envelope.write_bytes(http.get(path).raise_for_status().content)
        keys.write_bytes(http.get("/v1/keys").raise_for_status().content)
    return {
        "help": ["--help"],
        "run_list": ["run", "--list"],
        "review": ["review"],
        "receipt_verify": ["receipt", "verify", str(envelope), "--keys", str(keys)],
    }


def _before_env(env: dict[str, str], before: Path | None) -> dict[str, str]:
    """``env`` with another tree of promoter first on ``PYTHONPATH`` (``--before``)."""
    if before is None:
        return env
    return {**env, "PYTHONPATH": os.pathsep.join([str(before), env.get("PYTHONPATH", "")])}


def _build_row(work: Path, files: int, rounds: int, before: Path | None = None) -> dict[str, Any]:
    large = make_large_repository(work / f"large-{files}", files)
    (large / "d000" / "e00" / "f00007.txt").write_bytes(b"edited for the bench\n")
    grant = work / "grant.json"
    grant.write_text(json.dumps(_grant(large).wire()))
    env = dict(os.environ)
    build = [str(PROGRAM), "bundle", "build", "--worktree", str(large), "--grant", str(grant)]
    status = ["git", "status", "--porcelain"]
    cpu_of(status, env, large)  # the index refreshed, as in a worktree someone works in
    pairs = []
    runs = [("build", build, env), ("status", status, env)]
    if before is not None:
        runs.append(("build_before", build, _before_env(env, before)))
    for k in range(rounds):
        turn = k % len(runs)
        pairs.append({name: cpu_of(argv, e, large) for name, argv, e in runs[turn:] + runs[:turn]})
    result = {
        "files": files,
        "ratio": statistics.median(p["build"] / p["status"] for p in pairs),
        "build_cpu_s": statistics.median(p["build"] for p in pairs),
        "git_status_cpu_s": statistics.median(p["status"] for p in pairs),
    }
    if before is not None:
        result["ratio_before"] = statistics.median(p["build_before"] / p["status"] for p in pairs)
        result["build_before_cpu_s"] = statistics.median(p["build_before"] for p in pairs)
    return result


def run(rounds: int = 5, *, full: bool = False, before: Path | None = None) -> dict[str, Any]:
    """Each row ``rounds`` times, interleaved; ``before``: each command of another tree of
    promoter (first on ``PYTHONPATH``) timed beside, as ``<row>_before``."""
    rounds = max(rounds, 5)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(
        prefix="promoter-bench-cli-", dir=os.environ.get("PROMOTER_BENCH_DIR")
    ) as tmp:
        work = Path(tmp)
        repo, state, config = work / "repo", work / "state", work / "promoter.toml"
        _small_repository(repo)
        config.write_text(f'[repositories.demo]\npath = "{repo}"\napproval = "required"\n')
        with _serving(state, config) as url:
            commands = _prepare(work, url, state, repo)
            operator = (state / "credentials" / "operator.token").read_text().strip()
            env = {
                **os.environ,
                "PROMOTER_URL": url,
                "PROMOTER_STATE_DIR": str(state),
                "PROMOTER_TOKEN": operator,
            }
            order: list[tuple[str, list[str] | None, dict[str, str]]] = [
                *((name, args, env) for name, args in commands.items()),
                ("python", None, env),
            ]
            if before is not None:
                older = _before_env(env, before)
                order += [(f"{name}_before", args, older) for name, args in commands.items()]
            samples: dict[str, list[float]] = {name: [] for name, _, _ in order}
            for k in range(rounds):
                for name, args, e in order[k % len(order) :] + order[: k % len(order)]:
                    argv = [sys.executable, "-c", "pass"] if args is None else [str(PROGRAM), *args]
                    samples[name].append(cpu_of(argv, e, repo))
        result: dict[str, Any] = {
            name: {"cpu_s": statistics.median(values), "samples": values}
            for name, values in samples.items()
        }
        result["bundle_build"] = _build_row(work, 100_000 if full else 10_000, rounds, before)
    result["load_average_before"] = list(load_before)
    result["load_average_after"] = list(os.getloadavg())
    result["rounds"] = rounds
    return result


def format_result(result: dict[str, Any]) -> str:
    before, after = result["load_average_before"][0], result["load_average_after"][0]
    lines = [
        f"command line CPU (user + system), median of {result['rounds']} runs, "
        f"load average {before:.2f} before and {after:.2f} after:"
    ]
    for name in ("python", "help", "run_list", "review", "receipt_verify"):
        goal = GOALS.get(name)
        verdict = "" if goal is None else f"  goal <= {goal[0]} s: "
        if goal is not None:
            verdict += "met" if result[name]["cpu_s"] <= goal[0] else "NOT met"
        lines.append(f"  {name:<16} {result[name]['cpu_s']:.3f} s{verdict}")
        if f"{name}_before" in result:
            lines.append(f"  {name + ' before':<16} {result[name + '_before']['cpu_s']:.3f} s")
    build = result["bundle_build"]
    met = "met" if build["ratio"] <= GOALS["bundle_build"][0] else "NOT met"
    lines.append(
        f"  bundle build, 1 change in {build['files']} files: {build['build_cpu_s']:.3f} s, "
        f"git status {build['git_status_cpu_s']:.3f} s: {build['ratio']:.2f}x "
        f"(goal <= {GOALS['bundle_build'][0]}x: {met})"
    )
    if "ratio_before" in build:
        lines.append(
            f"  the same before: {build['build_before_cpu_s']:.3f} s, {build['ratio_before']:.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CPU of promoter's command line.")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each (at least 5)")
    parser.add_argument("--full", action="store_true", help="the build row in 100k files")
    parser.add_argument(
        "--before", type=Path, help="a tree of promoter timed beside (first on PYTHONPATH)"
    )
    args = parser.parse_args(argv)
    print(format_result(run(args.rounds, full=args.full, before=args.before)))
    return 0


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    raise SystemExit(main())
