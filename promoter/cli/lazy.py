"""Command groups whose modules are imported only when one of their commands runs.

``promoter --help`` and shell completion of the top level need each command's name and
one line of help, not its module: ``LazyCommand`` carries those two and loads the real
Typer command (from the module's ``register(app)``, building that command alone, not
the module's others; of a group run with one of its commands, that command alone) when
it is invoked, completed or asked for its own help.
``PromoterGroup`` is the top-level group that lists them after the commands defined in
``promoter.cli.main``; making its context spares the coercion of plain values
(``promoter.cli.params``).

It does not change any command: the real command parses, runs and prints its help,
whose text ``reflow`` joins into paragraphs first (``load``): a docstring's hard line
breaks are the source's, not the terminal's, which wraps each paragraph at its width.
``deferred`` (a function of a module imported on its first call) is
``promoter.cli.startup``'s, named here as before.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
from dataclasses import dataclass
from typing import Any

import typer
from typer._click.core import Command, Context  # typer's own click, which its groups use
from typer.core import TyperCommand, TyperGroup
from typer.models import CommandInfo

from promoter.cli.params import spare
from promoter.cli.startup import deferred

__all__ = [
    "ENTRIES",
    "Entry",
    "LazyCommand",
    "PromoterGroup",
    "deferred",
    "load",
    "reflow",
    "reflowed",
]


@dataclass(frozen=True)
class Entry:
    name: str
    help: str
    module: str


ENTRIES = (
    Entry(
        "status",
        "Which daemon and credential the CLI uses, its repositories, and what is wrong.",
        "promoter.cli.status_cmd",
    ),
    Entry(
        "repos",
        "The guarded repositories: list; turn the approval gate on or off (operator).",
        "promoter.cli.repos_cmd",
    ),
    Entry("grant", "Grants: what an executor may change.", "promoter.cli.orchestrate_cmd"),
    Entry("lease", "Leases: who holds a workflow stage.", "promoter.cli.orchestrate_cmd"),
    Entry("token", "Executor tokens.", "promoter.cli.orchestrate_cmd"),
    Entry(
        "preflight",
        "Check a verified bundle against the worktree now, path by path; writes nothing.",
        "promoter.cli.preflight_cmd",
    ),
    Entry(
        "promote",
        "Ask the host to promote a verified bundle into its repository's worktree.",
        "promoter.cli.orchestrate_cmd",
    ),
    Entry("bundle", "Executor side: build and submit patch bundles.", "promoter.cli.bundle_cmd"),
    Entry("receipt", "Signed receipts: verify offline, fetch.", "promoter.cli.receipt_cmd"),
    Entry("keys", "The host's receipt-signing keys.", "promoter.cli.keys_cmd"),
    Entry(
        "trace",
        "Which promotion receipts wrote each path of a commit; writes nothing.",
        "promoter.cli.trace_cmd",
    ),
    Entry(
        "trailers",
        "Print Promoted-by: trailers for what is staged; writes nothing.",
        "promoter.cli.trace_cmd",
    ),
    Entry("snapshot", "Shadow snapshots of a worktree.", "promoter.cli.snapshot_cmd"),
    Entry("ops", "Operations: inspect, recover, reconcile, roll back.", "promoter.cli.ops_cmd"),
    Entry(
        "hosts",
        "The hosts of the ledger: list, fence a dead one off, admit.",
        "promoter.cli.hosts_cmd",
    ),
    Entry(
        "review",
        "List the promotions awaiting approval, each with its bundle's diff (operator).",
        "promoter.cli.review_cmd",
    ),
    Entry(
        "approve",
        "Approve a held promotion (or a part: --only, --except, --hunks) (operator).",
        "promoter.cli.review_cmd",
    ),
    Entry(
        "reject",
        "Reject a held promotion: it is refused and nothing is written (operator).",
        "promoter.cli.review_cmd",
    ),
    Entry(
        "reopen",
        "Reopen a rejected promotion: it awaits a decision again (operator).",
        "promoter.cli.review_cmd",
    ),
    Entry(
        "merge",
        "Merge a drifted promotion's files into a new bundle held for approval (operator).",
        "promoter.cli.merge_cmd",
    ),
    Entry(
        "credentials",
        "Named operator credentials: the approver an approval records.",
        "promoter.cli.credentials_cmd",
    ),
    Entry(
        "run",
        "Run CMD in an isolated clone of a guarded repository and promote what it changed.",
        "promoter.cli.run_cmd",
    ),
    Entry(
        "mcp",
        "Serve the agent tools over stdio (Model Context Protocol); executor token only.",
        "promoter.cli.mcp_cmd",
    ),
)
_BY_NAME = {entry.name: entry for entry in ENTRIES}


def load(entry: Entry, sub: str | None = None) -> Command:
    """The real command: import the module and take ``entry.name`` from its ``register``;
    of a group, with ``sub`` naming one of its commands, that command alone."""
    module = importlib.import_module(entry.module)
    scratch = typer.Typer()
    scratch.command("_")(lambda: None)  # a group even when the module adds one command
    module.register(scratch)
    # only the command asked for (and the placeholder) is built: not the module's others
    scratch.registered_commands = [
        info
        for info in scratch.registered_commands
        if _command_name(info) in (entry.name, "_", None)
    ]
    scratch.registered_groups = [
        info for info in scratch.registered_groups if info.name in (entry.name, None)
    ]
    for info in scratch.registered_groups if sub is not None else []:
        inner = info.typer_instance  # perhaps the module's own: a copy is narrowed
        chosen = [] if inner is None else inner.registered_commands
        chosen = [command for command in chosen if _command_name(command) == sub]
        if inner is not None and chosen:  # the group's other commands are not built
            info.typer_instance = narrowed = copy.copy(inner)
            narrowed.registered_commands, narrowed.registered_groups = chosen, []
    group = typer.main.get_command(scratch)
    assert isinstance(group, TyperGroup)
    return reflowed(group.commands[entry.name])


# a line that starts a list item: "- ", "* ", "• ", "1. ", "1) "
_ITEM = re.compile(r"(?:[-*\u2022]|\d+[.)])\s")


def reflow(text: str | None) -> str | None:
    """Help text whose paragraphs (blank-line separated) are each one line, for the
    terminal to wrap at its width. Kept as written: a paragraph that starts with ``\b``
    (click's verbatim mark), one whose every line is a ``promoter`` command line (a
    synopsis), a list item's start (``- ``, ``* ``, ``1. ``, ...; an indented line after
    one continues it), an indented line outside a list, and what follows ``\f``."""
    if not text or "\n" not in text:
        return text
    body, cut, rest = text.partition("\f")
    joined = "\n\n".join(map(_paragraph, inspect.cleandoc(body).split("\n\n")))
    return joined + ("\n" + cut + rest if cut else "")


def _paragraph(paragraph: str) -> str:
    lines = paragraph.split("\n")
    if paragraph.startswith("\b") or all(line.startswith("promoter ") for line in lines):
        return paragraph
    kept: list[str] = []
    in_item = False
    for line in lines:
        item = _ITEM.match(line) is not None
        indented = line[:1].isspace()
        if not kept or item or (indented and not in_item):
            kept.append(line)
            in_item = item or (in_item and indented)
        else:
            kept[-1] += " " + line.strip()
    return "\n".join(kept)


def reflowed(command: Command) -> Command:
    """``command`` (and each of its own commands), its help and its options' reflowed."""
    command.help = reflow(command.help)
    for param in command.params:
        if isinstance(getattr(param, "help", None), str):
            param.help = reflow(param.help)  # type: ignore[attr-defined]
    for inner in getattr(command, "commands", {}).values():
        reflowed(inner)
    return command


