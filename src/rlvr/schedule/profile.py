"""Task-set profiling: will these tasks give a useful learning signal under this policy, judged reliably?

`profile_episodes` reads k sampled episodes per task and reports per-task pass rates and tiers, the share of
tasks in the learnable band, the within-group reward variance, and verifier determinism: a sample of final
states is verified twice more, and both new verdicts must agree with each other and with the stored one.
`rlvr.commands.profile.run_profile` samples those episodes with a policy and the run's rollouts.
"""
from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rlvr.config import ScheduleConfig
from rlvr.rollout.core.groups import is_zero_variance, reward_variance
from rlvr.schedule.tiers import LEARNABLE, TIER_NAMES, UNSEEN, tier_of
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.verdict import Verdict

if TYPE_CHECKING:  # the rollout package may pull in torch
    from rlvr.rollout.episode import Episode

Reverify = Callable[[Task, FinalState, int], Verdict]
"""(task, final state, seed) -> a fresh verdict."""

DETERMINISM_SAMPLE = 16
"""Episodes whose final states are verified twice more."""


@dataclass(frozen=True)
class TaskProfile:
    """One task's behaviour under the policy."""

    task: str
    """Task key (`domain/id`)."""
    episodes: int
    """Episodes sampled."""
    masked: int
    """Of those, how many were infra errors (left out of every rate below)."""
    passed: int
    """Unmasked episodes that passed."""
    pass_rate: float | None
    """passed / unmasked episodes (None when every episode was masked)."""
    tier: str
    """Tier under the schedule's bands (`unseen` when nothing could be judged)."""
    reward_mean: float | None
    """Mean reward of the unmasked episodes."""
    reward_var: float | None
    """Population variance of those rewards: zero means the group teaches nothing."""


@dataclass(frozen=True)
class Mismatch:
    """A final state whose verdicts disagreed."""

    task: str
    episode: str
    verdicts: list[str]
    """The stored verdict and the two re-verifications, each summarised."""


@dataclass
class Determinism:
    """Re-verification of a sample of final states."""

    checked: int = 0
    """Final states verified twice more."""
    consistent: int = 0
    """Of those, how many gave the same verdict three times."""
    inconclusive: int = 0
    """Re-verifications that hit an infra error (neither agreement nor disagreement)."""
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def deterministic(self) -> bool | None:
        """True when every checked final state agreed; None when none could be checked."""
        return not self.mismatches if self.checked else None


@dataclass
class ProfileReport:
    """Everything `rlvr tasks profile` prints."""

    tasks: list[TaskProfile]
    k: int
    """Samples per task."""
    determinism: Determinism
    tier_counts: dict[str, int] = field(default_factory=dict)
    learnable_share: float = 0.0
    """Share of judged tasks whose pass rate lies strictly inside the bands."""
    reward_var_mean: float = 0.0
    """Mean within-group reward variance over judged tasks."""
    zero_variance_share: float = 0.0
    """Share of judged tasks whose rewards were all equal."""
    pass_rate: float | None = None
    """Pass rate over every unmasked episode."""
    masked: int = 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["determinism"]["deterministic"] = self.determinism.deterministic
        return data


def summarise(verdict: Verdict | None) -> str:
    """What must be equal between verifications: pass, score, flag kinds, and whether it could judge."""
    if verdict is None:
        return "none"
    if verdict.infra_error:
        return "infra_error"
    flags = ",".join(sorted(f.kind for f in verdict.flags))
    return f"passed={verdict.passed} score={verdict.score:.6f} flags=[{flags}]"


def check_determinism(tasks: dict[str, Task], episodes: Sequence[Episode], reverify: Reverify, *,
                      sample: int = DETERMINISM_SAMPLE, seed: int = 0) -> Determinism:
    """Verify a seeded sample of judged episodes twice more and compare the three verdicts."""
    judged = [ep for ep in episodes if not ep.masked and ep.verdict is not None
              and f"{ep.domain}/{ep.task_id}" in tasks]
    chosen = random.Random(seed).sample(judged, min(sample, len(judged)))
    out = Determinism()
    for ep in chosen:
        task = tasks[f"{ep.domain}/{ep.task_id}"]
        drew = ep.verdict.seed if ep.verdict is not None else None
        # the seed it was verified with
        again = [reverify(task, ep.final_state, ep.seed if drew is None else drew)
                 for _ in range(2)]
        if any(v.infra_error for v in again):
            out.inconclusive += 1
            continue
        out.checked += 1
        seen = [summarise(ep.verdict), *(summarise(v) for v in again)]
        if len(set(seen)) == 1:
            out.consistent += 1
        else:
            out.mismatches.append(Mismatch(task.key, ep.episode_id, seen))
    return out


