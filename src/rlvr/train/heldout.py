"""Held-out pass@1 of the policy being trained, measured the same way before and after RL.

pass@1 is the probability that one sample at the policy's temperature passes, estimated per task as the
share of `train.heldout_samples` samples that pass (the unbiased pass@1 of Chen et al. 2021), averaged over
tasks; the greedy pass@1 (one argmax decode per task) is reported beside it. The tasks and every episode's
sampling seed are the same before and after, so the two figures differ by the policy only.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from rlvr.monitor.evals import bootstrap_ci, report, task_counts, write_report
from rlvr.rollout.episode import Episode
from rlvr.rollout.policy import SamplingParams
from rlvr.store.episodes import EpisodeStore
from rlvr.store.layout import RunLayout
from rlvr.tasks.spec import Task

EVAL_SEED = 1_234_567
"""Sampling seed of held-out episodes (a constant, so before and after draw the same noise)."""


@dataclass(frozen=True)
class HeldoutResult:
    """One held-out measurement."""

    pass1: float
    """Mean over tasks of the share of sampled episodes that passed."""
    greedy: float | None
    """Share of tasks whose greedy decode passed (None when not measured)."""
    tasks: int
    """Tasks judged (tasks whose every episode was masked by an infra fault are left out)."""
    samples_per_task: int
    ci: list[float] = field(default_factory=list)
    """95% bootstrap interval of pass1 over tasks."""
    masked: int = 0
    """Episodes masked by infra faults."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HeldoutResult:
        return cls(**d)


def per_task_pass(episodes: Sequence[Episode]) -> list[float]:
    """Share of passed episodes per task (infra-masked episodes do not count as samples)."""
    out = []
    for tasks in task_counts(episodes).values():
        out.extend(c / n for n, c in tasks.values() if n > 0)
    return out


@contextmanager
def _phase(progress: Any, name: str, total: int) -> Iterator[Callable[..., None]]:
    """A progress bar when the run shows one, else a no-op."""
    if progress is None:
        yield lambda *_a, **_k: None
        return
    with progress.phase(name, total) as advance:
        yield advance


def evaluate(parts: Any, tasks: list[Task], label: str) -> HeldoutResult:
    """Sampled and greedy pass@1 of `parts.policy` on `tasks`; the episodes are stored under heldout/<label>,
    and the sampled ones' eval report (`rlvr eval`'s eval.json) is written to heldout/<label>/ of the run
    directory, so that `rlvr eval --compare RUN/heldout/before RUN/heldout/after` compares two points."""
    cfg = parts.cfg
    k = cfg.train.heldout_samples
    budget = cfg.policy.max_new_tokens
    runs = {"sampled": (SamplingParams(temperature=cfg.policy.temperature, top_p=cfg.policy.top_p,
                                       max_new_tokens=budget), k)}
    if cfg.train.heldout_greedy and cfg.policy.temperature > 0:
        runs["greedy"] = (SamplingParams(temperature=0.0, max_new_tokens=budget), 1)
    results: dict[str, list[Episode]] = {}
    for name, (sampling, n) in runs.items():
        total = len(tasks) * n
        with _phase(parts.progress, f"held-out {label} ({name})", total) as advance:
            engine = parts.engine_for(sampling, progress=lambda done, _t: advance(done))
            results[name] = engine.run(tasks, n, step=0, seed=EVAL_SEED)
    store = EpisodeStore(RunLayout(parts.run_url).heldout_store(label))
    for i, eps in enumerate(results.values()):
        store.write(i, eps)
    sampled = per_task_pass(results["sampled"])
    greedy_tasks = per_task_pass(results["greedy"]) if "greedy" in results else None
    greedy = sum(greedy_tasks) / len(greedy_tasks) if greedy_tasks else None
    # the measurement as `rlvr eval` reports one, in the run directory: `rlvr eval --compare` of any two points
    write_report(report(results["sampled"], k=k, seed=EVAL_SEED, policy=f"{cfg.policy.model} ({label})",
                        tasks=parts.heldout_spec, extra={"run": cfg.name, "label": label, "greedy_pass@1": greedy}),
                 run_dir=RunLayout(cfg.run_dir).heldout_store(label))
    masked = sum(ep.masked for eps in results.values() for ep in eps)
    pass1 = sum(sampled) / len(sampled) if sampled else 0.0
    return HeldoutResult(pass1=pass1, greedy=greedy, tasks=len(sampled), samples_per_task=k,
                         ci=list(bootstrap_ci(sampled)) if sampled else [], masked=masked)
