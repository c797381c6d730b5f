"""make_pool: the pool a config asks for, bad options as UserError, no bubblewrap as a one-line refusal."""
from __future__ import annotations

import pytest

from rlvr.config import SandboxConfig
from rlvr.errors import SandboxUnavailable, UserError
from rlvr.sandbox import ExecLimits, limits_from, make_pool
from rlvr.sandbox.pool import BwrapPool
from rlvr.sandbox.unsafe import UnsafePool


def test_isolation_none_warns_loudly_and_runs() -> None:
    with pytest.warns(RuntimeWarning, match="isolation is OFF"):
        pool = make_pool(isolation="none", timeout_s=5.0)
    assert isinstance(pool, UnsafePool) and pool.limits.timeout_s == 5.0
    assert pool.run(["python", "-c", "print(3)"]).stdout == "3\n"


def test_bwrap_pool_from_config() -> None:
    with make_pool(SandboxConfig(workers=1, memory_mb=128), spares=0) as pool:
        assert isinstance(pool, BwrapPool) and pool.limits.memory_mb == 128
        assert pool.run(["python", "-c", "print(4)"]).stdout == "4\n"


@pytest.mark.parametrize("overrides", [{"isolation": "docker"}, {"workers": 0}, {"wokers": 2},
                                       {"memory_mb": "lots"}])
def test_bad_options_are_user_errors(overrides: dict) -> None:
    with pytest.raises(UserError) as exc:
        make_pool(**overrides)
    assert "\n" not in str(exc.value) and "sandbox." in str(exc.value)


def test_missing_bubblewrap_refuses_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr.sandbox import container

    monkeypatch.setattr(container.shutil, "which", lambda name: None)
    monkeypatch.setattr(container.os.path, "exists", lambda p: False)
    with pytest.raises(SandboxUnavailable) as exc:
        make_pool()
    assert "apt-get install -y bubblewrap" in str(exc.value)


def test_limits_from_config() -> None:
    cfg = SandboxConfig(timeout_s=3.0, memory_mb=64, processes=8, output_bytes=2048)
    assert limits_from(cfg) == ExecLimits(timeout_s=3.0, memory_mb=64, processes=8, output_bytes=2048)
