"""Held-out pass@1 of the policy being trained, measured the same way before and after RL.

pass@1 is the probability that one sample at the policy's temperature passes, estimated per task as the
share of `train.heldout_samples` samples that pass (the unbiased pass@1 of Chen et al. 2021), averaged over
tasks; the greedy pass@1 (one argmax decode per task) is reported beside it. The tasks and every episode's
sampling seed are the same before and after, so the two figures differ by the policy only.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlvr.monitor.evals import bootstrap_ci, loop_summary, report, task_counts, write_report
from rlvr.rollout.episode import Episode
from rlvr.rollout.policy import SamplingParams
from rlvr.store.episodes import EpisodeStore
from rlvr.store.layout import RunLayout
from rlvr.train.display import phase
from rlvr.train.state import HeldoutResult

if TYPE_CHECKING:
    from rlvr.train.trainer import Trainer

EVAL_SEED = 1_234_567
"""Sampling seed of held-out episodes (a constant, so before and after draw the same noise)."""


def per_task_pass(episodes: Sequence[Episode]) -> list[float]:
    """Share of passed episodes per task (infra-masked episodes do not count as samples)."""
    out = []
    for tasks in task_counts(episodes).values():
        out.extend(c / n for n, c in tasks.values() if n > 0)
    return out


def evaluate(trainer: Trainer, label: str) -> HeldoutResult:
    """Sampled and greedy pass@1 of the trainer's policy on its held-out set; the episodes are stored under
    heldout/<label>, and the sampled ones' eval report (`rlvr eval`'s eval.json) is written to
    heldout/<label>/ of the run directory, so that `rlvr eval --compare RUN/heldout/before RUN/heldout/after`
    compares two points."""
    cfg, tasks = trainer.cfg, trainer.heldout.tasks
    k = cfg.train.heldout_samples
    budget = cfg.policy.max_new_tokens
    runs = {"sampled": (SamplingParams(temperature=cfg.policy.temperature, top_p=cfg.policy.top_p,
                                       max_new_tokens=budget), k)}
    if cfg.train.heldout_greedy and cfg.policy.temperature > 0:
        runs["greedy"] = (SamplingParams(temperature=0.0, max_new_tokens=budget), 1)
    results: dict[str, list[Episode]] = {}
    for name, (sampling, n) in runs.items():
        total = len(tasks) * n
        with phase(trainer.display, f"held-out {label} ({name})", total) as advance:
            rollouts = trainer.rollouts_with(sampling, progress=lambda done, _t: advance(done))
            results[name] = rollouts.run(tasks, n, step=0, seed=EVAL_SEED)
    store = EpisodeStore(RunLayout(trainer.run_url).heldout_store(label))
    for i, eps in enumerate(results.values()):
        store.write(i, eps)
    sampled = per_task_pass(results["sampled"])
    greedy_tasks = per_task_pass(results["greedy"]) if "greedy" in results else None
    greedy = sum(greedy_tasks) / len(greedy_tasks) if greedy_tasks else None
    # the measurement as `rlvr eval` reports one, in the run directory: `rlvr eval --compare` of any two
    # points
    write_report(report(results["sampled"], k=k, seed=EVAL_SEED, policy=f"{cfg.policy.model} ({label})",
                        tasks=trainer.heldout.spec,
                        extra={"run": cfg.name, "label": label, "greedy_pass@1": greedy}),
                 run_dir=RunLayout(cfg.run_dir).heldout_store(label))
    masked = sum(ep.masked for eps in results.values() for ep in eps)
    pass1 = sum(sampled) / len(sampled) if sampled else 0.0
    return HeldoutResult(pass1=pass1, greedy=greedy, tasks=len(sampled), samples_per_task=k,
                         ci=list(bootstrap_ci(sampled)) if sampled else [], masked=masked,
                         loop=loop_summary(results["sampled"]))
