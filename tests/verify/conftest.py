"""Fixtures of the verifier tests: one sandbox pool for the whole session."""
from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from rlvr.sandbox.base import SandboxPool


@pytest.fixture(scope="session")
def pool() -> Iterator[SandboxPool]:
    """The isolated pool where this machine has one, else the unisolated stand-in (same protocol)."""
    from rlvr.errors import SandboxUnavailable
    from rlvr.sandbox import make_pool

    try:
        p = make_pool(workers=1)
        with p.lease() as sb:
            if not sb.run(["python", "-c", "print(1)"]).ok:
                p.close()
                raise SandboxUnavailable("the sandbox cannot run python here")
    except SandboxUnavailable:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = make_pool(isolation="none")
    yield p
    p.close()
