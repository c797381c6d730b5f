"""The plain-value codec: exact builtin types round-trip, anything else is refused."""
from __future__ import annotations

import math

import pytest

from rlvr.verify.values import decode, encode, identical, same


@pytest.mark.parametrize("value", [None, True, 3, -2**80, 1.5, "é", b"\x00\xff", (1, [2, {3}]), {"a": (1,)},
                                  frozenset({1, 2}), 1 + 2j, {(1, 2): [None]}, []])
def test_round_trip(value: object) -> None:
    enc = encode(value)
    assert enc is not None
    back = decode(enc["v"])
    assert back == value and type(back) is type(value)


class MyInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [MyInt(3), [1, MyInt(2)], object(), {"k": object()}, "x" * 1_000_001])
def test_subclasses_objects_and_huge_values_are_not_plain(value: object) -> None:
    assert encode(value) is None


def test_deep_nesting_is_refused_not_crashing() -> None:
    v: list = []
    for _ in range(100):
        v = [v]
    assert encode(v) is None


def test_same_is_strict_on_bool_and_lenient_on_float_and_sequences() -> None:
    assert same([1, 2.0000000001], (1, 2.0), 1e-6)
    assert not same(True, 1) and not same(1, 2)
    assert same(float("nan"), math.nan)
    assert not same({"a": 1}, {"a": 1, "b": 2})
    assert not same("1", 1)


@pytest.mark.parametrize("a, b, equal", [
    ([1, "a", (2.0,)], [1, "a", (2.0,)], True), ([1, 2], (1, 2), False), ([True], [1], False),
    (1.0, 1, False),
    ({"k": [1]}, {"k": [1]}, True), ({"k": [1]}, {"k": (1,)}, False), (0.1 + 0.2, 0.3, True),
    (float("nan"), float("nan"), True), ([[]], [[], []], False), ("a", "a", True),
])
def test_identical_needs_the_same_types_all_the_way_down(a: object, b: object, equal: bool) -> None:
    assert identical(a, b) is equal
