"""``promoter receipt verify``: a receipt checked offline, its lines and its exit code.

``verify`` reads a file (a DSSE envelope, a bare receipt, a bundle or a grant) and
optionally public keys (a PEM file, a JWKS or the JSON ``GET /v1/keys`` serves;
``--keys-from URL`` alone fetches that JSON, the ledger's key set of every host, from a
daemon), runs ``promoter.engine.receipts.signing.verify_document``, and with
``--worktree`` compares the receipt's targets with the disk
(``promoter.engine.receipts.worktree``). ``--chain`` checks that a promotion receipt names
the verification receipt it rests on (``promoter.engine.receipts.chain``), from two files
or, with ``--operation``, from the server. A failed check raises ``ReceiptInvalid``, which
the main handler prints and exits with; the other outcomes are the exit code ``verify``
returns. ``get`` downloads bytes from a daemon (``receipt fetch`` and ``receipt keys``
write them as they came).

It imports no typer: the command's options are ``promoter.cli.receipt_cmd``'s, and a
command line of the common shape reaches ``verify`` without typer
(``promoter.cli.quick_args``). Deliberately not here: reading public key files
(``promoter.cli.trusted_keys``), checking signatures and hashes
(``promoter.engine.receipts.signing``), and the chain's rules
(``promoter.engine.receipts.chain``).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promoter.cli.common import console, echo_json, escape, read_token, server_url
from promoter.cli.trusted_keys import load_trusted, trusted_from_json
from promoter.engine.receipts.signing import TrustedKey, VerifiedDocument, verify_document
from promoter.errors import (
    ConfigError,
    PromoterError,
    ReceiptInvalid,
    ServerUnavailable,
    error_class,
)

if TYPE_CHECKING:
    import httpx

    from promoter.engine.receipts.worktree import TargetMatch

__all__ = ["EXIT_VALID", "get", "ledger_keys", "load_json_object", "verify"]

# Exit codes of ``promoter receipt verify`` (65 receipt_invalid and 78 config_error come
# from the error classes).
EXIT_VALID = 0
EXIT_WORKTREE_DIFFERS = 1
EXIT_SIGNATURE_NOT_CHECKED = 3


def verify(
    *,
    files: list[Path] | None,
    public_key: list[Path] | None,
    keys_file: list[Path] | None,
    keys_from: list[str] | None,
    no_signature: bool,
    worktree: Path | None,
    chain: bool,
    operation: str | None,
    url: str | None,
    token_file: Path | None,
    as_json: bool,
) -> int:
    """Check the document (or, with ``chain``, the two), print the outcome, and return
    the exit code (a failed check or an unreadable file raises its error)."""
    keys = [k for path in [*(public_key or []), *(keys_file or [])] for k in load_trusted(path)]
    keys += [k for base in keys_from or [] for k in ledger_keys(base)]
    if chain and worktree is not None:
        raise ConfigError("--worktree compares one receipt; it does not go with --chain")
    if chain:
        _verify_chain(files or [], keys, operation, url, token_file, as_json)
        return EXIT_VALID
    if operation is not None:
        raise ConfigError("--operation is for --chain")
    if len(files or []) != 1:
        raise ConfigError("give exactly one FILE (two envelopes only with --chain)")
    [file] = files or []
    result = verify_document(_read(file), keys or None)
    matches = None
    if worktree is not None:
        from promoter.engine.receipts.worktree import compare_targets

        matches = compare_targets(load_json_object(result), worktree)
    code = _exit_code(result, matches, no_signature)
    if as_json:
        echo_json(json.dumps(_summary(result, matches, code)))
    else:
        _print_result(result, matches, no_signature)
    return code


def _exit_code(
    result: VerifiedDocument, matches: list[TargetMatch] | None, no_signature: bool
) -> int:
    if result.needs_signature and not no_signature:
        return EXIT_SIGNATURE_NOT_CHECKED
    if matches and any(m.status != "match" for m in matches):
        return EXIT_WORKTREE_DIFFERS
    return EXIT_VALID


def _summary(
    result: VerifiedDocument, matches: list[TargetMatch] | None, code: int
) -> dict[str, Any]:
    signature = "verified" if result.signature_checked else "not_checked"
    if result.schema not in _SIGNED:
        signature = "not_applicable"
    summary: dict[str, Any] = {
        "valid": not result.needs_signature,
        "hash_ok": True,
        "signature": signature,
        "kind": result.kind,
        "schema": result.schema,
        "identity_sha256": result.identity_sha256,
        "keyid": result.keyid,
        "enveloped": result.enveloped,
        "predicate_type": result.predicate_type,
        "checks": list(result.checks),
        "exit_code": code,
    }
    if matches is not None:
        summary["worktree"] = [m.wire() for m in matches]
    return summary


_SIGNED = ("PatchVerificationReceiptV1", "PatchPromotionReceiptV1", "RollbackReceiptV1")


def _print_result(
    result: VerifiedDocument, matches: list[TargetMatch] | None, no_signature: bool
) -> None:
    for line in result.checks:
        mark = "[yellow]![/]" if "NOT CHECKED" in line else "[green]✓[/]"
        console.print(f"{mark} {escape(line)}", soft_wrap=True)
    what = f"{result.schema} {result.identity_sha256}"
    if result.needs_signature:
        how = "accepted with --no-signature" if no_signature else "NOT valid without a key"
        console.print(
            f"[bold yellow]hash ok, signature not checked[/] {what} ({how}: give "
            "--public-key or --keys)",
            soft_wrap=True,
        )
    else:
        signed = f" (signed by {result.keyid})" if result.keyid else ""
        console.print(f"[bold green]valid[/] {what}{signed}", soft_wrap=True)
    for match in matches or []:
        colour = "green" if match.status == "match" else "red"
        detail = f" (receipt {match.expected}, now {match.found})"
        detail = "" if match.status == "match" else detail
        console.print(
            f"[{colour}]{match.status:<8}[/] {escape(match.path)}{escape(detail)}", soft_wrap=True
        )
    if matches is not None:
        counts = {s: sum(m.status == s for m in matches) for s in ("match", "changed", "missing")}
        console.print(
            f"worktree: {counts['match']} match, {counts['changed']} changed, "
            f"{counts['missing']} missing",
            soft_wrap=True,
        )


def load_json_object(result: VerifiedDocument) -> dict[str, Any]:
    value = json.loads(result.body)
    if not isinstance(value, dict):
        raise ReceiptInvalid("the document is not a JSON object")
    return value


def _read(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc}") from exc


# --- --chain --------------------------------------------------------------------------------


def _verify_chain(
    files: list[Path],
    keys: list[TrustedKey],
    operation: str | None,
    url: str | None,
    token_file: Path | None,
    as_json: bool,
) -> None:
    if operation is None:
        if len(files) != 2:
            raise ConfigError("--chain needs two envelopes (verification and promotion)")
        envelopes = [_read(file) for file in files]
    else:
        if files:
            raise ConfigError("--chain --operation fetches the envelopes: give no FILE")
        envelopes, served = _fetch_chain(server_url(url), operation, token_file)
        keys = keys or served
    if not keys:
        raise ConfigError("--chain checks signatures: give --public-key or --keys")
    first, second = (verify_document(envelope, keys) for envelope in envelopes)
    from promoter.engine.receipts.chain import check_chain

    lines = check_chain(first, second)
    if as_json:
        echo_json(
            json.dumps(
                {
                    "valid": True,
                    "chain": lines,
                    "documents": [_summary(first, None, 0), _summary(second, None, 0)],
                }
            )
        )
        return
    for line in lines:
        console.print(f"[green]✓[/] {escape(line)}", soft_wrap=True)
    console.print(
        f"[bold green]valid chain[/] verification {first.identity_sha256} and "
        f"promotion {second.identity_sha256}",
        soft_wrap=True,
    )


def _fetch_chain(
    base: str, operation: str, token_file: Path | None
) -> tuple[list[bytes], list[TrustedKey]]:
    """The promotion and verification envelopes of an operation, and the listed keys."""
    promotion = get(base, f"/v1/operations/{operation}/receipt.dsse", token_file)
    bundle_id = _predicate_field(promotion, "bundle_id")
    verification = get(base, f"/v1/bundles/{bundle_id}/verification.dsse", token_file)
    keys = trusted_from_json(get(base, "/v1/keys", None), f"{base}/v1/keys")
    return [verification, promotion], keys


def ledger_keys(url: str) -> list[TrustedKey]:
    """The ledger's key set a daemon serves (``URL`` or ``URL/v1/keys``), with host ids."""
    base = url.rstrip("/")
    base = base.removesuffix("/v1/keys")
    return trusted_from_json(get(base, "/v1/keys", None), f"{base}/v1/keys")


