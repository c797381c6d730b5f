"""Fixtures of the domain tests: the verifier tests' session pool."""
from tests.verify.conftest import pool  # noqa: F401  (the fixture, shared)
