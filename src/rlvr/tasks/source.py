"""TaskSource: an indexed, lazily loaded collection of tasks (a domain, a pack directory, a JSONL file)."""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

from rlvr.errors import UserError
from rlvr.tasks.spec import FinalState, Task


class TaskSource(ABC):
    """A collection of tasks addressed by index. Subclasses load a task only when it is asked for.

    `size` is the number of tasks, or None for a procedural source that can generate any index
    (`Random(seed + index)`, so every task is rebuilt exactly from (domain, seed, index)).
    """

    name: str = ""
    description: str = ""

    @property
    @abstractmethod
    def size(self) -> int | None:
        """Number of tasks; None when procedural (unbounded)."""

    @abstractmethod
    def get(self, index: int) -> Task:
        """The task at `index` (0-based)."""

    def id_at(self, index: int) -> str:
        """The id of the task at `index`; sources override this to answer without loading the task."""
        return self.get(index).id

    def ids(self, limit: int | None = None) -> Iterator[str]:
        """Task ids in index order, without loading the tasks where the source allows it."""
        n = self.size if self.size is not None else (limit or 0)
        if limit is not None:
            n = min(n, limit)
        for i in range(n):
            yield self.id_at(i)

    def find(self, task_id: str) -> Task:
        """The task with this id; raises UserError naming the source when there is none."""
        if self.size is None:
            raise UserError(f"cannot look up id {task_id!r} in procedural domain {self.name!r}",
                            fix=f"use {self.name}:INDEX")
        for i in range(self.size):
            if self.id_at(i) == task_id:
                return self.get(i)
        raise UserError(f"no task with id {task_id!r} in {self.name!r}", fix="see `rlvr tasks list`")

    def indices(self, n: int | None = None, seed: int = 0, offset: int = 0) -> list[int]:
        """`n` indices: the first n (shuffled by seed) of a finite source; offset..offset+n for a procedural
        one."""
        if self.size is None:
            if n is None:
                raise UserError(f"procedural domain {self.name!r} needs a sample size",
                                fix=f"use {self.name}:N")
            return list(range(offset, offset + n))
        idx = list(range(self.size))
        if n is not None and n < self.size:
            random.Random(seed).shuffle(idx)
            idx = sorted(idx[:n])
        return idx

    def sample(self, n: int | None = None, seed: int = 0, offset: int = 0) -> list[Task]:
        """Load `n` tasks (see `indices`)."""
        return [self.get(i) for i in self.indices(n, seed=seed, offset=offset)]

    def gold(self, task: Task) -> FinalState | None:
        """The gold final state of `task` (must score 1.0 with no flag), or None when the task has none.

        Default: the workspace with `solution/` laid over it, or the reference answer as text.
        """
        if task.solution is not None:
            return FinalState(files={**task.workspace, **task.solution})
        if task.answer is not None:
            return FinalState(answer=task.answer if isinstance(task.answer, str) else str(task.answer))
        return None

    def gold_commands(self, task: Task) -> list[str] | None:
        """Commands (one bash command line each, run in the workspace) that take `task`'s initial workspace to
        its gold final state, for a gold trajectory played at a terminal: the way to a state with modes, links
        or a git history, which writing files cannot reach (`rlvr.sandbox.tree`). None: write the gold
        state's files."""
        return None

    def gold_attempts(self, task: Task) -> list[str]:
        """The answers a gold trajectory of an attempts task (`Task.attempts`) gives, in order: the last is
        the gold answer, any before it wrong ones that the env's feedback corrects (a recovery for a warm
        start to learn from). Default: the gold answer alone (none when the task has no answer-style
        gold)."""
        gold = self.gold(task)
        return [gold.answer] if gold is not None and gold.answer is not None else []

    def negatives(self, task: Task) -> dict[str, FinalState]:
        """Negative controls that must score 0: named final states. Domains add their own (a wrong answer of
        the right type, the right answer buried among wrong ones)."""
        if task.workspace or task.solution is not None:
            return {"untouched_workspace": FinalState(files=dict(task.workspace)),
                    "empty_workspace": FinalState(files={})}
        return {"empty_answer": FinalState(answer=""), "echoed_prompt": FinalState(answer=task.prompt)}

    def __len__(self) -> int:
        if self.size is None:
            raise TypeError(f"procedural source {self.name!r} has no length")
        return self.size

    def __iter__(self) -> Iterator[Task]:
        if self.size is None:
            raise TypeError(f"procedural source {self.name!r} is unbounded; use sample(n)")
        for i in range(self.size):
            yield self.get(i)


class ProceduralSource(TaskSource):
    """A procedural domain: task `index` is rebuilt exactly from `random.Random(seed + index)`.

    Subclasses set `name`, keep their validated settings in `self.config` (which has a `seed`) and implement
    `build(index, rng)`; ids are `s<seed>-<index>`.
    """

    def __init__(self, config: Any) -> None:
        self.config = config

    @property
    def size(self) -> None:
        return None

    def id_at(self, index: int) -> str:
        return f"s{self.config.seed}-{index}"

    def get(self, index: int) -> Task:
        if index < 0:
            raise UserError(f"negative index {index} for domain {self.name!r}", fix="use an index >= 0")
        return self.build(index, random.Random(self.config.seed + index))

    @abstractmethod
    def build(self, index: int, rng: random.Random) -> Task:
        """The task at `index`, drawn from `rng` only (so it is reproducible)."""


class ListSource(TaskSource):
    """An in-memory list of tasks (tests, generated packs)."""

    def __init__(self, tasks: list[Task], name: str = "list", description: str = "in-memory tasks") -> None:
        self._tasks = list(tasks)
        self.name = name
        self.description = description

    @property
    def size(self) -> int:
        return len(self._tasks)

    def get(self, index: int) -> Task:
        return self._tasks[index]
