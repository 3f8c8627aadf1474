"""``promoter preflight BUNDLE``: would a promotion be refused now, and for which paths.

Asks the daemon (``POST /v1/bundles/{id}/preflight``, protocol: promotion#preflight) to run
authority, evidence and the read-back against the worktree as it is now, and prints one verdict per
path. It writes nothing and changes nothing; a refusal's reason is printed once, on stderr
like every refusal's, and it exits with its code's exit status.
"""

from __future__ import annotations

from typing import Annotated

import typer

from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    echo_json,
    read_token,
    server_url,
    shown_path,
)


def preflight(
    bundle_id: Annotated[str, typer.Argument(help="The verified bundle to check.")],
    fence: Annotated[
        int | None, typer.Option("--fence", help="Also check the lease fence (authority).")
    ] = None,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Check a verified bundle against the worktree now, path by path; writes nothing."""
    import json

    from rich.markup import escape

    from promoter.client.sync import PromoterClient
    from promoter.errors import error_class

    with PromoterClient(server_url(url), read_token(token_file, url), timeout=120.0) as client:
        result = client.preflight(bundle_id, fence)
    if json_output:
        echo_json(json.dumps(result))
    else:
        console.print(f"preflight [bold]{escape(bundle_id)}[/]: {result['status']}")
        checks = result["checks"]
        for name, check in (
            ("authority", checks.get("authority")),
            ("evidence", checks.get("evidence")),
        ):
            if check is not None:
                console.print(f"  check {name}: {'ok' if check['ok'] else 'failed'}")
        for item in result.get("paths") or []:
            reasons = "; ".join(item["reasons"])
            line = f"  {item['verdict']:<8} {shown_path(item['path'])}"
            console.print(line + (f"  ({escape(reasons)})" if reasons else ""))
    if result["status"] != "passed" and result["code"]:
        raise error_class(result["code"])(result["detail"] or "refused")


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight)
