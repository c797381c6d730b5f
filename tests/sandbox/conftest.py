"""One warm isolated pool shared by the sandbox tests (starting one costs about a second)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlvr.sandbox.pool import BwrapPool
from rlvr.sandbox.result import ExecLimits

TIGHT = ExecLimits(timeout_s=1.5, memory_mb=96, processes=24, output_bytes=4096, workspace_mb=8,
                   file_size_mb=4)


@pytest.fixture(scope="session")
def pool() -> Iterator[BwrapPool]:
    with BwrapPool(workers=2, spares=1) as p:
        yield p
