"""The one contract of a rollout driver, and what every driver shares: its stats, group ids and seeds.

    rollouts.run(tasks, group_size, step=0, seed=0)     # -> scored Episodes, `group_size` per task
    rollouts.stats.as_metrics()                          # what that run measured
    rollouts.with_sampling(GREEDY)                      # the same driver sampling otherwise (held-out passes)

Two drivers implement it: the built-in env loop (`rlvr.rollout.core.runner.EnvRollouts`) and agents from
outside through the gateway (`rlvr.rollout.gateway.agents.AgentRollouts`). The run builder (`rlvr.run.build`)
chooses one, once, and everything downstream (the trainer, `rlvr eval`, held-out evaluation) drives it through
this protocol alone.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rlvr.rollout.episode import Episode
from rlvr.rollout.policy import SamplingParams
from rlvr.tasks.spec import Task

Progress = Callable[[int, int], None]
"""`progress(done, total)`, called as each episode ends."""
OnEpisode = Callable[[Episode], None]
"""`on_episode(episode)`, called with each episode as it ends (so an interrupted caller holds every finished
one)."""


def episode_seed(seed: int, task_key: str, sample_index: int) -> int:
    """The sampling seed of one episode: a function of (run seed, task, index in group) only."""
    h = hashlib.sha256(f"{seed}|{task_key}|{sample_index}".encode()).digest()
    return int.from_bytes(h[:6], "big")


def verify_seed(seed: int, task_key: str, repeat: int) -> int:
    """The verification seed of every sample of one GRPO group: the samples are judged on the same drawn cases
    and fresh inputs (a fair comparison inside the group), and identical answers share one verification (the
    Scorer's cache). Recorded in each verdict (`Verdict.seed`) where it drew randomness."""
    return episode_seed(seed, f"{task_key}|verify", repeat)


def group_id(step: int, seed: int, task_key: str, repeat: int) -> str:
    """The group of the samples of one task in one step; a task listed twice in a batch gets a second
    group."""
    return f"{step}:{seed}:{task_key}" + (f":{repeat}" if repeat else "")


@dataclass(frozen=True)
class Sample:
    """One episode to run: the task, its index in the group and how many copies of the task came before."""

    task: Task
    index: int
    repeat: int

    def episode(self, *, run_id: str, step: int, seed: int, group_size: int, policy_version: int) -> Episode:
        """A fresh Episode record for this sample, with its group id and seed."""
        return Episode(run_id=run_id, step=step, task_id=self.task.id, domain=self.task.domain,
                       group_id=group_id(step, seed, self.task.key, self.repeat), sample_index=self.index,
                       seed=episode_seed(seed, self.task.key, self.repeat * group_size + self.index),
                       policy_version=policy_version)


def samples(tasks: Sequence[Task], group_size: int, repeats: Sequence[int] | None = None) -> list[Sample]:
    """`group_size` samples per task, in task order then sample order. `repeats`: how many times each task
    came earlier in the whole batch, when `tasks` is one rank's share of it (default: counted in `tasks`)."""
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    seen: dict[str, int] = {}
    out = []
    for i, task in enumerate(tasks):
        n = seen[task.key] = seen.get(task.key, -1) + 1
        n = n if repeats is None else repeats[i]
        out += [Sample(task, g, n) for g in range(group_size)]
    return out


@dataclass
class RolloutStats:
    """What a driver's last `run` measured."""

    wall_s: float = 0.0
    idle_s: float = 0.0
    """Seconds the generation loop waited with nothing to generate (0 for agents: they generate when they
    call)."""
    generate_s: float = 0.0
    generate_calls: int = 0
    """Batched generation calls (the env loop), or gateway calls (agents)."""
    generated_tokens: int = 0
    episodes: int = 0

    @property
    def idle_fraction(self) -> float:
        return self.idle_s / self.wall_s if self.wall_s > 0 else 0.0

    def as_metrics(self) -> dict[str, float]:
        """Namespaced metrics for the monitor."""
        return {"rollout/wall_s": self.wall_s, "rollout/policy_idle_fraction": self.idle_fraction,
                "rollout/generate_s": self.generate_s, "rollout/generate_calls": float(self.generate_calls),
                "rollout/generated_tokens": float(self.generated_tokens),
                "rollout/episodes_per_s": self.episodes / self.wall_s if self.wall_s > 0 else 0.0}

    @classmethod
    def merged(cls, stats: Sequence[RolloutStats]) -> RolloutStats:
        """Several drivers' stats as one run's: they ran side by side (ranks), so wall time is the slowest
        one's and counts add up."""
        return cls(wall_s=max(s.wall_s for s in stats), idle_s=max(s.idle_s for s in stats),
                   generate_s=max(s.generate_s for s in stats),
                   generate_calls=sum(s.generate_calls for s in stats),
                   generated_tokens=sum(s.generated_tokens for s in stats),
                   episodes=sum(s.episodes for s in stats))


@runtime_checkable
class Rollouts(Protocol):
    """Runs the episodes of a batch of tasks at a step, each scored as it ends; keeps the stats of its last
    run."""

    stats: RolloutStats

    def run(self, tasks: Sequence[Task], group_size: int, *, step: int = 0, seed: int = 0,
            repeats: Sequence[int] | None = None) -> list[Episode]:
        """`group_size` scored episodes per task (see `samples`), in task order then sample order."""
        ...

    def with_sampling(self, sampling: SamplingParams, *, progress: Progress | None = None,
                      on_episode: OnEpisode | None = None) -> Rollouts:
        """The same driver (policy, pool, Scorer) sampling with `sampling`."""
        ...
