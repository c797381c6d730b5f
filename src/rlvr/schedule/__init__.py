"""What to practise next: domain mixing, pass-rate tracking, tiers, budgets."""
from rlvr.schedule.passrates import PassRateTable, TaskStat
from rlvr.schedule.scheduler import Scheduler
from rlvr.schedule.tiers import ALWAYS, LEARNABLE, NEVER, TIER_NAMES, UNSEEN, tier_of

__all__ = ["ALWAYS", "LEARNABLE", "NEVER", "TIER_NAMES", "UNSEEN", "PassRateTable", "Scheduler", "TaskStat",
           "tier_of"]
