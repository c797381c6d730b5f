"""`rlvr tasks profile`: sample k episodes a task with a policy and profile them (`rlvr.schedule.profile`):
pass rates, tiers, the learnable share, reward variance and whether the verifier is deterministic."""
from __future__ import annotations

from collections.abc import Callable

from rlvr import run
from rlvr.config import RunConfig
from rlvr.errors import UserError
from rlvr.schedule.profile import DETERMINISM_SAMPLE, ProfileReport, check_determinism, profile_episodes
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import Scorer
from rlvr.verify.verdict import Verdict

__all__ = ["run_profile"]


def run_profile(policy_spec: str | None, tasks_spec: str, k: int, *, seed: int = 0,
                cfg: RunConfig | None = None,
                sample: int = DETERMINISM_SAMPLE,
                progress: Callable[[int, int], None] | None = None) -> ProfileReport:
    """Sample `k` episodes per task of `tasks_spec` with the policy, then profile them.

    The run is built from `cfg` (`rlvr.run`): its `[tasks.domains]` settings, its sandbox pool (pool actors on
    the cluster when `[cluster] address` is set), its `[policy]` with `policy_spec` over it, and its
    schedule's tier thresholds."""
    if k < 1:
        raise UserError(f"-k must be >= 1, got {k}", field="k",
                        fix="sample at least 2 per task to see variance")
    cfg = run.with_policy(cfg or RunConfig(), policy_spec)
    cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"group_size": k})})
    tasks = run.tasks_of(tasks_spec, cfg, seed=seed)
    if not tasks:
        raise UserError("no tasks selected", field="tasks", fix="name a domain or pack with tasks")
    with run.build(cfg, seed=seed, progress=progress, domains={t.domain for t in tasks}) as built:
        assert built.rollouts is not None  # built with a policy
        episodes = built.rollouts.run(tasks, k, step=0, seed=seed)
        # re-verification must not be answered from a cache
        fresh = Scorer(built.pool, retries=0, cache=False)

        def reverify(task: Task, final: FinalState, ep_seed: int) -> Verdict:
            return fresh.score(task, final, ep_seed).verdict

        by_key = {t.key: t for t in tasks}
        det = check_determinism(by_key, episodes, reverify, sample=sample, seed=seed)
    return profile_episodes(tasks, episodes, k, cfg.schedule, det)
