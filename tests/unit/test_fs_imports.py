"""The fs modules import one another one way: no import circle among ``promoter/fs``."""

from __future__ import annotations

import ast
from pathlib import Path

FS = Path(__file__).resolve().parents[2] / "promoter" / "fs"


def _fs_imports(path: Path) -> set[str]:
    """The fs modules ``path`` imports (``from promoter.fs.X import``, ``from promoter.fs
    import X``), type-only imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.module is None:
            continue
        if node.module.startswith("promoter.fs."):
            found.add(node.module.split(".")[2])
        elif node.module == "promoter.fs":
            found.update(alias.name for alias in node.names if (FS / f"{alias.name}.py").exists())
    return found - {path.stem}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph``, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == 1:
                return [*path[path.index(imported) :], imported]
            if imported not in state and (found := visit(imported)) is not None:
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)) is not None:
            return found
    return None


def test_the_fs_modules_import_one_another_one_way() -> None:
    graph = {path.stem: _fs_imports(path) for path in FS.glob("*.py")}
    assert _cycle(graph) is None


def test_a_circle_is_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
