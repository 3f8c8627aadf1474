"""The generated parts of the documentation site, as Markdown, filled in at build time.

A page asks for a generated part with a marker line of its own, ``<!-- generated: NAME -->``
(an HTML comment: a reader of the Markdown file sees nothing there), and ``expand``
replaces it while Sphinx reads the page (``docs/conf.py`` calls it). The parts:

- ``openapi``: the HTTP API reference from ``schemas/openapi.json`` (what ``make schemas``
  writes): every endpoint with its roles, parameters, request body, answers and problem
  codes, then every model with its fields. Plain Markdown tables, no script to read it.
- ``states``: one state diagram per operation kind and the table of moves, both from
  ``TRANSITIONS`` in ``promoter.domain.status``, so the picture cannot drift from what the
  journal allows.
- ``layers``: the floors of the package (domain, fs, git, store, engine, api, executor,
  cli, and the client beside them) as a graph of who imports whom, with a count of the
  importing modules on each edge, read from the package's source with ``ast``; the same
  as a table.

The diagrams are Graphviz ``dot`` sources in a ``{graphviz}`` block: Sphinx renders them
to SVG files when it builds (Debian's ``graphviz``), so reading them needs no script.
- ``decisions-nav``: the navigation entry of the decision records (their index, and every
  record under it).

Deliberately not here: Sphinx itself (``docs/conf.py`` is the glue), the pages' own text,
and any network access: every input is a file of this repository.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from promoter.domain.status import FINAL, TRANSITIONS, OperationKind

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)
FLOORS = ("domain", "fs", "git", "store", "engine", "adapters", "api", "executor", "cli", "client")
SHARED = "errors, config, faults"  # promoter's top-level modules: every floor may use them
TAG_ORDER = ("public", "executor", "orchestrator", "operator")
METHODS = ("get", "put", "post", "patch", "delete")


def excluded(docs: Path) -> list[str]:
    """The patterns Sphinx must not read as pages under ``docs``."""
    return ["_build", "console"]


def expand(docname: str, text: str, root: Path) -> str:
    """``text`` of page ``docname`` with each marker replaced by its generated Markdown."""
    makers: dict[str, Callable[[], str]] = {
        "openapi": lambda: openapi_markdown(_load(root / "schemas" / "openapi.json")),
        "states": states_markdown,
        "layers": lambda: layers_markdown(root / "promoter"),
        "decisions-nav": lambda: decisions_nav(root / "docs"),
    }

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in makers:
            raise ValueError(f"{docname}: no generated part is named {name!r}")
        return makers[name]()

    text = MARKER.sub(replace, text)
    if not (root / "docs" / "decisions" / "index.md").is_file():  # until the records have one
        text = text.replace("decisions/index.md)", "decisions.md)")
    if docname == "decisions/index":
        text += "\n\n```{toctree}\n:hidden:\n:glob:\n\n*\n```\n"
    return text


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def decisions_nav(docs: Path) -> str:
    """The toctree of the decisions: their index (whose own toctree lists every record)."""
    return "```{toctree}\n:caption: Decisions\n:hidden:\n:maxdepth: 1\n\ndecisions/index\n```"


# --- the HTTP API, from the OpenAPI document -------------------------------------------


def _cell(text: object) -> str:
    """One table cell: a single line, no bar that would split it, no tag a browser eats."""
    flat = " ".join(str(text).split())
    return flat.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _prose(text: str) -> str:
    return text.replace("<", "&lt;").replace(">", "&gt;").strip()


def _model_anchor(name: str) -> str:
    return f"#model-{name.lower()}"


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def schema_type(schema: Mapping[str, Any]) -> str:
    """A schema as a short Markdown phrase: a model link, ``array of X``, ``a or b``, ..."""
    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        return f"[{name}]({_model_anchor(name)})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(schema_type(part) for part in schema[key])
    if "allOf" in schema:
        return " and ".join(schema_type(part) for part in schema["allOf"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return "array of " + schema_type(schema.get("items", {}))
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return "object of " + schema_type(schema["additionalProperties"])
    if isinstance(kind, list):
        return " or ".join(f"`{part}`" for part in kind)
    if kind is None:
        return "any"
    shown = f"`{kind}`"
    if "format" in schema:
        shown += f" ({schema['format']})"
    return shown


def _response_body(response: Mapping[str, Any]) -> str:
    shown = []
    for media_type, media in sorted(response.get("content", {}).items()):
        schema = media.get("schema")
        if media_type == "application/problem+json":
            shown.append("[Problem](#model-problem)")
        elif schema:
            shown.append(f"{schema_type(schema)} (`{media_type}`)")
        else:
            shown.append(f"`{media_type}`")
    return "; ".join(shown) or "no body"


def _endpoint(method: str, path: str, op: Mapping[str, Any]) -> list[str]:
    lines = [f"#### {method.upper()} `{path}`", ""]
    if op.get("summary"):
        lines += [f"**{_prose(op['summary'])}.**", ""]
    if op.get("description"):
        lines += [_prose(op["description"]), ""]
    if "Role" not in op.get("description", ""):  # the description names the roles
        roles = sorted({r for need in op.get("security", []) for r in need.get("bearer", [])})
        lines += ["Roles: " + (", ".join(f"`{r}`" for r in roles) or "none (no token)") + ".", ""]
    parameters = op.get("parameters", [])
    if parameters:
        lines += ["| parameter | in | type | required | meaning |", "|---|---|---|---|---|"]
        for param in parameters:
            lines.append(
                f"| `{param['name']}` | {param['in']} | {schema_type(param.get('schema', {}))} "
                f"| {'yes' if param.get('required') else 'no'} "
                f"| {_cell(param.get('description', ''))} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        shown = [
            f"{schema_type(media.get('schema', {}))} (`{media_type}`)"
            for media_type, media in sorted(body.get("content", {}).items())
        ]
        lines += ["Request body: " + "; ".join(shown) + ".", ""]
    lines += ["| answer | meaning | body |", "|---|---|---|"]
    for status, response in sorted(op.get("responses", {}).items()):
        lines.append(
            f"| {status} | {_cell(response.get('description', ''))} "
            f"| {_cell(_response_body(response))} |"
        )
    return [*lines, ""]


def _model(name: str, schema: Mapping[str, Any]) -> list[str]:
    lines = [f"({_model_anchor(name)[1:]})=", f"### {name}", ""]
    if schema.get("description"):
        lines += [_prose(schema["description"]), ""]
    properties: Mapping[str, Any] = schema.get("properties", {})
    if not properties:
        return [*lines, "No fields.", ""]
    required = set(schema.get("required", []))
    lines += ["| field | type | required | meaning |", "|---|---|---|---|"]
    for field, spec in properties.items():
        meaning = spec.get("description", "")
        if "default" in spec and field not in required:
            meaning = f"{meaning} (default `{json.dumps(spec['default'])}`)".strip()
        lines.append(
            f"| `{field}` | {_cell(schema_type(spec))} | {'yes' if field in required else 'no'} "
            f"| {_cell(meaning)} |"
        )
    return [*lines, ""]


def openapi_markdown(doc: Mapping[str, Any]) -> str:
    """The endpoints of ``doc`` grouped by their first role, then every model."""
    operations: dict[str, list[tuple[str, str, Mapping[str, Any]]]] = {}
    for path, item in sorted(doc.get("paths", {}).items()):
        for method in METHODS:
            if method in item:
                tag = (item[method].get("tags") or ["public"])[0]
                operations.setdefault(tag, []).append((method, path, item[method]))
    tags = {tag["name"]: tag.get("description", "") for tag in doc.get("tags", [])}
    order = [t for t in TAG_ORDER if t in operations] + sorted(set(operations) - set(TAG_ORDER))
    count = sum(len(ops) for ops in operations.values())
    info = doc.get("info", {})
    lines = [
        "## Endpoints",
        "",
        f"{count} endpoints of OpenAPI {doc.get('openapi', '?')} document "
        f"`{info.get('title', '')}` {info.get('version', '')}, grouped by the first role "
        "each admits; every problem body is [Problem](#model-problem) with the `code` shown "
        "(their meanings: [error codes](errors.md)).",
        "",
    ]
    for tag in order:
        lines += [f"### {tag.capitalize()} endpoints", ""]
        if tags.get(tag):
            lines += [_prose(tags[tag]), ""]
        for method, path, op in operations[tag]:
            lines += _endpoint(method, path, op)
    lines += ["## Models", ""]
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        lines += _model(name, schema)
    return "\n".join(lines).rstrip() + "\n"


# --- the operation states, from promoter.domain.status ---------------------------------


def _state_id(status: str | None) -> str:
    return "new" if status is None else str(status)


def states_markdown(
    transitions: Mapping[OperationKind, Mapping[Any, Iterable[Any]]] = TRANSITIONS,
) -> str:
    """A state diagram and a table of moves per operation kind."""
    lines: list[str] = []
    for kind, moves in transitions.items():
        sources = sorted(moves, key=lambda s: "" if s is None else str(s))
        seen = sorted(
            {str(s) for s in sources if s is not None} | {str(t) for s in sources for t in moves[s]}
        )
        lines += [f"#### {str(kind).capitalize()}", "", "```{graphviz}", f"digraph {kind} {{"]
        lines += [
            "    node [shape=box, style=rounded, fontname=sans, fontsize=11];",
            "    edge [arrowsize=0.7];",
            '    new [shape=point, width=0.15, label=""];',
        ]
        for status in seen:
            final = ", peripheries=2" if status in FINAL else ""
            lines.append(f'    {status} [label="{status}"{final}];')
        for source in sources:
            for target in sorted(str(t) for t in moves[source]):
                lines.append(f"    {_state_id(source)} -> {target};")
        lines += ["}", "```", "", "| from | may move to |", "|---|---|"]
        for source in sources:
            shown = "(new)" if source is None else f"`{source}`"
            targets = ", ".join(f"`{t}`" for t in sorted(str(t) for t in moves[source]))
            lines.append(f"| {shown} | {targets} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# --- the layers, from the package's imports --------------------------------------------


def _module_name(package: Path, path: Path) -> str:
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(module: str, is_package: bool, tree: ast.AST) -> Iterable[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                yield ".".join([*base, node.module] if node.module else base)
            elif node.module:
                yield node.module


def floor_of(module: str) -> str | None:
    """The floor a ``promoter.*`` module lives on (``None`` outside promoter)."""
    parts = module.split(".")
    if parts[0] != "promoter":
        return None
    if len(parts) > 1 and parts[1] in FLOORS:
        return parts[1]
    return SHARED


def floor_imports(package: Path) -> Counter[tuple[str, str]]:
    """(importing floor, imported floor) -> how many modules of the first import the second."""
    edges: Counter[tuple[str, str]] = Counter()
    for path in sorted(package.rglob("*.py")):
        module = _module_name(package, path)
        source = floor_of(module)
        if source is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = {floor_of(name) for name in _imported(module, path.name == "__init__.py", tree)}
        for target in sorted(t for t in targets if t is not None and t != source):
            edges[(source, target)] += 1
    return edges


def layers_markdown(package: Path) -> str:
    """The floors as a graph (an arrow: "imports", the importer above) and a table.

    The graph leaves out the shared top-level modules, which every floor uses; the table
    has every edge.
    """
    edges = floor_imports(package)
    lines = [
        "```{graphviz}",
        "digraph layers {",
        "    node [shape=box, style=rounded, fontname=sans, fontsize=11];",
        "    edge [arrowsize=0.7, fontname=sans, fontsize=9];",
    ]
    lines += [f"    {name};" for name in FLOORS]
    for (source, target), count in sorted(edges.items()):
        if target != SHARED:
            lines.append(f'    {source} -> {target} [label="{count}"];')
    lines += ["}", "```", "", "| floor | imports (modules that do) |", "|---|---|"]
    for name in [*FLOORS, SHARED]:
        used = [(t, c) for (s, t), c in sorted(edges.items()) if s == name]
        shown = ", ".join(f"{t} ({c})" for t, c in used) or "nothing of promoter's"
        lines.append(f"| {name} | {shown} |")
    return "\n".join(lines) + "\n"