def _predicate_field(envelope: bytes, field: str) -> str:
    """One field of an envelope's predicate, read only to know what to fetch next."""
    try:
        payload = base64.b64decode(json.loads(envelope)["payload"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ReceiptInvalid("the server's promotion envelope is not a DSSE envelope") from exc
    from promoter.engine.receipts.statement import open_statement

    statement, _, _ = open_statement(payload)
    value = statement["predicate"].get(field)
    if not isinstance(value, str) or "/" in value:
        raise ReceiptInvalid(f"the promotion receipt has no {field}")
    return value


def get(base: str, path: str, token_file: Path | None) -> bytes:
    """The bytes a daemon answers ``GET base+path`` (with the token, except for the
    public keys); a problem it answers as the error it names."""
    import httpx

    headers: dict[str, str] = {}
    if path != "/v1/keys":  # the public keys need no token
        headers["Authorization"] = f"Bearer {read_token(token_file, base)}"
    try:
        answer = httpx.get(base.rstrip("/") + path, headers=headers, timeout=60)
    except (httpx.UnsupportedProtocol, httpx.LocalProtocolError) as exc:
        raise ConfigError(f"cannot use the server URL {base}: {exc}") from exc
    except httpx.HTTPError as exc:  # down, no answer in time, or gone mid-answer: 69
        raise ServerUnavailable(f"cannot reach the server at {base}: {exc}") from exc
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
