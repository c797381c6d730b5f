"""Task sources and episodes shared by the scheduler tests."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlvr.rollout.episode import Episode
from rlvr.tasks.source import ListSource, TaskSource
from rlvr.tasks.spec import Task
from rlvr.verify.verdict import Verdict


class CountingSource(TaskSource):
    """A procedural source: task i is `p{i}`; remembers every index it was asked for."""

    def __init__(self, name: str = "proc") -> None:
        self.name = name
        self.asked: list[int] = []

    @property
    def size(self) -> None:
        return None

    def get(self, index: int) -> Task:
        self.asked.append(index)
        return Task(id=f"p{index}", domain=self.name, prompt=f"task {index}", seed=0, index=index)


def finite(name: str, n: int) -> ListSource:
    return ListSource([Task(id=f"{name}{i}", domain=name, prompt=f"{name} {i}") for i in range(n)], name=name)


def episode(task: Task, passed: bool, *, group: str = "", step: int = 0, sample: int = 0,
            infra: bool = False, reward: float | None = None) -> Episode:
    verdict = Verdict.infra("sandbox crashed") if infra else Verdict(score=1.0 if passed else 0.0,
                                                                     passed=passed)
    return Episode(task_id=task.id, domain=task.domain, group_id=group, step=step, sample_index=sample,
                   verdict=verdict, reward=(1.0 if passed else 0.0) if reward is None else reward,
                   status="infra_error" if infra else "done")


@pytest.fixture
def make() -> SimpleNamespace:
    """The helpers above, for tests (test modules cannot import conftest under --import-mode=importlib)."""
    return SimpleNamespace(CountingSource=CountingSource, finite=finite, episode=episode)
