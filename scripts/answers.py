"""Write ``promoter/domain/answers.py``: the daemon's answers as ``TypedDict``s.

``python -m scripts.answers [FILE]`` (part of ``make schemas``) renders one ``TypedDict``
per answer model of ``promoter.domain.views`` and ``promoter.domain.diff_views``, member
for member, and each named ``Literal`` of those modules as an alias of the same name.
What ``PromoterClient`` returns and what the engine builds as a dict (the review's diff,
a trace) are then typed as exactly what the daemon serializes, checked by mypy wherever a
key is read or written, at no cost when the program runs (the module loads ``typing``
only: the command line loads no pydantic to read an answer). A member with a default may
be left out of an answer (``NotRequired``); an enum is the ``Literal`` of its values.
A contract test fails when the committed file differs from what this writes. Not here:
the models themselves, or anything the client or the engine does with the answers.
"""

from __future__ import annotations

import enum
import json
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from promoter.domain import diff_views, views

TARGET = Path(__file__).resolve().parents[1] / "promoter" / "domain" / "answers.py"
HEADER = '''"""The daemon's answers as ``TypedDict``s: what ``PromoterClient`` returns, what the
engine builds as a dict.

Written by ``python -m scripts.answers`` from the answer models (``promoter.domain.views``,
``promoter.domain.diff_views``); do not edit by hand. A member with a default may be left
out (``NotRequired``). Importing this module loads ``typing`` only: a command reads a
typed answer, and the engine types the dicts it answers, without loading pydantic.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict
'''


def _models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    for module in (views, diff_views):
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == module.__name__
                and value not in (views.Reply, views.View)
            ):
                found.append(value)
    return found


def _aliases() -> dict[Any, str]:
    """The named ``Literal``s of the answer modules (``DiffFlag``), by their type."""
    return {
        value: name
        for module in (views, diff_views)
        for name, value in vars(module).items()
        if typing.get_origin(value) is typing.Literal
    }


def _literal(args: tuple[Any, ...]) -> str:
    return "Literal[" + ", ".join(json.dumps(a) for a in args) + "]"


def _type(annotation: Any, names: set[str]) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if annotation is Any:
        return "Any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        name = annotation.__name__
        return name if name in names else "dict[str, Any]"  # a document of the domain's
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "Literal[" + ", ".join(json.dumps(m.value) for m in annotation) + "]"
    if annotation in (str, int, bool, float):
        return str(annotation.__name__)
    if origin is typing.Annotated:
        return _type(args[0], names)
    if origin is typing.Literal:
        return _aliases().get(annotation) or _literal(args)
    if origin in (types.UnionType, typing.Union):
        return " | ".join(_type(a, names) for a in args)
    if origin is list:
        return f"list[{_type(args[0], names)}]"
    if origin is dict:
        return f"dict[{_type(args[0], names)}, {_type(args[1], names)}]"
    raise TypeError(f"no TypedDict rendering for {annotation!r}")


def render() -> str:
    """The module's text, formatted as ``ruff format`` formats the package."""
    ruff = Path(sys.executable).parent / "ruff"
    formatted = subprocess.run(
        [str(ruff), "format", "--stdin-filename", str(TARGET), "-"],
        input=_source(),
        capture_output=True,
        text=True,
        check=True,
    )
    return formatted.stdout


def _source() -> str:
    models = _models()
    names = {model.__name__ for model in models}
    aliases = sorted((name, typing.get_args(value)) for value, name in _aliases().items())
    blocks = [HEADER + "".join(f"\n{name} = {_literal(args)}" for name, args in aliases) + "\n"]
    for model in sorted(models, key=lambda m: m.__name__):
        lines = [f"class {model.__name__}(TypedDict):"]
        doc = (model.__doc__ or "").strip()
        if doc and model.__doc__ != BaseModel.__doc__:
            lines.append(f'    """{doc}"""\n')
        for name, field in model.model_fields.items():
            key = field.alias or name
            rendered = _type(field.annotation, names)
            if not field.is_required():
                rendered = f"NotRequired[{rendered}]"
            lines.append(f"    {key}: {rendered}")
        blocks.append("\n".join(lines) + "\n")
    return "\n\n".join(blocks)


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else TARGET
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
