"""How the model acts: Env (reset/step), tools, budgets."""
