"""What to practise next: domain mixing, pass-rate tracking, tiers, budgets."""
