"""Plain record classes made as ``dataclasses`` makes them, at a fraction of the cost.

``@record`` (with ``frozen``, ``slots``) and ``field`` (``default``, ``default_factory``,
``repr``, ``compare``) give a class what ``@dataclass`` gives it for those options: an
``__init__`` taking the annotated fields in order, ``__repr__``, ``__eq__`` over the
compared fields (``NotImplemented`` for another class), ``__hash__`` for a frozen class
and ``None`` otherwise (unless the class wrote its own), ``__match_args__``, a frozen
class's ``__setattr__`` and ``__delattr__`` refusing with ``FrozenInstance`` (an
``AttributeError``), ``__slots__`` and pickling for a slotted one. ``replace`` and
``as_dict`` are ``dataclasses.replace`` and ``asdict`` for them.

Why it exists: Python 3.11's ``dataclasses`` compiles each generated method on its own
and imports ``inspect`` (with ``ast``, ``dis`` and ``tokenize``); the records that a
``promoter run`` loads cost it about a tenth of its command line's processor time. Here
a class's ``__init__`` is its one compilation (the fields as its parameters), its other
methods are functions over its field names that compile nothing, and nothing else is
imported (docs/decisions/records-of-one-compilation.md).

What it deliberately does not do: inheritance between records, ``ClassVar``/``InitVar``
fields, ``__post_init__``, ordering, keyword-only fields, ``dataclasses.fields``: a
class that needs them stays a ``dataclass``. A record's class whose base defines
annotations is refused at import, and so is one that defines ``__post_init__`` (it would
never be called) and a list, dict or set default (every instance would share it), as
``dataclass`` refuses one.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["FrozenInstance", "as_dict", "field", "record", "replace"]

_T = TypeVar("_T")
_FIELDS = "__record_fields__"
_MISSING: Any = object()


class FrozenInstance(AttributeError):
    """An assignment to a field of a frozen record."""


class _Field:
    __slots__ = ("compare", "default", "default_factory", "name", "repr")

    def __init__(
        self,
        default: Any,
        default_factory: Callable[[], Any] | None,
        repr: bool,
        compare: bool,
    ) -> None:
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.repr = repr
        self.compare = compare


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] | None = None,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """A field's default, its factory, and whether it is shown and compared."""
    if default is not _MISSING and default_factory is not None:
        raise ValueError("a field has a default or a factory, not both")
    return _Field(default, default_factory, repr, compare)


@overload
def record(cls: type[_T], /) -> type[_T]: ...


@overload
def record(*, frozen: bool = False, slots: bool = False) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(field,))
def record(cls: type[_T] | None = None, /, *, frozen: bool = False, slots: bool = False) -> Any:
    """The class made a record (see the module's docstring)."""

    def wrap(cls: type[_T]) -> type[_T]:
        return _make(cls, frozen, slots)

    return wrap if cls is None else wrap(cls)


def _make(cls: type[_T], frozen: bool, slots: bool) -> type[_T]:
    for base in cls.__mro__[1:-1]:
        if base.__dict__.get("__annotations__") or hasattr(base, _FIELDS):
            raise TypeError(f"{cls.__qualname__}: a record inherits no fields")
    if "__post_init__" in cls.__dict__:  # never called here: its checks would be skipped
        raise TypeError(f"{cls.__qualname__}: a record has no __post_init__")
    own = cls.__dict__
    if frozen and ("__setattr__" in own or "__delattr__" in own):  # as ``dataclass`` refuses
        raise TypeError(f"{cls.__qualname__}: a frozen record sets and deletes as frozen")
    # a hash the class wrote stays (not the ``None`` Python gives a class that defines __eq__)
    own_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    fields: list[_Field] = []
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if "ClassVar" in str(annotation) or "InitVar" in str(annotation):
            raise TypeError(f"{cls.__qualname__}.{name}: not a record's field")
        value = cls.__dict__.get(name, _MISSING)
        spec = value if isinstance(value, _Field) else _Field(value, None, True, True)
        if isinstance(spec.default, list | dict | set):  # shared by every instance
            raise ValueError(f"{cls.__qualname__}.{name}: a mutable default; use a factory")
        spec.name = name
        fields.append(spec)
        if isinstance(value, _Field):
            if value.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, value.default)
    seen_default = False
    for spec in fields:
        has_default = spec.default is not _MISSING or spec.default_factory is not None
        if seen_default and not has_default:
            raise TypeError(f"{cls.__qualname__}.{spec.name}: no default after one with")
        seen_default = seen_default or has_default
    if slots:
        cls = _slotted(cls, fields)
    names = tuple(spec.name for spec in fields)
    scope: dict[str, Any] = {"_MISSING": _MISSING, "_object": object}
    exec(_init_source(fields, frozen, scope), scope)  # noqa: S102 (source made here from the class's own names)
    _attach(cls, "__init__", scope["__init__"])
    methods = _methods(cls, fields, frozen)
    for method in ("__repr__", "__eq__"):
        _attach(cls, method, methods[method])
    if frozen:
        _attach(cls, "__setattr__", methods["__setattr__"])
        _attach(cls, "__delattr__", methods["__delattr__"])
        if not own_hash:
            _attach(cls, "__hash__", methods["__hash__"])
    elif not own_hash:
        cls.__hash__ = None  # type: ignore[assignment]  # eq without frozen: unhashable
    setattr(cls, "__match_args__", names)  # noqa: B010 (a name mypy holds read-only)
    setattr(cls, _FIELDS, tuple(fields))
    return cls


