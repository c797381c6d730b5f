"""The guard process: work on candidate input under a memory limit and a timeout."""
from __future__ import annotations


def _double(x: int) -> int:
    return 2 * x


def _allocate() -> bytearray:
    return bytearray(8 << 30)


def _spin() -> None:
    while True:
        pass


def _raise() -> None:
    raise ValueError("bad input")


def test_guarded_runs_work_in_a_limited_child() -> None:
    from rlvr.verify.guard import guarded

    assert guarded(_double, 21) == (True, 42)
    done, why = guarded(_allocate, memory_mb=256)
    assert not done and "MemoryError" in str(why)
    done, why = guarded(_spin, timeout_s=0.5)
    assert not done and "longer than" in str(why)
    assert guarded(_raise) == (False, "ValueError: bad input")
