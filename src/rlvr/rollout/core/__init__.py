"""The episode core: the `Rollouts` contract and its stats, the built-in env loop that drives many episodes at
once (`runner`), the token record of an episode (`tokens`) and GRPO groups (`groups`)."""
