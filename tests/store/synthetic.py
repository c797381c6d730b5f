"""Synthetic episodes and runs for the store and monitor tests, with optional planted anomalies."""
from __future__ import annotations

import random
from collections.abc import Iterator

from rlvr.envs.messages import Message, ToolCall
from rlvr.rollout.episode import Episode
from rlvr.tasks.spec import FinalState
from rlvr.verify.verdict import Check, Evidence, Flag, Verdict

TRACEBACK = ("Traceback (most recent call last):\n  File \"/tmp/ws/{n}/sol.py\", line {n}, in f\n"
             "    return xs[{n}]\nIndexError: list index out of range")


def episode(step: int, task: str, *, domain: str = "code", sample: int = 0, reward: float = 0.0,
            passed: bool | None = None, flags: tuple[str, ...] = (), length: int = 50, status: str = "done",
            error: str | None = None, failing_check: str = "hidden/test_sol.py::test_a",
            exec_status: str = "ok", truncated_by: str | None = None,
            infra: str | None = None, content: str | None = None, group: str | None = None) -> Episode:
    """One plausible episode: a prompt, a tool call and its result, an answer, a verdict."""
    passed = reward >= 1.0 and not flags if passed is None else passed
    checks = [Check(name="hidden/test_sol.py::test_ok", score=1.0, passed=True)]
    if not passed and not flags:
        checks.append(Check(name=failing_check, score=0.0, passed=False, detail=error or "assert 1 == 2"))
    flag_objs = [Flag(kind=k, message=f"{k} seen", evidence=[Evidence(file="test_sol.py", line=3, seen="x")])
                 for k in flags]
    if infra:
        verdict = Verdict.infra(infra)
    else:
        verdict = Verdict(score=min(1.0, max(0.0, reward)), passed=passed, checks=checks, flags=flag_objs,
                          timings={"sandbox": 0.02 + 0.001 * sample})
    tool_out = error if (error and exec_status != "ok") else "2 passed"
    return Episode(
        step=step, task_id=task, domain=domain, group_id=group or f"{task}@{step}", sample_index=sample,
        seed=step * 1000 + sample, policy_version=step,
        messages=[Message(role="system", content="You are a careful programmer."),
                  Message(role="user", content=f"Solve task {task}."),
                  Message(role="assistant", content=content or "Let me run the tests.",
                          tool_calls=[ToolCall(id="c1", name="run", arguments={"cmd": "pytest -q"})]),
                  Message(role="tool", content=tool_out, tool_call_id="c1", name="run",
                          exec_status=exec_status),
                  Message(role="assistant", content=f"def f(xs): return xs[{sample}]")],
        token_ids=list(range(length + 10)), loss_mask=[0] * 10 + [1] * length,
        logprobs=[0.0] * 10 + [-0.5] * length, final_state=FinalState(files={"sol.py": "def f(xs): ..."}),
        verdict=verdict, reward=0.0 if infra else reward, status="infra_error" if infra else status,
        truncated_by=truncated_by, num_turns=2, num_generated_tokens=length,
        timings={"generate": 0.01 * length, "tools": 0.05, "verify": 0.03, "total": 0.1 + 0.01 * length})


PLANTS = ("flag_rate", "reward_without_heldout", "task_spike", "length_blowup", "entropy_collapse",
          "zero_variance",
          "mismatch_kl", "mismatch_ratio", "truncation")


def run(steps: int = 12, tasks: int = 4, group: int = 8, plant: str | None = None,
        seed: int = 0) -> Iterator[tuple[int, list[Episode], dict[str, float]]]:
    """(step, episodes, extra metrics) of a healthy run that learns slowly, with one anomaly planted from
    step `steps // 2` on when `plant` names one of PLANTS."""
    rng = random.Random(seed)
    onset = steps // 2
    for step in range(steps):
        late = plant is not None and step >= onset
        p = 0.35 + 0.015 * step
        heldout = 0.30 + 0.015 * step
        eps = []
        for t in range(tasks):
            task = f"t{t}"
            for s in range(group):
                r = min(1.0, max(0.0, rng.gauss(p, 0.12)))
                flags: tuple[str, ...] = ()
                length = max(5, int(rng.gauss(50, 6)))
                if late and plant == "flag_rate" and rng.random() < 0.5:
                    flags, r = ("tampering",), 1.0
                if plant == "reward_without_heldout" and late:
                    r = min(1.0, r + 0.08 * (step - onset + 1))
                if plant == "task_spike" and t == 0:
                    r = 1.0 if step == steps - 2 else 0.05
                if late and plant == "length_blowup" and step == steps - 1:
                    length = 400
                if late and plant == "zero_variance":
                    r = 1.0 if t % 2 else 0.0
                cut = "tokens" if late and plant == "truncation" and rng.random() < 0.5 else None
                eps.append(episode(step, task, sample=s, reward=r, passed=r >= 0.5 and not flags, flags=flags,
                                   length=length, error=TRACEBACK.format(n=rng.randint(1, 99)),
                                   status="truncated" if cut else "done", truncated_by=cut))
        extra = {"time/rollout": 1.0 + rng.random() * 0.1, "time/update": 0.5, "policy/idle_fraction": 0.2,
                 "policy/entropy": 2.0 - 0.02 * step}
        if plant == "reward_without_heldout" and late:
            heldout = 0.30 + 0.015 * onset
        if plant == "entropy_collapse" and late:
            extra["policy/entropy"] = 0.05
        # A healthy sampler/trainer mismatch (a few 1e-4 nats, ratios within a few percent of 1), drawn from
        # its own stream so that the episodes above stay what they were.
        mrng = random.Random(f"mismatch|{seed}|{step}")
        extra.update({"mismatch/kl": 1e-4 * (1.0 + mrng.random()),
                      "mismatch/ratio_p5": 0.97 - 0.01 * mrng.random(),
                      "mismatch/ratio_p50": 1.0, "mismatch/ratio_p95": 1.03 + 0.01 * mrng.random()})
        if plant == "mismatch_kl" and late:
            extra["mismatch/kl"] = 0.05 + 0.01 * mrng.random()
        if plant == "mismatch_ratio" and late:
            extra["mismatch/ratio_p95"] = 1.6
        if step % 2 == 0:
            extra["heldout/pass_rate"] = heldout
        yield step, eps, extra


def write_run(run_dir, plant: str | None = None, steps: int = 12, monitor: bool = True) -> list[Episode]:
    """Store a synthetic run (and log it through a Monitor) under `run_dir`; returns every episode."""
    from rlvr.config import MonitorConfig
    from rlvr.monitor import Monitor
    from rlvr.store import EpisodeStore

    store = EpisodeStore(run_dir)
    mon = Monitor(run_dir, MonitorConfig(tensorboard=False)) if monitor else None
    everything: list[Episode] = []
    for step, eps, extra in run(steps=steps, plant=plant):
        store.write(step, eps)
        if mon is not None:
            mon.log(step, eps, extra)
        everything.extend(eps)
    if mon is not None:
        mon.close()
    return everything
