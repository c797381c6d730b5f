"""Fixtures of the monitor tests: a plain-subprocess sandbox pool for episodes played through the real Env."""
from __future__ import annotations

import pytest

from rlvr.sandbox.unsafe import UnsafePool


@pytest.fixture(scope="session")
def pool() -> UnsafePool:
    return UnsafePool(warn=False)
