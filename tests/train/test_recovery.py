"""Gold trajectories as the SFT warm start and failures back in the loop as recovery samples: what they train
on, and that a held-out task never reaches either."""
from __future__ import annotations

import pytest
import torch

from rlvr.config import RolloutConfig, SFTConfig, load_config
from rlvr.envs.messages import Message
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.episode import Episode
from rlvr.rollout.policies.gold import GOLD_SAMPLING, tool_call_text
from rlvr.sandbox.unsafe import UnsafePool
from rlvr.tasks import registry
from rlvr.tasks.source import ListSource
from rlvr.train.recovery import RecoveryMixer, honest_failure
from rlvr.train.sft import draw_tasks, gold_examples, train_sft
from rlvr.verify.scorer import Scorer
from rlvr.verify.verdict import Flag, Verdict


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A tiny model with room for a whole tool episode."""
    from rlvr.rollout.policies.builtin import build_tiny_model
    from rlvr.rollout.policies.hf import HFPolicy

    path = build_tiny_model(tmp_path_factory.mktemp("wide"), n_layer=1, n_embd=32, n_head=2, n_positions=8192,
                            seed=5)
    return HFPolicy(path, device="cpu", threads=1)


@pytest.fixture(scope="module")
def pool():
    return UnsafePool(warn=False)


def _engine_for(pool):
    return lambda policy: EnvRollouts(policy, pool, Scorer(pool), config=RolloutConfig(),
                                      sampling=GOLD_SAMPLING)


def test_drawn_tasks_never_include_a_held_out_one() -> None:
    pack = registry.make("code", tier="easy")
    finite = ListSource([pack.get(i) for i in range(12)], name="code")
    heldout = {t.key for t in finite.sample(6, seed=3)}
    drawn = draw_tasks([finite], 12, seed=3, exclude=heldout)
    assert drawn and not {t.key for _, t in drawn} & heldout and len(drawn) == 6
    procedural = draw_tasks([pack], 20, seed=1, limit_index=50)
    assert all(t.index < 50 for _, t in procedural)  # below the held-out offset


def test_gold_examples_are_token_records_that_sft_learns_from(wide, pool) -> None:
    src = registry.make("code", tier="easy")
    examples = gold_examples([src], 3, _engine_for(pool), wide, seed=0, limit_index=100)
    assert len(examples) == 3
    for ex in examples:
        assert len(ex.ids) == len(ex.mask) and sum(ex.mask) > 0 and ex.mask[0] == 0
    before = [p.detach().clone() for p in wide.model.parameters()]
    metrics = train_sft(wide, examples, SFTConfig(steps=3, batch_size=2, lr=1e-3))
    assert metrics["sft/examples"] == 3 and metrics["sft/final_loss"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, wide.model.parameters()))


def test_a_domain_without_references_cannot_give_gold_examples(pool) -> None:
    from rlvr.errors import UserError
    from rlvr.tasks.spec import Task

    bare = ListSource([Task(id="t", domain="bare", prompt="p", workspace={"a.py": "x"})], name="bare")
    with pytest.raises(UserError, match="domain 'bare' has no reference solutions"):
        gold_examples([bare], 1, _engine_for(pool), None)


def _failed(task) -> Episode:
    bad = [tool_call_text("write_file", {"path": "solution.py", "content": "def oops(:\n"}),
           tool_call_text("run_tests"), tool_call_text("submit")]
    return Episode(task_id=task.id, domain=task.domain, status="done",
                   verdict=Verdict(score=0.0, passed=False),
                   messages=[Message(role="user", content=task.prompt)]
                   + [Message(role="assistant", content=b) for b in bad])


def test_failures_become_recovery_samples_and_one_sft_step(wide, pool) -> None:
    tasks = registry.make("code", tier="easy").sample(2, seed=9)
    mixer = RecoveryMixer(wide, SFTConfig(recovery_every=2, recovery_samples=4, lr=1e-3), _engine_for(pool))
    mixer.observe(tasks, [_failed(t) for t in tasks])
    assert [mixer.due(s) for s in range(4)] == [False, True, False, True]
    version = wide.version
    before = [p.detach().clone() for p in wide.model.parameters()]
    metrics = mixer.step(seed=1)
    assert (metrics["recovery/failures"] == 2 and metrics["recovery/samples"] == 2
            and metrics["recovery/loss"] > 0)
    assert wide.version == version + 1 and mixer.failures == []
    assert any(not torch.equal(a, b) for a, b in zip(before, wide.model.parameters()))


def test_held_out_flagged_and_passed_episodes_never_become_recovery_samples(wide, pool) -> None:
    tasks = registry.make("code", tier="easy").sample(3, seed=4)
    held = tasks[0]
    mixer = RecoveryMixer(wide, SFTConfig(recovery_every=1), _engine_for(pool), heldout={held.key})
    flagged = _failed(tasks[1]).model_copy(update={"verdict": Verdict(
        score=0.0, passed=False, flags=[Flag(kind="tampering", message="edited the tests")])})
    passed = _failed(tasks[2]).model_copy(update={"verdict": Verdict(score=1.0, passed=True)})
    assert not honest_failure(flagged) and not honest_failure(passed)
    mixer.observe(tasks, [_failed(held), flagged, passed])
    assert mixer.failures == []
    assert mixer.step() == {"recovery/failures": 0.0, "recovery/samples": 0.0}


def test_recovery_on_several_ranks_trains_every_rank_on_rank_0s_samples(wide, monkeypatch) -> None:
    """Recovery samples on N ranks: rank 0 (which holds the step's failures) plays them, every other rank
    receives its token records and takes the same SFT step, split across the ranks (`sft_step` with the run's
    ranks, the step one rank takes: the equivalence runs of tests/train/test_distributed.py). A rank other
    than 0 never plays a sample. Such a run is no longer refused."""
    from rlvr.train import recovery as recovery_mod
    from rlvr.train.sft import Encoded

    records = [Encoded([1, 2, 3, 4], [0, 0, 1, 1]), Encoded([5, 6, 7], [0, 1, 1])]

    class RankOne:
        main, active, world_size, rank = False, True, 2, 1

        def broadcast(self, obj: object) -> object:
            assert obj is None  # nothing of its own to send
            return {"recovery/failures": 2.0, "recovery/samples": 2.0}, records

    def no_play(policy: object) -> object:
        raise AssertionError("only rank 0 plays recovery samples")
    taken: list[tuple[list[Encoded], object]] = []
    monkeypatch.setattr(recovery_mod, "sft_step",
                        lambda model, batch, pad, opt, params, dist: taken.append((batch, dist)) or 0.5)
    rank = RankOne()
    mixer = RecoveryMixer(wide, SFTConfig(recovery_every=1), no_play, dist=rank)  # type: ignore[arg-type]
    before = wide.version
    out = mixer.step(seed=3)
    assert taken == [(records, rank)] and out == {"recovery/failures": 2.0, "recovery/samples": 2.0,
                                                 "recovery/loss": 0.5}
    assert wide.version == before + 1
    assert load_config(None, ["sft.recovery_every=2", "train.world_size=2"]).sft.recovery_every == 2


def test_a_recovery_step_runs_at_the_rate_the_warm_start_ended_on() -> None:
    from rlvr.train.recovery import recovery_lr

    assert recovery_lr(SFTConfig(lr=2e-3, steps=600)) == pytest.approx(2e-3)  # constant
    assert recovery_lr(SFTConfig(lr=2e-3, steps=600, warmup_steps=20, lr_decay="cosine", lr_final=0.1)) \
        == pytest.approx(2e-4)
