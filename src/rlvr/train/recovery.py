"""Recovery from failure, in the loop: failed episodes mined during RL go back into training as recovery
samples.

Every `sft.recovery_every` RL steps, up to `sft.recovery_samples` of the honest failures of those steps
(several turns, judged, not passed, not flagged: a flagged attempt is a hack, not a mistake to recover from)
become recovery samples: the failed episode's turns before its last one are replayed through the env as they
were (context, no loss), then the task's gold turns continue from the state they left (write the fix, run the
tests, submit; an attempts task's reference answer after the feedback its failed answers got), played
through the env and scored like any episode (`rlvr.rollout.policies.gold.recovery_plan`). The samples that
pass get one SFT step (`train.sft.sft_step`, its own AdamW state) at the rate the warm start ended on
(`recovery_lr`): a fresh Adam's first steps move every weight by about the rate, so at the warm start's peak
(2e-3 for the small model) the steps undid it (the loop quickstart's held-out pass@1 fell from 67 % to 4 % in
80 RL steps with recovery samples every 5). A held-out task is never used: the RL batch never holds one, and
the mixer checks the run's held-out keys besides.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import torch

from rlvr.config import SFTConfig
from rlvr.rollout.episode import Episode, split_segments
from rlvr.rollout.policies.gold import play, recovery_plan
from rlvr.tasks.spec import Task
from rlvr.train.distributed import SINGLE, Dist
from rlvr.train.sft import Encoded, episode_example, sft_step
from rlvr.train.update import lr_lambda

__all__ = ["RecoveryMixer", "honest_failure", "recovery_lr"]


def recovery_lr(cfg: SFTConfig) -> float:
    """The rate of a recovery step: the warm start's at its last step (`sft.lr` at a constant rate,
    `lr_final` x `lr` when it decays), so recovery continues where the warm start left off."""
    return cfg.lr * lr_lambda(cfg)(max(cfg.steps - 1, 0))


def honest_failure(ep: Episode) -> bool:
    """A judged attempt that failed without a flag (what a recovery sample starts from)."""
    return not ep.masked and not ep.passed and not (ep.verdict is not None and ep.verdict.flags)


class RecoveryMixer:
    """Collects the failures of the RL steps and, when due, trains one SFT step on their recovery samples."""

    def __init__(self, policy: Any, cfg: SFTConfig, gold: Any, heldout: Collection[str] = (),
                 dist: Dist = SINGLE) -> None:
        self.policy = policy
        self.cfg = cfg
        self.gold = gold
        """`gold(gold_policy)`: the run's env loop on a gold policy (its pool, Scorer, rollout settings)."""
        self.heldout = set(heldout)
        self.dist = dist
        """The ranks of the run: rank 0 collects the failures and plays the samples, every rank trains on
        them (the step is a collective)."""
        self.failures: list[tuple[Episode, Task]] = []
        self._opt: torch.optim.Optimizer | None = None

    @property
    def enabled(self) -> bool:
        return self.cfg.recovery_every > 0

    def observe(self, tasks: Sequence[Task], episodes: Sequence[Episode]) -> None:
        """Keep the step's honest failures of training tasks of several turns, tools or attempts (newest
        first)."""
        if not self.enabled:
            return
        by_key = {t.key: t for t in tasks}
        fresh = [(ep, by_key[f"{ep.domain}/{ep.task_id}"]) for ep in episodes
                 if honest_failure(ep) and f"{ep.domain}/{ep.task_id}" in by_key]
        fresh = [(ep, t) for ep, t in fresh if t.turns > 1 and t.key not in self.heldout]
        self.failures = (fresh + self.failures)[: 4 * self.cfg.recovery_samples]

    def due(self, step: int) -> bool:
        return self.enabled and (step + 1) % self.cfg.recovery_every == 0

    def step(self, seed: int = 0) -> dict[str, float]:
        """Recovery samples of the collected failures, one SFT step on those that pass; `recovery/*`
        metrics. Every rank calls it: rank 0 (which holds the failures) plays the samples, and every rank
        trains on rank 0's token records, split across them (`sft_step`), as one rank would."""
        made = self._samples(seed) if self.dist.main else None
        metrics, records = self.dist.broadcast(made)
        if not records:
            return metrics
        model = self.policy.model
        params = [p for p in model.parameters() if p.requires_grad]
        if self._opt is None:
            self._opt = torch.optim.AdamW(params, lr=recovery_lr(self.cfg), weight_decay=0.0)
        was_training = model.training
        model.eval()  # as in the warm start: no dropout, the same function RL compares log-probs of
        metrics["recovery/loss"] = sft_step(model, records, self.policy.pad_id, self._opt, params, self.dist)
        model.train(was_training)
        self.policy.version += 1
        return metrics

    def _samples(self, seed: int) -> tuple[dict[str, float], list[Encoded]]:
        """(the step's `recovery/*` counts, the recovery samples that passed, as token records)."""
        plans, seen = [], set()
        for ep, task in self.failures:
            if task.key in seen or task.key in self.heldout:
                continue
            plan = recovery_plan(ep, task)
            if plan is not None:
                plans.append(plan)
                seen.add(task.key)
            if len(plans) >= self.cfg.recovery_samples:
                break
        self.failures = []
        samples = play(plans, self.gold, encoder=self.policy, seed=seed)
        metrics = {"recovery/failures": float(len(plans)), "recovery/samples": float(len(samples))}
        # each part of a restarted record (a family whose template rewrites earlier turns)
        return metrics, [episode_example(e) for e in split_segments(samples)]
