"""The engine fleet changing under a run (rlvr.rollout.fleet.engines, rlvr.rollout.fleet.members), on a real
multi-node Ray built on this machine with Ray's own `ray.cluster_utils.Cluster` (`vllm` marker, `make
test-vllm`): a killed engine's work is run by the engine left, a replacement is synced to the current weights
before it serves; the fleet grows onto a node added mid-test when generate calls wait, and shrinks when an
engine sits idle; what the cluster can never place is refused in one line."""
from __future__ import annotations

import time

import pytest
import torch

from rlvr.errors import UserError
from rlvr.rollout.policy import SamplingParams
from tests.rollout.fleet.test_vllm_fleet import CONVS, MOVED, TOL, conv, engine, gaps

# 6 groups of 2: every engine gets some
MANY = [conv(f"Task number {t}.") for t in range(6) for _ in range(2)]
MANY_PARAMS = SamplingParams(temperature=1.0, max_new_tokens=8, seeds=tuple(range(len(MANY))))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from rlvr.rollout.policies.builtin import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("elastic"), n_layer=2, n_embd=64, n_head=2,
                            n_positions=256,
                            seed=5)


@pytest.fixture(scope="module")
def ray_cluster():
    """A head node of 2 CPUs (no GPU), nodes added by the tests; this process is its driver."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    assert not ray.is_initialized()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 0})
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def nudge(model, factor: float = 1.05) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(factor)


@pytest.fixture
def two_cpus():
    """A Ray of 2 CPUs and no GPU: this test session's own if it has one (tests/scale's two 1-CPU nodes), else
    a local one for this test."""
    import ray

    if ray.is_initialized():
        assert ray.cluster_resources().get("CPU") == 2 and not ray.cluster_resources().get("GPU")
        yield
        return
    ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_what_the_cluster_can_never_place_is_one_line(two_cpus, model_dir) -> None:
    from rlvr.rollout.fleet.engines import EnginesPolicy

    with pytest.raises(UserError,
                       match=r"\[policy.engines_min\].*3 engines need 3 CPUs; the Ray cluster has 2") as info:
        EnginesPolicy(model_dir, engines=3, engines_min=3, device="cpu")
    assert "\n" not in str(info.value)
    with pytest.raises(UserError, match=r"\[policy.engines_max\]"):
        EnginesPolicy(model_dir, engines=2, engines_max=1, device="cpu")


@engine
def test_a_killed_engine_costs_no_completion_and_its_replacement_serves_the_current_weights(ray_cluster,
                                                                                         model_dir) -> None:
    ray = pytest.importorskip("ray")
    from rlvr.rollout.fleet.engines import EnginesPolicy

    pol = EnginesPolicy(model_dir, engines=2, device="cpu")
    try:
        first = pol.generate(MANY, MANY_PARAMS)
        assert all(c.finish_reason != "error" for c in first)
        assert all(m.served for m in pol.pool.members)  # both engines worked
        victim = pol.pool.members[0]
        ray.kill(victim.actor, no_restart=True)
        again = pol.generate(MANY, MANY_PARAMS)  # the victim's share runs on the engine left
        assert all(c.finish_reason != "error" and c.token_ids for c in again)
        assert gaps(pol.model, again) < TOL
        assert [(e.before, e.after) for e in pol.scale_events] == [(2, 1)]
        assert "lost" in pol.scale_events[0].reason
        assert len(pol.pool.members) == 1 and len(pol.pool.starting) == 1  # the replacement is starting
        # an update while the replacement starts: it must serve these weights, not the files'
        nudge(pol.model)
        pol.version += 1
        pol.sync_weights()  # to the engine left (the group rebuilt over one engine)
        assert pol.await_engines(2, timeout_s=600) == 2
        assert [(e.before, e.after) for e in pol.scale_events] == [(2, 1), (1, 2)]
        new = pol.pool.members[-1]
        assert new.serial not in (victim.serial,) and new.served == 0
        after = pol.generate(MANY, MANY_PARAMS)
        assert new.served > 0 and all(c.policy_version == pol.version for c in after)
        assert gaps(pol.model, after) < TOL
        from transformers import AutoModelForCausalLM

        # what it would hold unsynced
        assert gaps(AutoModelForCausalLM.from_pretrained(model_dir), after) > MOVED
        nudge(pol.model, 0.97)
        pol.version += 1
        pol.sync_weights()  # the rebuilt group carries a sync to both
        assert gaps(pol.model, pol.generate(MANY, MANY_PARAMS)) < TOL
        for m in list(pol.pool.members):
            ray.kill(m.actor, no_restart=True)
        lost = pol.generate(CONVS, SamplingParams(max_new_tokens=4, seeds=(1, 2, 3, 4)))
        # infra, retried later
        assert all(c.finish_reason == "error" and "lost" in (c.error or "") for c in lost)
    finally:
        pol.close()


@engine
def test_the_fleet_grows_onto_a_node_that_joins_and_shrinks_when_idle(ray_cluster, model_dir,
                                                                      monkeypatch) -> None:
    ray = pytest.importorskip("ray")
    from rlvr.rollout.fleet.engines import EnginesPolicy
    from rlvr.scale import cluster

    asked: list[int] = []
    monkeypatch.setattr(cluster, "want", lambda owner, shapes: asked.append(len(shapes)) or list(shapes))

    @ray.remote(num_cpus=1)
    class Hog:  # holds the head's second CPU: a second engine fits only on a new node
        def ping(self) -> int:
            return 1

    hog = Hog.remote()
    ray.get(hog.ping.remote())
    pol = EnginesPolicy(model_dir, engines=1, engines_max=2, scale_up_wait_s=1e-3, device="cpu")
    try:
        pol.generate(MANY, MANY_PARAMS)  # waited longer than 1 ms: scale up
        assert asked == [2] and len(pol.pool.starting) == 1
        time.sleep(5)
        assert all(c.finish_reason != "error" for c in pol.generate(MANY, MANY_PARAMS))  # served meanwhile
        assert len(pol.pool.members) == 1 and len(pol.pool.starting) == 1  # nowhere to place it yet
        node = ray_cluster.add_node(num_cpus=1, num_gpus=0)
        assert pol.await_engines(2, timeout_s=600) == 2
        assert pol.pool.members[-1].info["node_id"] == node.node_id
        assert pol.scale_events[-1].after == 2 and "scale up" in pol.scale_events[-1].reason
        assert gaps(pol.model, pol.generate(MANY, MANY_PARAMS)) < TOL
        pol.scale_up_wait_s = None
        pol.scale_down_idle_s = 0.5
        time.sleep(1.0)
        pol.generate(CONVS[:1], SamplingParams(max_new_tokens=4, seeds=(1,)))
        assert len(pol.pool.members) == 1 and asked[-1] == 1
        assert (pol.scale_events[-1].before, pol.scale_events[-1].after) == (2, 1)
        assert "idle" in pol.scale_events[-1].reason
    finally:
        pol.close()
        ray.kill(hog)
