"""Orchestrator commands: ``grant create``, ``lease set``, ``promote``, ``token mint``.

This module owns the command line of the trusted orchestrator side (protocol: api#command-line): it
assembles a GrantV1 from flags and the named repository's current HEAD (base tree and
explicit preconditions read from the worktree when it is on this machine, read-only),
registers it, sets leases, mints executor tokens and requests promotions, printing what
it did. A promotion that ends refused or unreconciled exits with its error's code.

It deliberately decides nothing the host decides: the host re-checks every grant, lease
and promotion. Reading the worktree goes through ``promoter.fs.chain`` (descriptor
chains, no symlinks) and ``promoter.git.readback`` (read-only git).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    escape,
    read_token,
    server_url,
    shown_path,
)
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import rfc3339, utcnow
from promoter.domain.documents import canonical, sealed_grant
from promoter.domain.models import (
    AllowEntry,
    GrantV1,
    IndexSpec,
    LeaseV1,
    Limits,
    Operation,
    Precondition,
    StateSpec,
)
from promoter.domain.paths import check_path, disk_path
from promoter.errors import (
    BadRequest,
    ConfigError,
    GrantConflict,
    PathUnsafe,
    PromoterError,
    error_class,
)
from promoter.fs.root import Root
from promoter.git.head import commit_tree
from promoter.git.readback import RepoLayout, discover, index_entries

if TYPE_CHECKING:
    from promoter.domain import answers

__all__ = ["capture_precondition", "parse_allow", "register"]

OPERATIONS: tuple[Operation, ...] = ("create", "modify", "delete")
WAIT_TIMEOUT = 660.0  # the server waits up to 600 s for a promotion


def _client(url: str | None, token_file: Path | None, timeout: float = 60.0) -> PromoterClient:
    return PromoterClient(server_url(url), read_token(token_file, url), timeout=timeout)


def _emit(document: Mapping[str, Any]) -> None:
    typer.echo(json.dumps(document, indent=2, sort_keys=True))


def parse_allow(flag: str) -> AllowEntry:
    """``PATTERN:create,modify`` (no ``:OPS`` suffix: every operation)."""
    pattern, sep, ops = flag.rpartition(":")
    if not sep:
        return AllowEntry(pattern=flag, operations=list(OPERATIONS))
    operations = [op.strip() for op in ops.split(",") if op.strip()]
    unknown = sorted(set(operations) - set(OPERATIONS))
    if not pattern or not operations or unknown:
        raise BadRequest(
            f"--allow takes PATTERN:OPS with OPS from {','.join(OPERATIONS)}, got {flag!r}"
        )
    return AllowEntry(pattern=pattern, operations=list(dict.fromkeys(operations)))  # type: ignore[arg-type]


def capture_precondition(layout: RepoLayout, path: str) -> Precondition:
    """The current worktree state and index entry of ``path``, read without writing.

    ``path`` is a wire form (protocol: documents#byte-paths): ``caf\\xe9.txt`` names the Latin-1
    file.
    """
    check_path(path)
    name = disk_path(path)
    with Root.open(layout.worktree) as root:
        leaf = root.read_state(name)
    if leaf.kind in ("file", "symlink"):  # a link's state is its target text, mode 120000
        old = StateSpec(exists=True, sha256=leaf.sha256, mode=leaf.mode)  # type: ignore[arg-type]
    elif leaf.kind == "missing":
        old = StateSpec(exists=False, sha256=None, mode=None)
    else:
        raise PathUnsafe(f"{path!r} is a {leaf.kind}, not a regular file", path=path)
    entries = index_entries(layout, [name])[name]
    if len(entries) > 1 or (entries and entries[0].stage != 0):
        raise BadRequest(f"{path!r} has a merge conflict in the index", path=path)
    if entries and entries[0].intent_to_add:
        raise BadRequest(f"{path!r} is only marked intent-to-add in the index", path=path)
    index = None
    if entries:
        entry = entries[0]
        index = IndexSpec(mode=entry.mode, oid=entry.oid, stage=entry.stage)
    return Precondition(path=path, old=old, index=index)


def _local_layout(worktree: str | None) -> RepoLayout | None:
    if not worktree or not os.path.isdir(worktree):
        return None
    return discover(worktree)


def _repository(client: PromoterClient, name: str) -> answers.RepositoryInfo:
    for item in client.repositories():
        if name in (item["name"], item["repository_identity"]):
            return item
    raise error_class("repository_unknown")(f"the server guards no repository named {name!r}")


def grant_create(
    repo: Annotated[str, typer.Option("--repo", help="Name of a repository the server guards.")],
    grant_id: Annotated[str, typer.Option("--grant-id", help="A new, unique grant id.")],
    run: Annotated[str, typer.Option("--run", help="The executor run the grant is for.")],
    workflow: Annotated[str, typer.Option("--workflow", help="Workflow id of the lease.")],
    stage: Annotated[str, typer.Option("--stage", help="Stage of the lease.")],
    allow: Annotated[
        list[str],
        typer.Option("--allow", help="PATTERN:create,modify,delete (repeatable)."),
    ],
    fence: Annotated[int, typer.Option("--fence", help="Lease fence at issuance.")] = 1,
    ttl: Annotated[int, typer.Option("--ttl", help="Seconds until the grant expires.")] = 3600,
    attempt: Annotated[int, typer.Option("--attempt")] = 1,
    generation: Annotated[int, typer.Option("--generation")] = 1,
    resume_epoch: Annotated[int, typer.Option("--resume-epoch")] = 0,
    max_changes: Annotated[int, typer.Option("--max-changes")] = 1000,
    max_bytes: Annotated[int, typer.Option("--max-bytes")] = 256 * 1024 * 1024,
    precondition: Annotated[
        list[str] | None,
        typer.Option(
            "--precondition",
            help="PATH whose current worktree state and index entry the grant requires "
            "(repeatable; the worktree must be on this machine).",
        ),
    ] = None,
    base_tree: Annotated[
        str | None,
        typer.Option("--base-tree", help="HEAD's tree, when the worktree is not on this machine."),
    ] = None,
    symlinks: Annotated[
        str,
        typer.Option("--symlinks", help="Links the bundle may hold: none, inside or any."),
    ] = "none",
    approval: Annotated[
        str,
        typer.Option(
            "--approval",
            help="required: its promotions wait for an operator's decision; none: as the "
            "repository says.",
        ),
    ] = "none",
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the sealed grant's canonical JSON here.")
    ] = None,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Create and register a grant on the current HEAD of a guarded repository."""
    if symlinks not in ("none", "inside", "any"):
        raise BadRequest(f"--symlinks takes none, inside or any, got {symlinks!r}")
    if approval not in ("none", "required"):
        raise BadRequest(f"--approval takes none or required, got {approval!r}")
    with _client(url, token_file) as client:
        info = _repository(client, repo)
        head, branch = info.get("head"), info.get("branch")
        if not head or not branch:
            raise BadRequest(f"repository {repo!r} has no symbolic HEAD on a commit")
        layout = _local_layout(info.get("worktree"))
        if base_tree is None:
            if layout is None:
                raise ConfigError(f"the worktree of {repo!r} is not on this machine: --base-tree")
            base_tree = commit_tree(layout, head)
        captured: list[dict[str, Any]] = []
        for path in dict.fromkeys(precondition or []):
            if layout is None:
                raise ConfigError("--precondition needs the repository's worktree on this machine")
            captured.append(capture_precondition(layout, path).wire())
        now = utcnow()
        grant = sealed_grant(
            GrantV1.model_validate(
                {
                    "schema": "GrantV1",
                    "grant_id": grant_id,
                    "repository_identity": info["repository_identity"],
                    "branch": branch,
                    "base_commit": head,
                    "base_tree": base_tree,
                    "executor_run_id": run,
                    "workflow_id": workflow,
                    "stage": stage,
                    "attempt": attempt,
                    "generation": generation,
                    "resume_epoch": resume_epoch,
                    "fence": fence,
                    "not_before": rfc3339(now),
                    "expires_at": rfc3339(now + timedelta(seconds=ttl)),
                    "write_allowlist": [parse_allow(flag).wire() for flag in allow],
                    "target_preconditions": captured,
                    "limits": Limits(max_changes=max_changes, max_total_bytes=max_bytes).wire(),
                    "symlinks": symlinks,
                    # only when asked: a grant without it is the same grant as before
                    **({"approval": "required"} if approval == "required" else {}),
                }
            )
        )
        try:
            answer = client.register_grant(grant)
        except GrantConflict as exc:
            raise _grant_taken(client, grant, exc) from exc
    if answer["grant_sha256"] != grant.grant_sha256:
        raise PromoterError("the server sealed the grant with another grant_sha256")
    if out is not None:
        out.write_bytes(canonical(grant))
    if json_output:
        _emit(grant.wire())
        return
    verb = "registered" if answer["created"] else "already registered (identical)"
    console.print(f"grant [bold]{grant_id}[/] {verb}: {grant.grant_sha256}")
    console.print(
        f"  {repo} {branch} at {head[:12]} (tree {grant.base_tree[:12]}), run {run}, "
        f"{workflow}/{stage} fence {fence}, expires {grant.expires_at}"
    )
    for entry in grant.write_allowlist:
        console.print(f"  allow {escape(entry.pattern)}: {','.join(entry.operations)}")
    for item in grant.target_preconditions:
        console.print(f"  precondition {escape(item.path)}")
    if out is not None:
        console.print(f"wrote {out}")


_WINDOW = frozenset({"not_before", "expires_at"})


def _grant_taken(client: PromoterClient, grant: GrantV1, exc: GrantConflict) -> GrantConflict:
    """The conflict of a grant id already registered, saying how it differs and what to do:
    a grant is stored once and never replaced (protocol: grants#grant-registration), and
    each ``grant create`` counts its window from now, so the same flags again differ in
    their window alone."""
    try:
        stored = client.grant_document(grant.grant_id)
    except PromoterError:
        return exc  # the conflict as the daemon said it
    made = grant.wire()
    differ = sorted(
        key
        for key in (stored.keys() | made.keys()) - {"grant_sha256"}
        if stored.get(key) != made.get(key)
    )
    expires = str(stored.get("expires_at", ""))
    named = (
        f"grant {grant.grant_id} is already registered (grant_sha256 {stored.get('grant_sha256')})"
    )
    if set(differ) <= _WINDOW:
        detail = (
            f"{named}, the same but for its window (made at {stored.get('not_before')}, "
            f"expires {expires}; each grant create counts --ttl from now): a grant is never "
            "replaced; use the registered one as it is until it expires (e.g. bundle build "
            f"--grant {grant.grant_id}), or pass a new --grant-id for a new window"
        )
    else:
        content = [key for key in differ if key not in _WINDOW]  # the window always may
        verb = "differs" if len(content) == 1 else "differ"
        detail = (
            f"{named} with other content (its {', '.join(content)} {verb}; it expires "
            f"{expires}): a grant is never replaced; pass a new --grant-id"
        )
    return GrantConflict(detail, grant_id=grant.grant_id, grant_sha256=stored.get("grant_sha256"))


def lease_set(
    workflow: Annotated[str, typer.Argument(help="Workflow id.")],
    stage: Annotated[str, typer.Argument(help="Stage.")],
    run: Annotated[str, typer.Option("--run", help="The executor run holding the lease.")],
    fence: Annotated[int, typer.Option("--fence", help="The new fence (only moves forward).")],
    attempt: Annotated[int, typer.Option("--attempt")] = 1,
    generation: Annotated[int, typer.Option("--generation")] = 1,
    resume_epoch: Annotated[int, typer.Option("--resume-epoch")] = 0,
    ttl: Annotated[int, typer.Option("--ttl", help="Seconds until the lease expires.")] = 3600,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Set the current lease of WORKFLOW/STAGE."""
    lease = LeaseV1(
        run_id=run,
        attempt=attempt,
        generation=generation,
        resume_epoch=resume_epoch,
        fence=fence,
        expires_at=rfc3339(utcnow() + timedelta(seconds=ttl)),
    )
    with _client(url, token_file) as client:
        answer = client.set_lease(workflow, stage, lease)
    if json_output:
        _emit(answer)
        return
    verb = "set" if answer["changed"] else "unchanged (identical)"
    console.print(
        f"lease {workflow}/{stage} {verb}: run {run}, fence {fence}, attempt {attempt}, "
        f"generation {generation}, resume epoch {resume_epoch}, expires {answer['expires_at']}"
    )


def _print_operation(view: Mapping[str, Any]) -> None:
    console.print(
        f"operation [bold]{view['operation_id']}[/] {view['status']} "
        f"(attempt {view.get('attempt', 1)})"
    )
    for step in view.get("steps", []):
        console.print(f"  {step['status']:<10} {step['operation']:<7} {shown_path(step['path'])}")
    report = view.get("report") or {}
    drift = report.get("drift_report") or report
    for name, fact in (drift.get("repository") or {}).items():
        if isinstance(fact, dict) and not fact.get("ok", True):
            console.print(
                f"  [red]drift[/] {name}: expected {fact.get('expected')}, "
                f"found {fact.get('actual')}"
            )
    for item in drift.get("paths", []):
        if item.get("verdict") == "drift":
            reasons = "; ".join(item.get("reasons", []))
            console.print(f"  [red]drift[/] {shown_path(item['path'])}: {escape(reasons)}")


def promote(
    bundle_id: Annotated[str, typer.Argument(help="The verified bundle to promote.")],
    receipt: Annotated[
        str | None,
        typer.Option("--receipt", help="receipt_sha256 (default: the stored verification)."),
    ] = None,
    fence: Annotated[
        int | None, typer.Option("--fence", help="The lease fence (default: the grant's).")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the final state.")] = False,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Ask the host to promote a verified bundle into its repository's worktree."""
    with _client(url, token_file, WAIT_TIMEOUT if wait else 60.0) as client:
        if receipt is None:
            receipt = client.get_verification(bundle_id).receipt_sha256
        if fence is None:
            fence = client.get_grant(client.get_bundle(bundle_id).grant_id).fence
        answer = client.promote(bundle_id, receipt, fence, wait=wait)
        # the operation's view; only its id and status while it still runs
        view: Mapping[str, Any] = answer
        if "steps" not in answer and answer["status"] != "in_progress":
            view = client.get_operation(answer["operation_id"])
    if json_output:
        _emit(view)
    else:
        _print_operation(view)
    status = view["status"]
    if status in ("refused", "needs_reconciliation", "needs_recovery") and view.get("code"):
        raise error_class(str(view["code"]))(
            str(view.get("detail") or status), operation_id=view["operation_id"], status=status
        )
    if status in ("refused", "needs_reconciliation", "needs_recovery"):
        raise PromoterError(f"operation {view['operation_id']} is {status}")


def token_mint(
    run: Annotated[str, typer.Argument(help="The executor run the token is bound to.")],
    ttl: Annotated[int, typer.Option("--ttl", help="Seconds until the token expires.")] = 3600,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Mint an executor token for RUN; the token alone goes to stdout."""
    with _client(url, token_file) as client:
        answer = client.mint_executor_token(run, ttl)
    if json_output:
        _emit(answer)
        return
    typer.echo(answer["token"])
    typer.echo(f"executor token for {run} expires {answer['expires_at']}", err=True)


def register(app: typer.Typer) -> None:
    """Attach ``grant``, ``lease``, ``token`` and ``promote`` to the main app."""
    grant_app = typer.Typer(help="Grants: what an executor may change.", no_args_is_help=True)
    grant_app.command("create")(grant_create)
    lease_app = typer.Typer(help="Leases: who holds a workflow stage.", no_args_is_help=True)
    lease_app.command("set")(lease_set)
    token_app = typer.Typer(help="Executor tokens.", no_args_is_help=True)
    token_app.command("mint")(token_mint)
    app.add_typer(grant_app, name="grant")
    app.add_typer(lease_app, name="lease")
    app.add_typer(token_app, name="token")
    app.command("promote")(promote)
