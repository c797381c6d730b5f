"""Reference solvers for reasoning-gym datasets that ship no answer (many solutions are valid), so that
their tasks still have a gold final state to prove the verifier with."""
from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Any

_SIDE = 6
_TARGET_COL = _SIDE - 2  # the red car (piece A) is out when its left cell reaches this column


def solve_rush_hour(entry: dict[str, Any]) -> str | None:
    """Moves (`A+1 B-2 ...`) that take the red car out, by breadth-first search over one-step slides."""
    desc: str = entry["metadata"]["board_config"]
    cells: dict[str, list[int]] = {}
    for i, c in enumerate(desc):
        if c not in "ox.":
            cells.setdefault(c, []).append(i)
    labels = sorted(cells)
    horizontal = [cells[lb][1] - cells[lb][0] == 1 for lb in labels]
    lengths = [len(cells[lb]) for lb in labels]
    walls = {i for i, c in enumerate(desc) if c == "x"}
    start = tuple(cells[lb][0] for lb in labels)

    def occupied(state: tuple[int, ...]) -> set[int]:
        taken = set(walls)
        for p, h, n in zip(state, horizontal, lengths):
            taken.update(p + k * (1 if h else _SIDE) for k in range(n))
        return taken

    parents: dict[tuple[int, ...], tuple[tuple[int, ...], int, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state[0] % _SIDE == _TARGET_COL:
            return _moves(parents, state, labels)
        taken = occupied(state)
        for i, (p, h, n) in enumerate(zip(state, horizontal, lengths)):
            stride = 1 if h else _SIDE
            for d in (-1, 1):
                head = p + n * stride if d > 0 else p - stride
                if head < 0 or head >= _SIDE * _SIDE or head in taken:
                    continue
                if h and head // _SIDE != p // _SIDE:
                    continue
                nxt = state[:i] + (p + d * stride,) + state[i + 1:]
                if nxt not in parents:
                    parents[nxt] = (state, i, d)
                    queue.append(nxt)
    return None


def _moves(parents: dict[tuple[int, ...], Any], state: tuple[int, ...], labels: list[str]) -> str:
    # the question shows piece i (in sorted label order) as letter chr(ord("A") + i), and moves name those
    letters = [chr(ord("A") + i) for i in range(len(labels))]
    steps: list[tuple[int, int]] = []
    while parents[state] is not None:
        state, piece, d = parents[state]
        steps.append((piece, d))
    steps.reverse()
    merged: list[list[int]] = []
    for piece, d in steps:  # consecutive slides of the same piece the same way are one move
        if merged and merged[-1][0] == piece and (merged[-1][1] > 0) == (d > 0):
            merged[-1][1] += d
        else:
            merged.append([piece, d])
    return " ".join(f"{letters[p]}{'+' if d > 0 else '-'}{abs(d)}" for p, d in merged)


def solve_boxnet(entry: dict[str, Any]) -> str | None:
    """A JSON action plan that walks each box to its target square by square, one agent acting per step."""
    state: dict[str, list[str]] = entry["metadata"]["initial_state"]
    boxes: list[tuple[str, tuple[float, float]]] = []
    targets: dict[str, list[tuple[float, float]]] = {}
    for cell, items in sorted(state.items()):
        at = tuple(map(float, cell.split("_")))
        for item in items:  # several boxes (and targets) may share a colour
            if item.startswith("box_"):
                boxes.append((item, at))  # type: ignore[arg-type]
            elif item.startswith("target_"):
                targets.setdefault(item[7:], []).append(at)  # type: ignore[arg-type]
    plan: list[dict[str, str]] = []
    for box, (x, y) in boxes:
        if not targets.get(box[4:]):
            return None
        target = targets[box[4:]].pop(0)
        while (x, y) != target:
            nx, ny = (x + (1 if target[0] > x else -1), y) if x != target[0] else (x,
                                                                                   y + (1 if target[1] > y
                                                                                        else -1))
            plan.append({f"Agent[{x}, {y}]": f"move({box}, square[{nx}, {ny}])"})
            x, y = nx, ny
        plan.append({f"Agent[{x}, {y}]": f"move({box}, target_{box[4:]})"})
    return json.dumps(plan)


SOLVERS: dict[str, Callable[[dict[str, Any]], str | None]] = {"boxnet": solve_boxnet,
                                                              "rush_hour": solve_rush_hour}
"""Dataset name -> a function returning one valid answer of an entry (or None when it finds none)."""
