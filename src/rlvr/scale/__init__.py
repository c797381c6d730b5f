"""Ray backends for the sandbox pool and rollout workers. Needs rlvr[ray]."""
