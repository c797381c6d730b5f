import pytest
from textkit.wrap import center, wrap


def test_wrap():
    assert wrap("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]
    assert wrap("a b c", 3) == ["a b", "c"]
    assert wrap("a b c", 5) == ["a b c"]
    assert wrap("", 4) == []


def test_wrap_long_word_gets_own_line():
    assert wrap("hi extraordinary yo", 5) == ["hi", "extraordinary", "yo"]


def test_wrap_rejects_bad_width():
    with pytest.raises(ValueError):
        wrap("x", 0)
    assert wrap("x y", 1) == ["x", "y"]


def test_center():
    assert center("ab", 6) == "  ab  "
    assert center("ab", 5, "*") == "*ab**"
    assert center("abcdef", 3) == "abcdef"
    assert center("abc", 3) == "abc"