def _attach(cls: type, name: str, function: Any) -> None:
    if name in cls.__dict__ and name != "__hash__":
        return  # the class's own method stays, as ``dataclass`` leaves it
    function.__name__ = name
    function.__qualname__ = f"{cls.__qualname__}.{name}"
    function.__module__ = cls.__module__
    setattr(cls, name, function)


def _init_source(fields: list[_Field], frozen: bool, scope: dict[str, Any]) -> str:
    """``__init__``'s source: the fields as its parameters, in order (the one method
    compiled, so that a record is made as fast as a dataclass and takes the same
    arguments)."""
    params, body = ["self"], []
    for n, spec in enumerate(fields):
        name = spec.name
        if spec.default_factory is not None:
            scope[f"_factory_{n}"] = spec.default_factory
            params.append(f"{name}=_MISSING")
            value = f"_factory_{n}() if {name} is _MISSING else {name}"
        elif spec.default is not _MISSING:
            scope[f"_default_{n}"] = spec.default
            params.append(f"{name}=_default_{n}")
            value = name
        else:
            params.append(name)
            value = name
        if frozen:
            body.append(f"    _object.__setattr__(self, {name!r}, {value})")
        else:
            body.append(f"    self.{name} = {value}")
    return "\n".join([f"def __init__({', '.join(params)}):", *(body or ["    pass"])])


def _methods(cls: type, fields: list[_Field], frozen: bool) -> dict[str, Any]:
    """The other methods, the same functions for every record over its field names: none
    is compiled (compiling them took most of a record's making)."""
    shown = tuple(s.name for s in fields if s.repr)
    compared = tuple(s.name for s in fields if s.compare)
    key = _key(compared)

    def _repr(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{type(self).__qualname__}({inner})"

    def _eq(self: Any, other: object) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return key(self) == key(other)

    methods: dict[str, Any] = {"__repr__": _repr, "__eq__": _eq}
    if not frozen:
        return methods
    names = frozenset(s.name for s in fields)
    owner: Any = cls  # the class these methods are for (``super``'s first argument)

    def _hash(self: Any) -> int:
        return hash(key(self))

    def _setattr(self: Any, name: str, value: Any) -> None:
        if type(self) is owner or name in names:
            raise FrozenInstance(f"cannot assign to field {name!r}")
        super(owner, self).__setattr__(name, value)

    def _delattr(self: Any, name: str) -> None:
        if type(self) is owner or name in names:
            raise FrozenInstance(f"cannot delete field {name!r}")
        super(owner, self).__delattr__(name)

    methods.update(__hash__=_hash, __setattr__=_setattr, __delattr__=_delattr)
    return methods


def _key(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of a record's compared fields, in order (``attrgetter``'s for two or more)."""
    if len(names) >= 2:
        return attrgetter(*names)
    if names:
        one = names[0]
        return lambda obj: (getattr(obj, one),)
    return lambda obj: ()


def _slotted(cls: type[_T], fields: list[_Field]) -> type[_T]:
    """``cls`` made again with ``__slots__`` of its fields (as ``dataclass(slots=True)``)."""
    namespace = dict(cls.__dict__)
    names = tuple(spec.name for spec in fields)
    namespace["__slots__"] = names
    for name in names:
        namespace.pop(name, None)
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    metaclass: Any = type(cls)
    made: Any = metaclass(cls.__name__, cls.__bases__, namespace)
    made.__qualname__ = cls.__qualname__
    made.__getstate__ = _getstate
    made.__setstate__ = _setstate
    slotted: type[_T] = made
    return slotted


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, spec.name) for spec in getattr(self, _FIELDS)]


def _setstate(self: Any, state: list[Any]) -> None:
    for spec, value in zip(getattr(self, _FIELDS), state, strict=True):
        object.__setattr__(self, spec.name, value)


def replace(obj: _T, /, **changes: Any) -> _T:
    """A copy of the record ``obj`` with ``changes`` (``dataclasses.replace``)."""
    for spec in getattr(obj, _FIELDS):
        changes.setdefault(spec.name, getattr(obj, spec.name))
    return type(obj)(**changes)


def as_dict(obj: Any) -> Any:
    """The record ``obj`` as plain dicts and lists, records within it too
    (``dataclasses.asdict`` for records holding JSON values)."""
    fields = getattr(type(obj), _FIELDS, None)
    if fields is not None:
        return {spec.name: as_dict(getattr(obj, spec.name)) for spec in fields}
    if isinstance(obj, list):
        return [as_dict(value) for value in obj]
    if isinstance(obj, tuple):  # a named tuple made from its fields, as ``asdict`` does
        values = [as_dict(value) for value in obj]
        return type(obj)(*values) if hasattr(obj, "_fields") else type(obj)(values)
    if isinstance(obj, dict):
        return {as_dict(key): as_dict(value) for key, value in obj.items()}
    return obj
