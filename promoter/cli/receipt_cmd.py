"""``promoter receipt``: verify signed receipts offline, fetch them from the daemon.

``verify`` needs no server, no network and no state directory: it reads a file (a DSSE
envelope, a bare receipt, a bundle or a grant) and optionally public keys (a PEM file or
the JSON ``GET /v1/keys`` serves), and runs ``promoter.engine.signing.verify_document``.
A failed check raises ``ReceiptInvalid``, which the main handler prints and exits with.
``fetch`` and ``keys`` only download bytes and write them unchanged; they check nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from rich.markup import escape

from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    err_console,
    read_token,
    server_url,
)
from promoter.engine.signing import ALGORITHM, keyid_of, verify_document
from promoter.errors import ConfigError, PromoterError, error_class

FileArg = Annotated[
    Path,
    typer.Argument(
        help="DSSE envelope, receipt, bundle or grant (JSON).", metavar="FILE", dir_okay=False
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


def verify(file: FileArg, public_key: PublicKeyOpt = None, as_json: JsonOpt = False) -> None:
    """Check a receipt's canonical bytes, hash and (with --public-key) its signature."""
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc}") from exc
    public_keys = [key for path in public_key or [] for key in load_public_keys(path)]
    result = verify_document(data, public_keys or None)
    if as_json:
        summary = {
            "valid": True,
            "kind": result.kind,
            "schema": result.schema,
            "identity_sha256": result.identity_sha256,
            "keyid": result.keyid,
            "enveloped": result.enveloped,
            "checks": list(result.checks),
        }
        console.print_json(json.dumps(summary))
        return
    for line in result.checks:
        mark = "[yellow]![/]" if "NOT CHECKED" in line else "[green]✓[/]"
        console.print(f"{mark} {escape(line)}", soft_wrap=True)
    signed = f"signed by {result.keyid}" if result.keyid else "signature not checked"
    console.print(
        f"[bold green]valid[/] {result.schema} {result.identity_sha256} ({signed})", soft_wrap=True
    )


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
    _write(_get(server_url(url), f"/v1/operations/{operation_id}/{name}", token_file), out)


def keys(out: OutOpt = None, url: UrlOpt = None) -> None:
    """Download the host's public signing keys (GET /v1/keys) for offline verification."""
    _write(_get(server_url(url), "/v1/keys", None), out)


def _get(base: str, path: str, token_file: Path | None) -> bytes:
    headers: dict[str, str] = {}
    if path != "/v1/keys":  # the public keys need no token
        headers["Authorization"] = f"Bearer {read_token(token_file)}"
    try:
        answer = httpx.get(base.rstrip("/") + path, headers=headers, timeout=60)
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot reach the server at {base}: {exc}") from exc
    if answer.status_code != 200:
        raise _problem(answer)
    return answer.content


def _problem(answer: httpx.Response) -> PromoterError:
    try:
        body: Any = answer.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        return error_class(body["code"])(str(body.get("detail", "")))
    return PromoterError(f"the server answered {answer.status_code}")


def _write(data: bytes, out: Path | None) -> None:
    if out is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    try:
        out.write_bytes(data)
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc}") from exc
    err_console.print(f"wrote {len(data)} bytes to {escape(str(out))}")


# --- public keys ---------------------------------------------------------------------------


def load_public_keys(path: Path) -> list[Ed25519PublicKey]:
    """Every key in a PEM public key file or in the JSON ``GET /v1/keys`` serves."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read public key file {path}: {exc}") from exc
    if data.lstrip().startswith(b"-----BEGIN"):
        return [_pem_public_key(data, str(path))]
    try:
        served = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is neither a PEM public key nor /v1/keys JSON") from exc
    entries = served.get("keys") if isinstance(served, dict) and "keys" in served else [served]
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path} lists no keys")
    return [_served_key(entry, str(path)) for entry in entries]


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The first key of ``load_public_keys``."""
    return load_public_keys(path)[0]


def _served_key(entry: Any, where: str) -> Ed25519PublicKey:
    """One ``/v1/keys`` entry; its ``keyid`` must name the key its PEM carries."""
    pem = entry.get("public_key_pem") if isinstance(entry, dict) else None
    if not isinstance(pem, str) or entry.get("algorithm", ALGORITHM) != ALGORITHM:
        raise ConfigError(f"{where}: a key entry has no {ALGORITHM} public_key_pem")
    key = _pem_public_key(pem.encode("ascii", "replace"), where)
    if entry.get("keyid", keyid_of(key)) != keyid_of(key):
        raise ConfigError(f"{where}: the key entry's keyid does not match its key")
    return key


def _pem_public_key(data: bytes, where: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{where}: not a PEM public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"{where}: holds a {type(key).__name__}, not an Ed25519 key")
    return key
