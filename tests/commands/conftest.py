"""Fixtures of the command tests: the rollout tests' tiny model."""
from tests.rollout.conftest import tiny_dir  # noqa: F401  (the fixture, shared)
