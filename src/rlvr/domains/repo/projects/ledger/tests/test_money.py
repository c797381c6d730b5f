import pytest
from ledger.money import format_amount, parse_amount, split_evenly


@pytest.mark.parametrize("text, cents", [("12.34", 1234), ("-5", -500), ("1,234.5", 123450), ("(7.00)", -700),
                                         ("0.07", 7), (" 3 ", 300)])
def test_parse_amount(text, cents):
    assert parse_amount(text) == cents


@pytest.mark.parametrize("text", ["", "abc", "1.234", "1.x", "--1"])
def test_parse_amount_rejects(text):
    with pytest.raises(ValueError):
        parse_amount(text)


@pytest.mark.parametrize("cents, text", [(123450, "1,234.50"), (-7, "-0.07"), (0, "0.00"), (100, "1.00"),
                                         (99, "0.99")])
def test_format_amount(cents, text):
    assert format_amount(cents) == text


def test_split_evenly():
    assert split_evenly(1000, 3) == [334, 333, 333]
    assert split_evenly(9, 3) == [3, 3, 3]
    assert split_evenly(2, 4) == [1, 1, 0, 0]
    assert sum(split_evenly(12345, 7)) == 12345


def test_split_evenly_rejects_zero_parts():
    with pytest.raises(ValueError):
        split_evenly(10, 0)
