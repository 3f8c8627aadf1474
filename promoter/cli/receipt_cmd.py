"""``promoter receipt``: verify signed receipts offline, fetch them from the daemon.

This module owns the commands' options and help. ``verify`` needs no server, no network
and no state directory; what it checks and prints, and its exit codes, are
``promoter.cli.receipt_verify``'s (which a command line of the common shape reaches
without typer: ``promoter.cli.quick_args``). ``fetch`` and ``keys`` only download bytes
and write them unchanged (at a terminal a final newline follows them); they check
nothing.

Deliberately not here: reading public key files (``promoter.cli.trusted_keys``),
checking signatures and hashes (``promoter.engine.receipts.signing``), and the chain's
rules (``promoter.engine.receipts.chain``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from promoter.cli import receipt_verify
from promoter.cli.common import JsonOpt, TokenFileOpt, UrlOpt, err_console, escape, server_url
from promoter.errors import ConfigError

FilesArg = Annotated[
    list[Path] | None,
    typer.Argument(
        help="DSSE envelope, receipt, bundle or grant (JSON); two envelopes with --chain.",
        metavar="FILE",
        dir_okay=False,
        show_default=False,
    ),
]
PublicKeyOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--public-key",
        help="PEM public key or saved GET /v1/keys JSON (repeatable).",
        metavar="KEY",
        dir_okay=False,
        show_default=False,
    ),
]
KeysOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--keys",
        help="JWKS file (RFC 8037 OKP/Ed25519, e.g. saved GET /v1/keys; repeatable).",
        metavar="JWKS_FILE",
        dir_okay=False,
        show_default=False,
    ),
]
KeysFromOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--keys-from",
        help="A daemon's URL: fetch its GET /v1/keys, every host's keys in the ledger "
        "(repeatable; the only option of verify that uses the network).",
        metavar="URL",
        show_default=False,
    ),
]
NoSignatureOpt = Annotated[
    bool,
    typer.Option(
        "--no-signature", help="Accept an envelope whose signature is not checked (exit 0)."
    ),
]
WorktreeOpt = Annotated[
    Path | None,
    typer.Option(
        "--worktree",
        help="Compare every target with this checkout now: match, changed or missing.",
        file_okay=False,
        show_default=False,
    ),
]
ChainOpt = Annotated[
    bool,
    typer.Option(
        "--chain",
        help="Check that the promotion receipt names the verification receipt, bundle and "
        "grant it rests on, both signed by a listed key.",
    ),
]
OperationOpt = Annotated[
    str | None,
    typer.Option(
        "--operation",
        help="With --chain: fetch the operation's envelopes and keys from the server.",
        show_default=False,
    ),
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Write the bytes here instead of stdout.", dir_okay=False),
]


def register(app: typer.Typer) -> None:
    """Attach the ``receipt`` command group to the main app."""
    group = typer.Typer(help="Signed receipts: verify offline, fetch.", no_args_is_help=True)
    group.command("verify")(verify)
    group.command("fetch")(fetch)
    group.command("keys")(keys)
    app.add_typer(group, name="receipt")


def verify(
    files: FilesArg = None,
    public_key: PublicKeyOpt = None,
    keys_file: KeysOpt = None,
    keys_from: KeysFromOpt = None,
    no_signature: NoSignatureOpt = False,
    worktree: WorktreeOpt = None,
    chain: ChainOpt = False,
    operation: OperationOpt = None,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a receipt offline: canonical bytes, hash, Statement and (with a key) signature.

    An envelope or receipt is valid only when its signature verifies with a given key
    (--public-key, --keys, or --keys-from a daemon's URL for the ledger's key set of every
    host); without one it is "hash ok, signature not checked".

    Exit codes: 0 valid (with --worktree: every target matches; with --no-signature:
    hash ok, signature not checked); 1 valid, but a --worktree target is changed or
    missing; 3 hash ok, signature not checked (no key given, no --no-signature);
    65 receipt_invalid (tampered, wrong key, wrong payload type, rotated-out key, broken
    chain); 78 config_error (unreadable file or key); 2 usage.
    """
    code = receipt_verify.verify(
        files=files,
        public_key=public_key,
        keys_file=keys_file,
        keys_from=keys_from,
        no_signature=no_signature,
        worktree=worktree,
        chain=chain,
        operation=operation,
        url=url,
        token_file=token_file,
        as_json=as_json,
    )
    if code:
        raise typer.Exit(code)


def fetch(
    operation_id: Annotated[str, typer.Argument(help="The operation (op_…).")],
    dsse: Annotated[bool, typer.Option("--dsse", help="The signed envelope.")] = False,
    rollback: Annotated[bool, typer.Option("--rollback", help="The rollback receipt.")] = False,
    out: OutOpt = None,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Download an operation's promotion (or rollback) receipt, byte for byte."""
    if rollback and not dsse:
        raise ConfigError("the rollback receipt is served signed only: add --dsse")
    name = "rollback-receipt.dsse" if rollback else "receipt.dsse" if dsse else "receipt"
    _write(
        receipt_verify.get(server_url(url), f"/v1/operations/{operation_id}/{name}", token_file),
        out,
    )


def keys(out: OutOpt = None, url: UrlOpt = None) -> None:
    """Download the ledger's key set, every host's public signing keys (GET /v1/keys)."""
    _write(receipt_verify.get(server_url(url), "/v1/keys", None), out)


def _write(data: bytes, out: Path | None) -> None:
    if out is None:
        sys.stdout.buffer.write(data)
        if sys.stdout.isatty() and not data.endswith(b"\n"):
            sys.stdout.buffer.write(b"\n")  # the prompt on a line of its own; piped: exact
        sys.stdout.buffer.flush()
        return
    try:
        out.write_bytes(data)
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc}") from exc
    err_console.print(f"wrote {len(data)} bytes to {escape(str(out))}")
