"""Fixtures of the env tests: a plain-subprocess pool and a pool whose sandboxes die on command."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

from rlvr.sandbox.result import ExecResult, ExecStatus
from rlvr.sandbox.unsafe import UnsafePool


class FlakyPool:
    """Wraps UnsafePool: the first `dead_leases` leases die (every command is an infra_error) once they have
    run `die_after` commands successfully."""

    def __init__(self, dead_leases: int = 1, die_after: int = 0) -> None:
        self.inner = UnsafePool(warn=False)
        self.dead_leases = dead_leases
        self.die_after = die_after
        self.leases = 0

    @contextmanager
    def lease(self, files=None) -> Iterator[object]:
        self.leases += 1
        dying = self.leases <= self.dead_leases
        with self.inner.lease(files) as sb:
            if dying:
                real_run, budget = sb.run, [self.die_after]

                def run(argv: Sequence[str], *a, **kw) -> ExecResult:
                    if budget[0] <= 0:
                        return ExecResult(status=ExecStatus.infra_error, error="worker killed")
                    budget[0] -= 1
                    return real_run(argv, *a, **kw)

                sb.run = run  # type: ignore[method-assign]
            yield sb

    def run(self, argv, files=None, stdin=None, limits=None, read=()):
        return self.inner.run(argv, files=files, stdin=stdin, limits=limits, read=read)

    def close(self) -> None:
        pass


@pytest.fixture(scope="session")
def pool() -> UnsafePool:
    return UnsafePool(warn=False)
