"""Scheduler and TRL-adapter overhead, each beside a baseline measured in the same run.

1. One scheduler step (`sample` 64 tasks from a 10,000-task pack and a procedural domain, then `observe` 8
   episodes each) against the cheapest possible scheduler: uniform `random.sample` plus a dict of EMAs.
2. The TRL reward function on 256 completions against calling `rlvr.verify.verify` on them in a plain loop.

Run alone: `.venv/bin/python benchmarks/bench_schedule.py`.
"""
from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

from rlvr.config import ScheduleConfig
from rlvr.integrations.trl import reward_function
from rlvr.rollout.episode import Episode
from rlvr.schedule import Scheduler
from rlvr.tasks.source import ListSource, TaskSource
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, verify
from rlvr.verify.verdict import Verdict

BATCH, GROUP, POOL, STEPS = 64, 8, 10_000, 40


class Procedural(TaskSource):
    name = "proc"

    @property
    def size(self) -> None:
        return None

    def get(self, index: int) -> Task:
        return Task(id=f"p{index}", domain="proc", prompt=f"task {index}", index=index)


def _episodes(tasks: list[Task], step: int) -> list[Episode]:
    out = []
    for t in tasks:
        for g in range(GROUP):
            ok = (len(t.id) + g + step) % 3 == 0
            out.append(Episode(task_id=t.id, domain=t.domain, group_id=f"{step}:{t.key}", sample_index=g,
                               step=step,
                               verdict=Verdict(score=float(ok), passed=ok), reward=float(ok), status="done"))
    return out


def _timed(fn: Callable[[int], None], steps: int) -> float:
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        fn(step)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_scheduler() -> None:
    pack = ListSource([Task(id=f"t{i}", domain="pack", prompt=str(i)) for i in range(POOL)], name="pack")
    sched = Scheduler({"pack": pack, "proc": Procedural()}, ScheduleConfig(), seed=0)
    prepared = [_episodes(sched.sample(BATCH), s) for s in range(STEPS)]  # episode building is not measured

    def rlvr_step(step: int) -> None:
        sched.sample(BATCH)
        sched.observe(prepared[step])

    rng, ema = random.Random(0), {}

    def baseline_step(step: int) -> None:
        picks = rng.sample(range(POOL), BATCH)
        tasks = [pack.get(i) for i in picks]
        for ep in prepared[step]:
            key = f"{ep.domain}/{ep.task_id}"
            ema[key] = 0.7 * ema.get(key, float(ep.passed)) + 0.3 * float(ep.passed)
        del tasks

    base = _timed(baseline_step, STEPS)
    ours = _timed(rlvr_step, STEPS)
    print(f"scheduler step ({BATCH} tasks x {GROUP}, pool {POOL:,} + procedural): rlvr {ours * 1e3:.2f} ms, "
          f"baseline {base * 1e3:.2f} ms, ratio {ours / base:.1f}x; "
          f"{ours / 1.0:.2%} of a 1 s GRPO step")


def bench_trl_reward() -> None:
    tasks = [Task(id=f"t{i}", domain="toy", prompt=f"say {i}", answer=str(i), verifier={"kind": "answer"})
             for i in range(256)]
    completions = [f"<think>x</think><answer>{i if i % 2 else i + 1}</answer>" for i in range(256)]
    ids = [t.key for t in tasks]
    reward = reward_function(tasks, workers=1)
    ctx = VerifyContext()

    def direct(_: int) -> None:
        for t, c in zip(tasks, completions, strict=True):
            verify(t, FinalState(answer=c), ctx)

    def adapter(_: int) -> None:
        reward(prompts=[""] * 256, completions=completions, task_id=ids)

    direct(0)  # load the verifier registry outside the timing
    base = _timed(direct, 10)
    ours = _timed(adapter, 10)
    print(f"TRL reward function, 256 completions: adapter {ours * 1e3:.1f} ms, direct verify loop "
          f"{base * 1e3:.1f} ms, ratio {ours / base:.2f}x")


if __name__ == "__main__":
    bench_scheduler()
    bench_trl_reward()
