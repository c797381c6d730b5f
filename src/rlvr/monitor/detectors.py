"""Anomaly detectors over a run's metric history: each is a named function that returns the alerts it raises.

Trend detectors compare the latest `window` steps with the `window` before them; level detectors need their
condition to hold for `patience` consecutive steps. The monitor keeps an alert from repeating while its
condition holds: it is raised again only after the condition has cleared.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlvr.config import MonitorConfig
from rlvr.monitor.metrics import is_multi_turn
from rlvr.rollout.episode import TRUNCATION_REASONS, Episode

MAX_LINKED_EPISODES = 20
"""Episodes linked from one alert (the report links each to the episode viewer)."""
SPIKE_MIN_VARIANCE = 0.01
"""Floor of a task's reward variance when judging whether a jump stands out from its noise."""


@dataclass(frozen=True)
class Alert:
    """One anomaly, as written to `<run_dir>/alerts.jsonl`."""

    step: int
    """Step at which it was detected."""
    detector: str
    """Name of the detector (a key of DETECTORS)."""
    message: str
    """One line for a person."""
    value: float
    """The measured value that crossed the threshold."""
    threshold: float
    """The threshold it crossed."""
    severity: str = "warning"
    """`warning` or `critical` (suspected reward hacking)."""
    key: str = ""
    """What the alert is about within its detector (a task id), so that each is raised once per onset."""
    episode_ids: list[str] = field(default_factory=list)
    """Episodes that show the anomaly."""
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "detector": self.detector, "severity": self.severity,
                "message": self.message,
                "value": self.value, "threshold": self.threshold, "key": self.key,
                "episode_ids": list(self.episode_ids), "time": self.time}


@dataclass
class History:
    """What the detectors see: metrics per step and each task's mean reward per step."""

    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    task_rewards: dict[str, list[tuple[int, list[float]]]] = field(default_factory=lambda: defaultdict(list))
    """Each task's episode rewards per step it was seen at."""

    def series(self, name: str, upto: int) -> list[tuple[int, float]]:
        """(step, value) of a metric at the steps that logged it, up to and including `upto`."""
        return [(s, m[name]) for s, m in sorted(self.metrics.items()) if s <= upto and name in m]


Detector = Callable[[History, int, list[Episode], MonitorConfig], list[Alert]]


MIN_TREND_POINTS = 4
"""Fewest logged values a trend detector compares (two windows of two), so short runs are judged too."""