def _command_name(info: CommandInfo) -> str | None:
    """The name typer gives a registered command (its own, else its function's), None
    when it cannot be told here."""
    if info.name:
        return info.name
    callback = info.callback
    return None if callback is None else typer.main.get_command_name(callback.__name__)


class LazyCommand(TyperCommand):
    def __init__(self, entry: Entry) -> None:
        super().__init__(entry.name, help=entry.help, short_help=entry.help, add_help_option=False)
        self.entry = entry
        self._real: Command | None = None

    def real(self, sub: str | None = None) -> Command:
        """The real command (kept); with ``sub``, of a group, one built for that command
        of it alone (not kept)."""
        if self._real is not None:
            return self._real
        if sub is not None:
            return load(self.entry, sub)
        self._real = load(self.entry)
        return self._real

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: Context | None = None,
        **extra: Any,
    ) -> Context:
        # a group's command is named first (a group's own option first: everything built)
        sub = args[0] if args and not args[0].startswith("-") else None
        return self.real(sub).make_context(info_name, args, parent=parent, **extra)

    def get_short_help_str(self, limit: int = 150) -> str:
        return self.entry.help


class PromoterGroup(TyperGroup):
    """The top level: the commands defined in ``main`` first, then the lazy ones."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: Context | None = None,
        **extra: Any,
    ) -> Context:
        spare()  # no pydantic adapter for a value typer returns as it is
        return super().make_context(info_name, args, parent=parent, **extra)

    def list_commands(self, ctx: Context) -> list[str]:
        own = super().list_commands(ctx)
        return own + [entry.name for entry in ENTRIES if entry.name not in own]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in _BY_NAME:
            found = LazyCommand(_BY_NAME[cmd_name])
            self.commands[cmd_name] = found
        return found
