"""What to practise next: domain mixing, pass-rate tracking, tiers, budgets."""
from rlvr.schedule.passrates import PassRateTable, TaskStat
from rlvr.schedule.scheduler import Scheduler, group_rewards
from rlvr.schedule.tiers import ALWAYS, LEARNABLE, NEVER, TIER_NAMES, UNSEEN, tier_of

__all__ = ["ALWAYS", "LEARNABLE", "NEVER", "TIER_NAMES", "UNSEEN", "PassRateTable", "Scheduler", "TaskStat",
           "group_rewards", "tier_of"]
