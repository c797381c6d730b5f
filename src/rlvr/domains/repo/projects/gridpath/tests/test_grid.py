import pytest
from gridpath.grid import Grid

MAP = """
S.#.
..#G
....
"""


def test_parse_and_size():
    g = Grid.parse(MAP)
    assert (g.height, g.width) == (3, 4)
    assert g.find("S") == (0, 0) and g.find("G") == (1, 3) and g.find("X") is None


def test_ragged_or_empty_grid_is_refused():
    with pytest.raises(ValueError):
        Grid(["..", "."])
    with pytest.raises(ValueError):
        Grid([])


def test_bounds_and_walls():
    g = Grid.parse(MAP)
    assert g.in_bounds((2, 3)) and not g.in_bounds((3, 0)) and not g.in_bounds((0, 4))
    assert not g.in_bounds((-1, 0)) and not g.in_bounds((0, -1))
    assert not g.passable((0, 2)) and g.passable((0, 3))


def test_neighbours_order_and_walls():
    g = Grid.parse(MAP)
    assert g.neighbours((0, 0)) == [(0, 1), (1, 0)]
    assert g.neighbours((1, 1)) == [(2, 1), (1, 0), (0, 1)]
    assert g.neighbours((2, 3)) == [(2, 2), (1, 3)]