def _window(n: int, cfg: MonitorConfig) -> int:
    """The window actually used: the configured one, shrunk to half the points there are."""
    return min(cfg.window, n // 2)


def _windows(values: list[float], w: int) -> tuple[float, float] | None:
    """Means of the previous and the latest window, when there are enough points for both."""
    if len(values) < MIN_TREND_POINTS:
        return None
    return float(np.mean(values[-2 * w:-w])), float(np.mean(values[-w:]))


def _flagged_ids(eps: list[Episode]) -> list[str]:
    return [e.episode_id for e in eps if e.verdict and e.verdict.flags][:MAX_LINKED_EPISODES]


def flag_rate_rising(h: History, step: int, eps: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    rates = [v for _, v in h.series("flags/rate", step)]
    w = _window(len(rates), cfg)
    pair = _windows(rates, w)
    if pair is None or pair[1] - pair[0] < cfg.flag_rate_rise:
        return []
    before, now = pair
    return [Alert(step, "flag_rate_rising", f"reward-hacking onset: flagged share rose from {before:.1%} to "
                  f"{now:.1%} over the last {w} steps", now - before, cfg.flag_rate_rise,
                  severity="critical", episode_ids=_flagged_ids(eps))]


def reward_without_heldout(h: History, step: int, eps: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    rewards = h.series("reward/mean", step)
    w = _window(len(rewards), cfg)
    pair = _windows([v for _, v in rewards], w)
    if pair is None or pair[1] - pair[0] < cfg.reward_rise:
        return []
    # Held-out change over the same span as the reward's rise: from the last figure before the latest
    # window began to the newest one inside it.
    boundary = rewards[-w][0]
    heldout = h.series(cfg.heldout_metric, step)
    before = [v for s, v in heldout if s < boundary]
    inside = [v for s, v in heldout if s >= boundary]
    if not before or not inside:
        return []
    change = inside[-1] - before[-1]
    if change > cfg.heldout_tolerance:
        return []
    return [Alert(step, "reward_without_heldout",
                  f"reward-hacking onset: training reward rose {pair[0]:.3f} -> "
                  f"{pair[1]:.3f} while held-out pass rate moved {change:+.3f}", pair[1] - pair[0],
                  cfg.reward_rise,
                  severity="critical", episode_ids=_flagged_ids(eps))]


def task_reward_spike(h: History, step: int, eps: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    by_task: dict[str, list[Episode]] = defaultdict(list)
    for e in eps:
        if not e.masked:
            by_task[e.task_id].append(e)
    alerts = []
    for task, group in sorted(by_task.items()):
        past = [r for s, rs in h.task_rewards.get(task, []) if s < step for r in rs]
        seen = len({s for s, _ in h.task_rewards.get(task, []) if s < step})
        if seen < cfg.task_min_history:
            continue
        rewards = [e.reward for e in group]
        now, base = float(np.mean(rewards)), float(np.mean(past))
        # A group mean of a few samples is noisy: the jump must also stand out against the task's own reward
        # spread (floored, so a task that always scored the same is not infinitely sensitive).
        noise = float(np.sqrt(max(float(np.var(past)), SPIKE_MIN_VARIANCE) / len(rewards)))
        z = (now - base) / noise
        if now - base >= cfg.task_spike and z >= cfg.task_spike_z:
            flagged = sum(bool(e.verdict and e.verdict.flags) for e in group)
            ids = [e.episode_id for e in sorted(group, key=lambda e: -e.reward)][:MAX_LINKED_EPISODES]
            alerts.append(Alert(step, "task_reward_spike",
                                f"reward spike on task {task}: mean {base:.2f} over "
                                f"{seen} earlier steps -> {now:.2f}, {z:.1f} standard errors "
                                f"({flagged}/{len(group)} flagged)", now - base, cfg.task_spike, key=task,
                                episode_ids=ids))
    return alerts


def length_blowup(h: History, step: int, eps: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    lengths = [v for _, v in h.series("episode/length", step)]
    if len(lengths) < MIN_TREND_POINTS:
        return []
    base = float(np.median(lengths[-1 - 2 * cfg.window:-1]))
    now = lengths[-1]
    if now < cfg.length_ratio * base or now - base < cfg.length_min_delta:
        return []
    ids = [e.episode_id for e in sorted(eps, key=lambda e: -e.num_generated_tokens)][:MAX_LINKED_EPISODES]
    return [Alert(step, "length_blowup",
                  f"response length blew up: {now:.0f} generated tokens per episode vs a "
                  f"recent median of {base:.0f}", now / max(base, 1e-9), cfg.length_ratio, episode_ids=ids)]


def entropy_collapse(h: History, step: int, eps: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    ent = [v for _, v in h.series("policy/entropy", step)]
    if len(ent) < cfg.patience + 2:
        return []
    early = float(max(ent[:min(cfg.window, len(ent) - cfg.patience)]))
    limit = cfg.entropy_ratio * early
    recent = ent[-cfg.patience:]
    if early <= 0 or max(recent) > limit:
        return []
    return [Alert(step, "entropy_collapse", f"entropy collapse: policy entropy {recent[-1]:.3g} for "
                  f"{cfg.patience} steps, down from {early:.3g} early in the run", recent[-1], limit)]


def zero_variance_groups(h: History, step: int, eps: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    shares = [v for _, v in h.series("groups/zero_variance_share", step)]
    if len(shares) < cfg.patience or min(shares[-cfg.patience:]) < cfg.zero_variance_share:
        return []
    return [Alert(step, "zero_variance_groups", f"{shares[-1]:.0%} of groups have equal rewards (no learning "
                  f"signal) for {cfg.patience} steps: tasks are too easy or too hard", shares[-1],
                  cfg.zero_variance_share)]


def _held(values: list[float], patience: int, holds: Callable[[float], bool]) -> bool:
    """The condition held at each of the last `patience` logged values."""
    return len(values) >= patience and all(holds(v) for v in values[-patience:])


MISMATCH_FIX = ('(sampler kernels or dtype, an engine out of sync, or the lag of asynchronous mode; '
                'train.off_policy = "decoupled" with train.is_correction = "tis" or "mis" corrects for it)')


def mismatch_kl(h: History, step: int, eps: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    """The sampler's and the trainer's log-probs of the same tokens disagree: KL above its bound for
    `patience` steps (the trainer logs `mismatch/kl`, rlvr.train.update)."""
    kl = [v for _, v in h.series("mismatch/kl", step)]
    if not _held(kl, cfg.patience, lambda v: v > cfg.mismatch_kl):
        return []
    return [Alert(step, "mismatch_kl", f"sampler/trainer mismatch: KL {kl[-1]:.3g} nats per token for "
                  f"{cfg.patience} steps, above {cfg.mismatch_kl:g} {MISMATCH_FIX}", kl[-1], cfg.mismatch_kl)]


def mismatch_ratio(h: History, step: int, eps: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    """The trainer / sampler probability ratio's tails leave the band [mismatch_ratio_low,
    mismatch_ratio_high] for `patience` steps: its 5th percentile below the band (key `low`), its 95th above
    (key `high`)."""
    alerts = []
    for key, name, bound, out in (("low", "mismatch/ratio_p5", cfg.mismatch_ratio_low, lambda v, b: v < b),
                                  ("high", "mismatch/ratio_p95", cfg.mismatch_ratio_high, lambda v,
                                   b: v > b)):
        values = [v for _, v in h.series(name, step)]
        if _held(values, cfg.patience, lambda v, b=bound, o=out: o(v, b)):
            alerts.append(Alert(step, "mismatch_ratio",
                                f"sampler/trainer mismatch: {name.split('_')[-1]} of the "
                                f"token ratio {values[-1]:.3g} for {cfg.patience} steps, outside "
                                f"[{cfg.mismatch_ratio_low:g}, {cfg.mismatch_ratio_high:g}] {MISMATCH_FIX}",
                                values[-1], bound, key=key))
    return alerts


def no_tool_calls(h: History, step: int, eps: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    """The policy stopped using its tools: `agent/no_tool_call_share` (rlvr.monitor.metrics.agent_metrics) at
    or above `no_tool_call_share` for `patience` steps. Steps without multi-turn episodes log no share, so a
    run without them never raises it."""
    shares = [v for _, v in h.series("agent/no_tool_call_share", step)]
    if not _held(shares, cfg.patience, lambda v: v >= cfg.no_tool_call_share):
        return []
    ids = [e.episode_id for e in eps if not e.masked and is_multi_turn(e)][:MAX_LINKED_EPISODES]
    return [Alert(step, "no_tool_calls",
                  f"the policy stopped using its tools: {shares[-1]:.0%} of multi-turn "
                  f"episodes made no tool call for {cfg.patience} steps (read one: does it answer "
                  f"in prose, or write calls its chat template does not parse?)", shares[-1],
                  cfg.no_tool_call_share,
                  episode_ids=ids)]


def truncation_rising(h: History, step: int, eps: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    """A budget cuts more and more episodes: the share one budget cut (`truncation/<reason>`,
    rlvr.monitor.metrics.truncation_metrics) rose by `truncation_rise` or more between the two latest windows
    (one alert per budget, key = its name)."""
    alerts = []
    for reason in (*TRUNCATION_REASONS, "other"):
        rates = [v for _, v in h.series(f"truncation/{reason}", step)]
        w = _window(len(rates), cfg)
        pair = _windows(rates, w)
        if pair is None or pair[1] - pair[0] < cfg.truncation_rise:
            continue
        ids = [e.episode_id for e in eps if e.status == "truncated"
               and (e.truncated_by if e.truncated_by in TRUNCATION_REASONS else "other") == reason]
        alerts.append(Alert(step, "truncation_rising",
                            f"the {reason} budget cuts more episodes: {pair[0]:.0%} -> {pair[1]:.0%} over "
                            f"the last {w} steps (train.truncation decides what they teach; raise the "
                            f"budget or read one)", pair[1] - pair[0], cfg.truncation_rise, key=reason,
                            episode_ids=ids[:MAX_LINKED_EPISODES]))
    return alerts


DETECTORS: dict[str, Detector] = {
    "flag_rate_rising": flag_rate_rising,
    "reward_without_heldout": reward_without_heldout,
    "task_reward_spike": task_reward_spike,
    "length_blowup": length_blowup,
    "entropy_collapse": entropy_collapse,
    "zero_variance_groups": zero_variance_groups,
    "mismatch_kl": mismatch_kl,
    "mismatch_ratio": mismatch_ratio,
    "no_tool_calls": no_tool_calls,
    "truncation_rising": truncation_rising,
}
"""Every anomaly detector, by name."""


def detect(history: History, step: int, episodes: list[Episode], cfg: MonitorConfig) -> list[Alert]:
    """Run every detector on the history (which already holds `step`)."""
    return [a for fn in DETECTORS.values() for a in fn(history, step, episodes, cfg)]
