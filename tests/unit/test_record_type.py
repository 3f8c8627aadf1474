"""``promoter.domain.record_type`` makes classes that behave as ``dataclasses`` makes them, for the
options it takes: the same constructor, text, equality, hash, refusals and copies."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, NamedTuple

import pytest

from promoter.domain.record_type import FrozenInstance, as_dict, field, record, replace


@record(frozen=True)
class Point:
    """A frozen record with a default and a field neither shown nor compared."""

    x: int
    y: int = 0
    note: str = field(default="", repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class PointDC:
    """The same as a dataclass."""

    x: int
    y: int = 0
    note: str = dataclasses.field(default="", repr=False, compare=False)


@record(frozen=True, slots=True)
class Slotted:
    """A frozen record with slots."""

    name: str
    size: int = 1


@record
class Bag:
    """A mutable record with a factory and a nested record."""

    items: list[str] = field(default_factory=list)
    inner: Point | None = None


def test_constructor_text_and_equality_match_a_dataclass() -> None:
    ours, theirs = Point(1, note="n"), PointDC(1, note="n")
    assert (ours.x, ours.y, ours.note) == (theirs.x, theirs.y, theirs.note)
    assert repr(ours) == repr(theirs).replace("PointDC", "Point") == "Point(x=1, y=0)"
    assert Point(1, 2, "a") == Point(1, 2, "b")  # ``note`` is not compared
    assert Point(1, 2) != Point(2, 1)
    assert hash(Point(1, 2, "a")) == hash(Point(1, 2, "b")) == hash((1, 2))
    assert Point(1) != (1, 0) and Point.__eq__(Point(1), (1, 0)) is NotImplemented
    assert Point.__match_args__ == PointDC.__match_args__ == ("x", "y", "note")
    assert Point.y == 0 and Point.__doc__ is not None and Point.__doc__.startswith("A frozen")


def test_a_frozen_record_refuses_assignment_and_deletion() -> None:
    point = Point(1)
    with pytest.raises(FrozenInstance, match="cannot assign to field 'x'"):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError, match="cannot delete field 'y'"):
        del point.y  # type: ignore[misc]
    assert point == Point(1)


def test_a_slotted_record_has_no_dict_and_pickles() -> None:
    item = Slotted("a")
    assert Slotted.__slots__ == ("name", "size")  # type: ignore[attr-defined]
    assert not hasattr(item, "__dict__")
    assert pickle.loads(pickle.dumps(item)) == item  # noqa: S301 (its own bytes)
    with pytest.raises(FrozenInstance):
        item.size = 2  # type: ignore[misc]


def test_a_mutable_record_takes_a_fresh_factory_value_and_is_unhashable() -> None:
    first, second = Bag(), Bag()
    first.items.append("a")
    assert second.items == [] and first != second
    assert Bag.__hash__ is None
    with pytest.raises(TypeError):
        hash(first)


def test_replace_and_as_dict_match_dataclasses() -> None:
    bag = Bag(["a"], Point(1, 2, "n"))
    copy = replace(bag, items=["b"])
    assert copy.items == ["b"] and copy.inner is bag.inner
    assert replace(Point(1, 2, "n"), y=3) == Point(1, 3) and replace(Point(1), y=3).note == ""
    expected: dict[str, Any] = {"items": ["a"], "inner": {"x": 1, "y": 2, "note": "n"}}
    assert as_dict(bag) == expected
    assert as_dict(bag)["items"] is not bag.items  # lists copied, as ``asdict`` does
    dc = dataclasses.asdict(PointDC(1, 2, "n"))
    assert as_dict(Point(1, 2, "n")) == dc
    held = Bag([Pair(Point(1), (Point(2),))], Point(3))  # type: ignore[list-item]
    held_dc = BagDC([Pair(PointDC(1), (PointDC(2),))], PointDC(3))
    assert as_dict(held) == dataclasses.asdict(held_dc)
    assert type(as_dict(held)["items"][0]) is Pair


class Pair(NamedTuple):
    """A named tuple a record may hold."""

    first: Any
    rest: tuple[Any, ...]


@dataclasses.dataclass
class BagDC:
    items: list[Any]
    inner: PointDC


def test_what_a_record_does_not_do_is_refused_at_import() -> None:
    with pytest.raises(TypeError, match="no default after one with"):

        @record
        class _Order:
            a: int = 0
            b: int

    with pytest.raises(TypeError, match="inherits no fields"):

        @record
        class _Child(Point):
            z: int = 0

    with pytest.raises(TypeError, match="no __post_init__"):

        @record(frozen=True)
        class _Checked:
            a: int

            def __post_init__(self) -> None:
                raise AssertionError("never called by a record")

    with pytest.raises(TypeError, match="sets and deletes as frozen"):

        @record(frozen=True)
        class _Settable:
            a: int

            def __setattr__(self, name: str, value: Any) -> None:
                object.__setattr__(self, name, value)

    with pytest.raises(ValueError, match="a default or a factory"):
        field(default=1, default_factory=int)

    with pytest.raises(ValueError, match="a mutable default"):

        @record
        class _Shared:
            names: list[str] = []  # noqa: RUF012 (the mistake the record refuses)


def test_a_hash_the_class_wrote_stays_as_under_a_dataclass() -> None:
    @record(frozen=True)
    class Ours:
        a: int
        b: int = 0

        def __hash__(self) -> int:
            return self.a

    @dataclasses.dataclass(frozen=True)
    class Theirs:
        a: int
        b: int = 0

        def __hash__(self) -> int:
            return self.a

    assert hash(Ours(7, 1)) == hash(Theirs(7, 1)) == 7
    assert hash(Point(1, 2)) == hash(PointDC(1, 2))  # a hash of its own otherwise
