"""A small demo repository for ``make serve`` and the README walk-through.

``python -m scripts.demo ensure-repo DIR`` creates (once) a git repository with two
commits and a bit of uncommitted user work. Git runs with a fixed identity and without
the user's global configuration.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

DEMO_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Demo User",
    "GIT_AUTHOR_EMAIL": "demo@example.invalid",
    "GIT_COMMITTER_NAME": "Demo User",
    "GIT_COMMITTER_EMAIL": "demo@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo), **DEMO_ENV}
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, timeout=60
    )
    return done.stdout.decode().strip()


def ensure_repo(path: Path) -> Path:
    if (path / ".git").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text('def greet(name):\n    return "hello " + name\n')
    (path / "README.md").write_text("# demo\n\nA repository guarded by promoter.\n")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "initial")
    (path / "docs").mkdir()
    (path / "docs" / "notes.md").write_text("notes\n")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "notes")
    (path / "scratch.txt").write_text("the user's own uncommitted work\n")
    return path


def _start_daemon(state: Path, repo: Path) -> tuple[subprocess.Popen[bytes], str]:
    argv = [
        sys.executable,
        "-m",
        "promoter.cli.main",
        "serve",
        "--state-dir",
        str(state),
        "--port",
        "0",
        "--repo",
        f"demo={repo}",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    # it records itself beside its state, never in the person's ~/.config/promoter: a
    # daemon removed when the demo ends must not become the one the person's CLI reaches
    env["XDG_CONFIG_HOME"] = str(state.parent / "config")
    process = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    for raw in process.stderr:
        line = raw.decode(errors="replace").strip()
        if line.startswith("promoter: ready on "):
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, line.removeprefix("promoter: ready on ")
    raise RuntimeError("the demo daemon did not start")


def _executor_changes(clone: Path) -> None:
    """A scripted executor: binary, CRLF, executable bit, delete, nested new directory."""
    (clone / "src" / "app.py").write_text('def greet(name):\n    return "hi " + name\n')
    (clone / "assets").mkdir()
    (clone / "assets" / "logo.bin").write_bytes(bytes(range(256)))
    (clone / "docs" / "windows.txt").write_bytes(b"line one\r\nline two\r\n")
    (clone / "tools" / "gen" / "deep").mkdir(parents=True)
    script = clone / "tools" / "gen" / "deep" / "run.sh"
    script.write_text("#!/bin/sh\necho generated\n")
    script.chmod(0o755)
    (clone / "docs" / "notes.md").unlink()


def run_demo() -> int:
    from promoter.client.sync import PromoterClient
    from promoter.domain.canonical import rfc3339, utcnow
    from promoter.domain.models import GrantV1
    from promoter.executor.builder import build_bundle
    from promoter.executor.handover import upload_and_submit

    with tempfile.TemporaryDirectory(prefix="promoter-demo-") as scratch:
        root = Path(scratch)
        source = ensure_repo(root / "source")
        clone = root / "executor"
        _git(root, "clone", "-q", str(source), str(clone))
        process, url = _start_daemon(root / "state", source)
        try:
            token = (root / "state" / "credentials" / "orchestrator.token").read_text().strip()
            with PromoterClient(url, token, timeout=600) as orch:
                repo = orch.repositories()[0]
                head = _git(source, "rev-parse", "HEAD")
                now = utcnow()
                grant = GrantV1.model_validate(
                    {
                        "schema": "GrantV1",
                        "grant_id": "grt_demo",
                        "repository_identity": repo["repository_identity"],
                        "branch": "refs/heads/main",
                        "base_commit": head,
                        "base_tree": _git(source, "rev-parse", "HEAD^{tree}"),
                        "executor_run_id": "run_demo",
                        "workflow_id": "wf_demo",
                        "stage": "implement",
                        "attempt": 1,
                        "generation": 1,
                        "resume_epoch": 0,
                        "fence": 1,
                        "not_before": rfc3339(now),
                        "expires_at": rfc3339(now.replace(year=now.year + 1)),
                        "write_allowlist": [
                            {"pattern": p, "operations": ["create", "modify", "delete"]}
                            for p in ("src/**", "assets/**", "docs/**", "tools/**")
                        ],
                        "target_preconditions": [],
                        "limits": {"max_changes": 100, "max_total_bytes": 1 << 20},
                    }
                )
                orch.register_grant(grant)
                print(f"1. grant registered against {head[:12]} of the source")
                _executor_changes(clone)
                run_token = orch.mint_executor_token("run_demo")["token"]
                with (
                    PromoterClient(url, run_token) as executor,
                    build_bundle(clone, grant) as built,
                ):
                    receipt = upload_and_submit(executor, built)
                print(f"2. bundle {built.bundle['bundle_id']} verified: {receipt.status}")
                for check in receipt.checks:
                    print(f"     {check.name:<20} {check.status}")
                orch.set_lease(
                    "wf_demo",
                    "implement",
                    {
                        "run_id": "run_demo",
                        "attempt": 1,
                        "generation": 1,
                        "resume_epoch": 0,
                        "fence": 1,
                        "expires_at": grant.expires_at,
                    },
                )
                view = orch.promote(built.bundle["bundle_id"], receipt.receipt_sha256, 1, wait=True)
                print(f"3. promotion {view['operation_id']}: {view['status']}")
                print(orch.get_receipt(view["operation_id"]).decode())
            print("4. git status of the source (the user's scratch.txt is untouched):")
            print(_git(source, "status", "--short"))
        finally:
            process.terminate()
            process.wait(60)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "ensure-repo":
        repo = ensure_repo(Path(argv[1]))
        print(f"demo repository at {repo}", file=sys.stderr)
        return 0
    if argv == ["run"]:
        return run_demo()
    print("usage: python -m scripts.demo ensure-repo DIR | run", file=sys.stderr)
    return 64


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
