"""Breadth-first search over a grid."""
from collections import deque

from gridpath.grid import Grid


def distances(grid, start):
    """Steps from start to every reachable cell."""
    dist = {start: 0}
    queue = deque([start])
    while queue:
        cur = queue.popleft()
        for nxt in grid.neighbours(cur):
            if nxt not in dist:
                dist[nxt] = dist[cur] + 1
                queue.append(nxt)
    return dist


def shortest_path(grid, start, goal):
    """A shortest list of cells from start to goal (both included), or None when the goal is unreachable."""
    prev = {start: None}
    queue = deque([start])
    while queue:
        cur = queue.popleft()
        if cur == goal:
            path = []
            while cur is not None:
                path.append(cur)
                cur = prev[cur]
            return path[::-1]
        for nxt in grid.neighbours(cur):
            if nxt not in prev:
                prev[nxt] = cur
                queue.append(nxt)
    return None


def reachable_count(grid, start):
    """How many cells can be reached from start (start included)."""
    return len(distances(grid, start))


def solve(text):
    """Length in steps of the shortest path from 'S' to 'G' in a map, or -1."""
    grid = Grid.parse(text)
    path = shortest_path(grid, grid.find("S"), grid.find("G"))
    return -1 if path is None else len(path) - 1
