"""Parameter values typer need not coerce, returned without building a coercion for them.

typer (from 0.2x, with its own click) coerces every parameter's value through a pydantic
``TypeAdapter`` built on first use: the ``None`` of an option not given and a default of
the annotation's own type, and a string typed for a ``str`` parameter, which it answers
as it came, too. Importing pydantic and building an adapter per option
cost a command like ``promoter run --list`` (about twenty options) some 50 ms of CPU,
more than the command's work. After ``spare()`` each parameter gets a coercion that
returns those values exactly as typer's returns them (``None``, or ``()`` for a
repeatable option; the default itself; the same string), a flag's ``bool``, a list of
the strings typed (``list[str]``), a ``Path`` and a list of them (through typer's own
checks of a path), and hands every other value (a number, a choice) to typer's own
coercion, built then. A parameter with its own parser keeps typer's coercion for every value.

It changes no command's parsing, help or errors, and does nothing with a typer whose
parameters coerce otherwise (the attributes it relies on are checked first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from typer._click.core import Context, ParameterSource
    from typer._click.exceptions import BadParameter
    from typer._coercion import build_runtime_param
    from typer._param_types import coerce_cli_path
    from typer.core import _TyperParameter as Coerced
except ImportError:  # another typer: its own coercion stays
    Coerced = None  # type: ignore[assignment,misc]

_PLAIN = (str, int, float)
_STRINGS = list[str]
_PATHS = list[Path]


class _Spared:
    """typer's ``RuntimeParam.coerce`` for ``None`` and plain defaults; typer's own else."""

    def __init__(self, descriptor: Any) -> None:
        self._descriptor = descriptor
        self._real: Any = None

    def coerce(self, value: Any, param: Any, ctx: Context) -> Any:
        if value is None:  # typer's coerce answers these before it coerces anything
            return () if (param.multiple or param.nargs == -1) else None
        single = not (param.multiple or param.nargs == -1)
        if type(value) is str and self._descriptor.annotation is str and single:
            return value  # typer's str coercion answers this very object
        if (
            type(value) in _PLAIN
            and type(value) is self._descriptor.annotation
            and ctx.get_parameter_source(param.name) is ParameterSource.DEFAULT
        ):
            return value  # the function's own default, of the type it declares
        annotation = self._descriptor.annotation
        if type(value) is bool and annotation is bool and single:
            return value  # a flag: typer's bool coercion answers this very object
        strings = type(value) is tuple and all(type(item) is str for item in value)
        if strings and annotation == _STRINGS and not single:
            return list(value)  # typer's list of its str coercion of each
        if type(value) is str and annotation is Path and single:
            path = self._path(value, param, ctx)
            if path is not None:
                return path
        typed = type(value) in (tuple, list) and all(type(item) is str for item in value)
        if typed and annotation == _PATHS and not single:
            paths = [self._path(item, param, ctx) for item in value]
            if all(path is not None for path in paths):
                return paths  # typer's list of its Path coercion of each
        if self._real is None:
            self._real = build_runtime_param(self._descriptor)
        return self._real.coerce(value, param=param, ctx=ctx)

    def _path(self, value: str, param: Any, ctx: Context) -> Any:
        """typer's own checks of a path, given the ``Path`` its adapter makes of ``value``
        (``None`` on a refusal: typer's coercion then refuses in its own words)."""
        info = self._descriptor.parameter_info
        if info.path_type not in (None, Path) or self._descriptor.file_annotation is not None:
            return None
        try:
            return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
        except BadParameter:
            return None


def spare() -> None:
    """From now on, every typer parameter without a parser of its own starts with the
    cheap coercion (the help options typer makes per command too); once per process."""
    if Coerced is None or "_runtime_param" not in getattr(Coerced, "__annotations__", {}):
        return  # not the typer this was written against
    if getattr(Coerced.get_runtime_param, "spared", False):
        return

    original = Coerced.get_runtime_param

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None and self.type_descriptor.parameter_info.parser is None:
            self._runtime_param = _Spared(self.type_descriptor)
        return original(self)

    get_runtime_param.spared = True  # type: ignore[attr-defined]
    Coerced.get_runtime_param = get_runtime_param  # type: ignore[method-assign]