def profile_episodes(tasks: Sequence[Task], episodes: Sequence[Episode], k: int, config: ScheduleConfig,
                     determinism: Determinism) -> ProfileReport:
    """Per-task pass rates, tiers and reward variance from `k` episodes per task."""
    by_task: dict[str, list[Episode]] = {t.key: [] for t in tasks}
    for ep in episodes:
        by_task.setdefault(f"{ep.domain}/{ep.task_id}", []).append(ep)
    rows: list[TaskProfile] = []
    flat = 0
    for key, eps in by_task.items():
        judged = [e for e in eps if not e.masked]
        rewards = [float(e.reward) for e in judged]
        flat += is_zero_variance(rewards)
        rate = sum(e.passed for e in judged) / len(judged) if judged else None
        rows.append(TaskProfile(task=key, episodes=len(eps), masked=len(eps) - len(judged),
                                passed=sum(e.passed for e in judged), pass_rate=rate,
                                tier=tier_of(rate, config),
                                reward_mean=statistics.fmean(rewards) if rewards else None,
                                reward_var=reward_variance(rewards) if rewards else None))
    counts = {t: sum(r.tier == t for r in rows) for t in TIER_NAMES}
    judged_rows = [r for r in rows if r.tier != UNSEEN]
    variances = [r.reward_var for r in judged_rows if r.reward_var is not None]
    unmasked = [e for e in episodes if not e.masked]
    n = len(judged_rows)
    return ProfileReport(
        tasks=rows, k=k, determinism=determinism, tier_counts=counts,
        learnable_share=counts[LEARNABLE] / n if n else 0.0,
        reward_var_mean=statistics.fmean(variances) if variances else 0.0,
        zero_variance_share=flat / n if n else 0.0,
        pass_rate=sum(e.passed for e in unmasked) / len(unmasked) if unmasked else None,
        masked=len(episodes) - len(unmasked),
    )


def print_report(report: ProfileReport, console: Any) -> None:
    """The report as a rich table per task and a summary (console: a rich Console)."""
    from rich.table import Table

    table = Table("task", "pass rate", "tier", "reward mean", "reward var", "masked")
    for r in report.tasks:
        table.add_row(r.task, _fmt(r.pass_rate), r.tier, _fmt(r.reward_mean), _fmt(r.reward_var),
                      str(r.masked) if r.masked else "")
    console.print(table)
    tiers = "  ".join(f"{t} {n}" for t, n in report.tier_counts.items() if n)
    console.print(f"{len(report.tasks)} tasks x {report.k} samples; pass rate {_fmt(report.pass_rate)}; "
                  f"tiers: {tiers}", markup=False, highlight=False)
    console.print(f"learnable share {report.learnable_share:.0%}; zero-variance share "
                  f"{report.zero_variance_share:.0%}; mean within-group reward variance "
                  f"{report.reward_var_mean:.4f}",
                  markup=False, highlight=False)
    det = report.determinism
    status = {True: "[green]deterministic[/green]", False: "[red]NOT deterministic[/red]",
              None: "[yellow]determinism not checked[/yellow] (no final state could be judged)"
              }[det.deterministic]
    console.print(f"verifier: {status} ({det.consistent}/{det.checked} final states gave the same "
                  f"verdict three times{f'; {det.inconclusive} inconclusive' if det.inconclusive else ''})")
    for m in det.mismatches:
        console.print(f"  {m.task} episode {m.episode}: {' | '.join(m.verdicts)}", markup=False,
                      highlight=False)
    if report.masked:
        console.print(f"[yellow]{report.masked} episodes were infra errors (masked, not scored)[/yellow]")
    if report.learnable_share < 0.2 and report.k > 1:
        console.print("[yellow]few tasks are in the learnable band: most groups will carry no "
                      "signal[/yellow]")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
