"""``promoter status``: which daemon the CLI reaches, with which credential, and what is wrong.

It resolves the daemon, credential and state directory exactly as every client command
does (``promoter.cli.userconfig.resolve``), says where each came from, asks the daemon
who the credential is (``GET /v1/whoami``: its role and name, never the token) and which
repositories it guards with their approval setting, and says which of them the current
directory is the worktree of. Anything wrong (nothing recorded, a configuration others can
read, the daemon not answering, something else answering at its URL, the credential
refused) is printed as a ``problem:`` line with the next command, and the command exits
with that problem's code.

Deliberately not here: changing anything. It only reads.
"""

from __future__ import annotations

from pathlib import Path

import typer

from promoter.cli import userconfig
from promoter.cli.common import TokenFileOpt, UrlOpt, console, escape
from promoter.client.sync import PromoterClient
from promoter.client.wire import Backoff
from promoter.errors import PromoterError
from promoter.git.runner import run_git

__all__ = ["register", "worktree_here"]

ONCE = Backoff(attempts=1)


def _say(text: str) -> None:
    console.print(text, soft_wrap=True, highlight=False)


def told(problem: PromoterError) -> typer.Exit:
    """The exit with ``problem``'s code, once its ``problem:`` line is printed: it is not
    printed again as an error."""
    return typer.Exit(problem.exit_code)


def worktree_here(cwd: Path | None = None) -> str | None:
    """The top level of the git worktree ``cwd`` is in (symlinks resolved), or None."""
    where = Path.cwd() if cwd is None else cwd
    result = run_git(["rev-parse", "--show-toplevel"], cwd=where, check=False)
    if result.returncode != 0:
        return None
    top = result.stdout.decode("utf-8", "surrogateescape").rstrip("\n")
    return str(Path(top).resolve()) if top else None


def status(url: UrlOpt = None, token_file: TokenFileOpt = None) -> None:
    """Which daemon and credential the CLI uses, its repositories, and what is wrong."""
    try:
        target = userconfig.resolve(url, token_file)
    except PromoterError as exc:
        _say(f"problem: {escape(exc.detail)}")
        raise told(exc) from None
    _say(f"daemon      {escape(target.url)}  (from {escape(target.url_from)})")
    _say(f"state       {escape(str(target.state_dir))}  (from {escape(target.state_from)})")
    with PromoterClient(target.url, target.token, timeout=10.0, backoff=ONCE) as client:
        try:  # first: a daemon that does not answer is the problem, whatever the credential
            client.healthz()
        except PromoterError as exc:
            if type(exc) is PromoterError and "server_code" not in exc.context:
                _say(  # an answer that is no promoter's: a web server, another service
                    f"problem: something answered at {escape(target.url)}, but it is not a "
                    f"promoter daemon (HTTP {exc.context.get('http_status', '?')} to GET "
                    "/healthz); check --url or PROMOTER_URL"
                )
                raise told(exc) from None
            why = str(exc.context.get("reason") or exc.detail)  # without the status hint
            _say(
                f"problem: the daemon does not answer at {escape(target.url)}: {escape(why)}; "
                "start it with promoter serve (or make serve)"
            )
            raise told(exc) from None
        if target.token is None:
            problem = userconfig.no_token(target)
            _say(f"credential  none\nproblem: {escape(problem.detail)}")
            raise told(problem)
        try:
            caller = client.whoami()
        except PromoterError as exc:
            _say(
                f"credential  from {escape(target.token_from)}\n"
                f"problem: the daemon refuses this credential {escape(f'[{exc.code}]')}: "
                f"{escape(exc.detail)}; run promoter serve again to record its credential, "
                "or pass --token-file FILE"
            )
            raise told(exc) from None
        _say(
            f"credential  {escape(str(caller['name']))} (role {caller['role']}), "
            f"from {escape(target.token_from)}"
        )
        if caller["role"] == "executor":
            _say("an executor token sees no repositories")
            return
        here = worktree_here()
        repositories = client.repositories()
        _say("repositories" if repositories else "repositories: none guarded")
        for repository in repositories:
            setting = client.repository_approval(str(repository["name"]))
            head = str(repository.get("head") or "")[:12] or "no commit"
            mark = "  (here)" if here == str(Path(str(repository["worktree"])).resolve()) else ""
            _say(
                f"  {escape(str(repository['name']))}  {escape(str(repository['worktree']))}  "
                f"{escape(str(repository.get('branch') or 'detached'))} at {head}  "
                f"approval {setting['approval']} ({setting['source']}){mark}"
            )


def register(app: typer.Typer) -> None:
    app.command("status")(status)
