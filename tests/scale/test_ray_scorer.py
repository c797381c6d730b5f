"""The Scorer on a real local Ray cluster: a verdict replays exactly on either path, extras included."""
from __future__ import annotations

from pathlib import Path

import pytest
from tests.verify.redteam import TASKS, build

from rlvr.config import SandboxConfig
from rlvr.sandbox.unsafe import UnsafePool
from rlvr.tasks import registry
from rlvr.tasks.loaders import load_task_dir
from rlvr.tasks.spec import FinalState
from rlvr.verify.scorer import Scorer
from rlvr.verify.verdict import Verdict

PARTLY = "import math\n\n\ndef gcd(a, b):\n    return math.gcd(a, b) if a % 3 else 1\n"
"""Right on about two thirds of inputs: the score depends on which hidden cases are drawn."""


@pytest.fixture(scope="module")
def ray_pool(ray_cluster):
    from rlvr.scale.ray_pool import RayPool

    p = RayPool(ray_cluster.address, SandboxConfig(isolation="none", workers=1), slots_per_node=2)
    yield p
    p.close()


@pytest.mark.filterwarnings("ignore")
def test_same_task_final_state_and_seed_give_the_same_verdict_locally_and_on_ray(ray_pool,
                                                                                 tmp_path: Path) -> None:
    task = load_task_dir(build(tmp_path, next(t for t in TASKS if t.name == "gcd")))
    final = FinalState(files={**task.workspace, "num.py": PARTLY})
    local, remote = Scorer(UnsafePool(warn=False), cache=False), Scorer(ray_pool, cache=False)
    assert remote.remote is ray_pool and local.remote is None

    def seen(v: Verdict) -> tuple:
        return v.score, v.seed, [(c.name, c.score, c.detail) for c in v.checks]

    local_v = {seed: local.score(task, final, seed).verdict for seed in (1, 2, 3)}
    remote_v = {seed: remote.score(task, final, seed).verdict for seed in local_v}
    for v in (*local_v.values(), *remote_v.values()):
        assert v.infra_error is None and v.seed is not None, v
    runs, got = ({seed: seen(v) for seed, v in vs.items()} for vs in (local_v, remote_v))
    assert got == runs, f"remote {remote_v}\nlocal {local_v}"  # the whole verdicts: details and timings too
    # seeds draw different cases
    assert len({r[0] for r in runs.values()} | {r[1] for r in runs.values()}) > 3


@pytest.mark.filterwarnings("ignore")
def test_extras_reach_a_verifier_on_ray(ray_pool, tmp_path: Path) -> None:
    src = registry.make("mesh", part="blocks", tier="easy")
    task = src.get(0)
    scored = Scorer(ray_pool, extras={"preview_dir": str(tmp_path)}).score(task, src.gold(task), seed=0)
    assert scored.verdict.passed, scored.verdict
    assert Path(scored.verdict.details["preview"]).parent == tmp_path and list(tmp_path.glob("*.png"))
