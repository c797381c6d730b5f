import itertools

from gridpath.grid import Grid
from gridpath.search import distances, reachable_count, shortest_path, solve

MAP = """
S.#.
..#G
....
"""


def test_distances():
    d = distances(Grid.parse(MAP), (0, 0))
    assert d[(0, 0)] == 0 and d[(2, 2)] == 4 and d[(1, 3)] == 6 and d[(0, 3)] == 7
    assert (0, 2) not in d


def test_shortest_path():
    g = Grid.parse(MAP)
    path = shortest_path(g, (0, 0), (1, 3))
    assert path[0] == (0, 0) and path[-1] == (1, 3) and len(path) == 7
    assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in itertools.pairwise(path))
    assert shortest_path(g, (0, 0), (0, 0)) == [(0, 0)]


def test_unreachable():
    g = Grid.parse("S#G")
    assert shortest_path(g, (0, 0), (0, 2)) is None
    assert solve("S#G") == -1


def test_reachable_count():
    assert reachable_count(Grid.parse(MAP), (0, 0)) == 10
    assert reachable_count(Grid.parse("S#."), (0, 0)) == 1


def test_solve():
    assert solve(MAP) == 6
    assert solve("SG") == 1
    assert solve("S.\n.G") == 2
