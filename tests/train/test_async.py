"""Asynchronous mode (`train.max_staleness`): rollouts generated ahead from a pinned copy of the weights,
every episode's log-probs from exactly the version it records, reproducible runs, resume with the saved
batches, and the decoupled off-policy correction."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tests.train.test_loop import _cfg, _final, _toy_domain  # noqa: F401  (the fixture registers the toy domain)

from rlvr import run
from rlvr.config import TrainConfig
from rlvr.rollout.episode import Episode
from rlvr.store.episodes import EpisodeStore
from rlvr.train import checkpoint, loop
from rlvr.train.feed import AheadFeed
from rlvr.train.losses import LossSettings, TokenBatch, ppo_clip
from rlvr.train.state import RunState
from rlvr.train.update import PolicyUpdater, Sample, token_logprobs


def _load(model_dir: Path, pairs: list[tuple[str, torch.Tensor]]) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    _, unexpected = model.load_state_dict(dict(pairs), strict=False)
    assert not unexpected
    return model


def _logprobs(model: torch.nn.Module, ep: Episode) -> torch.Tensor:
    ids = torch.tensor([ep.token_ids])
    lp = token_logprobs(model, ids, torch.ones_like(ids), 1.0)[0]
    mask = torch.tensor(ep.loss_mask, dtype=torch.bool)
    return lp[mask]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("ahead", [1, 2])
def test_each_episode_is_sampled_by_the_weights_exactly_k_steps_old(tmp_path: Path, tiny_model_dir: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     ahead: int) -> None:
    published: dict[int, tuple[int, list]] = {}
    real_publish = AheadFeed.publish

    def recording_publish(self, done):
        out = real_publish(self, done)
        published[done] = self.snapshots[done]
        return out

    monkeypatch.setattr(AheadFeed, "publish", recording_publish)
    cfg = _cfg(tmp_path, tiny_model_dir, f"ahead{ahead}", steps=5, max_staleness=ahead, checkpoint_every=10)
    summary = run.train(cfg)
    assert summary["steps"] == 5 and sorted(published) == [0, 1, 2, 3, 4, 5]
    episodes = EpisodeStore(cfg.run_dir).episodes()
    assert sorted({ep.step for ep in episodes}) == [0, 1, 2, 3, 4]
    models = {done: _load(tiny_model_dir, pairs) for done, (_, pairs) in published.items()}
    lagged = 0
    for ep in episodes:
        need = max(0, ep.step - ahead)
        version, _ = published[need]
        assert ep.policy_version == version, (ep.step, ep.policy_version, version)
        behaviour = torch.tensor([p for p, m in zip(ep.logprobs, ep.loss_mask) if m])
        assert torch.allclose(_logprobs(models[need], ep), behaviour, atol=1e-5)
        if ep.step >= ahead:  # and not the weights being trained at that step: the lag is real
            on_policy = _logprobs(models[ep.step], ep)
            lagged += int(not torch.allclose(on_policy, behaviour, atol=1e-4))
    assert lagged > 0
    # the final held-out measurement evaluated the trained weights, not a stale copy
    final = checkpoint.load(str(cfg.run_dir), 5)["model"]
    assert all(torch.equal(final[k], v) for k, v in published[5][1] if k in final)


@pytest.mark.filterwarnings("ignore")
def test_asynchronous_runs_are_reproducible_and_differ_from_synchronous(tmp_path: Path,
                                                                        tiny_model_dir: Path) -> None:
    a = _cfg(tmp_path, tiny_model_dir, "async-a", steps=4, max_staleness=1)
    b = _cfg(tmp_path, tiny_model_dir, "async-b", steps=4, max_staleness=1)
    sync = _cfg(tmp_path, tiny_model_dir, "sync", steps=4)
    run.train(a)
    run.train(b)
    run.train(sync)
    wa, wb, ws = _final(a)["model"], _final(b)["model"], _final(sync)["model"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], ws[k]) for k in wa)


@pytest.mark.filterwarnings("ignore")
def test_killed_asynchronous_run_resumes_with_the_batches_it_had_sampled(
        tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _cfg(tmp_path, tiny_model_dir, "whole", steps=4, max_staleness=1)
    run.train(whole)
    killed = _cfg(tmp_path, tiny_model_dir, "killed", steps=4, max_staleness=1)
    real_step = loop.train_step

    def dying_step(trainer, step, *rest):
        if step == 2:
            raise KeyboardInterrupt  # the rollout of step 2 is done and step 3's is running
        return real_step(trainer, step, *rest)

    monkeypatch.setattr(loop, "train_step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        run.train(killed)
    saved = checkpoint.load(str(killed.run_dir), 2)
    assert RunState.from_dict(saved["run_state"], source="").pending.keys() == {2}  # sampled, not yet trained
    monkeypatch.setattr(loop, "train_step", real_step)
    summary = run.train(killed, resume=True)
    assert summary["resumed_from_step"] == 2 and _final(killed)["step"] == 4

    def tasks_of(cfg, step):
        return sorted(ep.task_id for ep in EpisodeStore(cfg.run_dir).episodes() if ep.step == step)

    for step in range(4):
        assert tasks_of(whole, step) == tasks_of(killed, step), step


def test_stale_groups_are_left_out_and_counted() -> None:
    eps = [Episode(task_id="t", domain="d", group_id=g, policy_version=v)
           for g, v in [("a", 5), ("a", 5), ("b", 3), ("b", 4), ("c", 2)]]
    assert loop.stale_groups(eps, version=5, bound=1) == {"b", "c"}
    assert loop.stale_groups(eps, version=5, bound=3) == set()


# ------------------------------------------------------------------------------------ decoupled correction
def test_decoupled_surrogate_clips_against_the_proximal_policy_and_weights_by_the_truncated_ratio() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.3]]))
    prox = torch.log(torch.tensor([[0.4, 0.3]]))
    weight = torch.tensor([[1.25, 2.0]])  # min(prox / behaviour, cap): the second token was truncated
    batch = TokenBatch(logp=logp, old_logp=prox, advantages=torch.tensor([1.0]), mask=torch.ones(1, 2),
                       is_weight=weight)
    loss, _ = ppo_clip(batch, LossSettings(clip_low=0.2, clip_high=0.2))
    # ratio 1.25 is clipped at 1.2 (advantage > 0), ratio 1 is not; each times its weight, negated
    assert torch.allclose(loss, torch.tensor([[-1.2 * 1.25, -1.0 * 2.0]]))


def _samples(model: torch.nn.Module, shift: float) -> list[Sample]:
    ids = torch.tensor([[1, 5, 9, 14, 3], [1, 7, 2, 11, 6]])
    lp = token_logprobs(model, ids, torch.ones_like(ids), 1.0).detach()
    mask = [0, 0, 1, 1, 1]
    return [Sample(ids[i].tolist(), mask, [float(x) - shift * m for x, m in zip(lp[i], mask)], adv)
            for i, adv in enumerate([1.0, -1.0])]


@pytest.mark.filterwarnings("ignore")
def test_decoupled_update_equals_ppo_on_policy_and_truncates_stale_weights(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    def updated(mode: str, shift: float) -> tuple[dict, dict]:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        up = PolicyUpdater(model, TrainConfig(lr=1e-2, off_policy=mode, is_cap=2.0), pad_id=0)
        metrics = up.step(_samples(model, shift))
        return {k: v.clone() for k, v in model.state_dict().items()}, metrics

    plain, _ = updated("behaviour", 0.0)
    decoupled, metrics = updated("decoupled", 0.0)
    assert all(torch.allclose(plain[k], decoupled[k], atol=1e-6) for k in plain)
    assert metrics["train/is_weight"] == pytest.approx(1.0, abs=1e-5)
    # behaviour log-probs 1 nat lower than the proximal ones: weight e (2.72) truncated at the cap of 2
    _, stale = updated("decoupled", 1.0)
    assert stale["train/is_truncated"] == pytest.approx(1.0)
    assert stale["train/is_weight"] == pytest.approx(2.0)
