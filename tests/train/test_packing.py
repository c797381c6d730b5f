"""Micro-batches by token budget (rlvr.train.packing): packed episodes score as they do alone, the update's
gradient equals one episode at a time, length-grouped padding stays within 10 %, bad budgets are refused."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from tests.train.test_logprobs import VOCAB, assert_rel, llama

from rlvr.config import TrainConfig
from rlvr.errors import UserError
from rlvr.train import logprobs, packing, update
from rlvr.train.logprobs import token_scores
from rlvr.train.packing import packed, plan, token_micro_batches, unpack
from rlvr.train.update import PolicyUpdater, Sample


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(logprobs.CHUNK_BYTES, "cpu", 4 * VOCAB * 7)


def episodes(n: int, seed: int = 0, vocab: int = VOCAB) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(8, 40, (1,), generator=g))
        ids = torch.randint(0, vocab, (length,), generator=g).tolist()
        cut = length // 3
        old = [0.0] * cut + (-torch.rand(length - cut, generator=g) * 3 - 1).tolist()
        out.append(Sample(ids, [0] * cut + [1] * (length - cut), old, advantage=float(i % 3) - 1.0))
    return out


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_each_packed_episode_scores_as_it_does_alone(kind: str, tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = llama() if kind == "llama" else AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    eps = episodes(4, seed=3, vocab=model.config.vocab_size)
    lay = packed([e.token_ids for e in eps], [e.loss_mask for e in eps], torch.device("cpu"))
    assert lay.attention_mask is None and lay.padding == 0
    width = max(len(e.token_ids) for e in eps)
    together = unpack(token_scores(model, lay.input_ids, None, 0.9, position_ids=lay.position_ids).logp, lay,
                      width)
    for i, e in enumerate(eps):
        ids = torch.tensor([e.token_ids])
        alone = token_scores(model, ids, torch.ones_like(ids), 0.9).logp[0]
        assert_rel(together[i, :len(e.token_ids)], alone, 1e-5)
        assert not together[i, len(e.token_ids):].any()


def step_grads(cfg: TrainConfig, monkeypatch: pytest.MonkeyPatch, pack: bool = True) -> tuple[dict, dict]:
    model = llama()
    with monkeypatch.context() as m:
        if not pack:
            m.setattr(update, "can_pack", lambda model: False)
        upd = PolicyUpdater(model, cfg, pad_id=0, temperature=0.8)
        chunk = episodes(7)
        totals = update.BatchTotals(tokens=float(sum(sum(s.loss_mask) for s in chunk)),
                                    sequences=float(len(chunk)),
                                    norm_length=float(cfg.norm_length))
        stats: dict[str, list[float]] = {}
        for micro, _ in upd.micro_batches(chunk):
            loss, st = upd.micro_loss(micro, totals)
            loss.backward()
            for k, v in st.items():
                stats.setdefault(k, []).append(v)
    return {n: p.grad.clone() for n, p in model.named_parameters()}, stats


@pytest.mark.parametrize("train", [{"aggregation": "token"}, {"aggregation": "sequence", "loss": "gspo"},
                                   {"aggregation": "constant", "loss": "cispo", "norm_length": 16}])
@pytest.mark.parametrize("pack", [True, False])
def test_a_token_budget_gives_the_gradient_of_one_episode_at_a_time(train: dict, pack: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    alone, _ = step_grads(TrainConfig(micro_batch_size=1, **train), monkeypatch)
    budget, stats = step_grads(TrainConfig(micro_batch_tokens=80, **train), monkeypatch, pack=pack)
    assert len(stats["computed_tokens"]) < 7  # several episodes per micro-batch
    assert max(stats["computed_tokens"]) <= 80
    if pack:
        assert sum(stats["padded_tokens"]) == 0
    for name in alone:
        assert_rel(budget[name], alone[name], 1e-5)


def test_the_step_logs_the_padding_fraction() -> None:
    eps = episodes(6)
    padded = PolicyUpdater(llama(), TrainConfig(micro_batch_size=6), pad_id=0).step(eps)
    longest, total = max(len(e.token_ids) for e in eps), sum(len(e.token_ids) for e in eps)
    assert padded["train/padding_fraction"] == pytest.approx(1 - total / (6 * longest))
    budget = PolicyUpdater(llama(), TrainConfig(micro_batch_tokens=64), pad_id=0).step(eps)
    assert budget["train/padding_fraction"] == 0.0


def test_length_grouping_pads_at_most_a_tenth() -> None:
    rng = random.Random(0)
    lengths = [rng.choice([rng.randint(10, 60), rng.randint(200, 900)]) for _ in range(200)]
    for budget in (900, 2000, 5000):
        groups = plan(lengths, budget, pack=False)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        for g in groups:
            width = max(lengths[i] for i in g)
            assert len(g) * width <= budget
            assert len(g) * width - sum(lengths[i] for i in g) <= packing.MAX_PADDING * len(g) * width
        rows = plan(lengths, budget, pack=True)
        assert sorted(i for g in rows for i in g) == list(range(len(lengths)))
        assert all(sum(lengths[i] for i in g) <= budget for g in rows)


def test_ranks_get_as_many_micro_batches_and_every_episode_once() -> None:
    lengths = [50, 40, 30, 30, 20, 10, 5]
    chunk = list(range(len(lengths)))
    per_rank = [token_micro_batches(chunk, lengths, 60, True, rank=r, world_size=2) for r in range(2)]
    assert len(per_rank[0]) == len(per_rank[1])
    live = sorted(i for mbs in per_rank for micro, ok in mbs if ok for i in micro)
    assert live == chunk


def test_a_budget_below_the_longest_episode_is_one_line_naming_the_field() -> None:
    with pytest.raises(UserError) as err:
        PolicyUpdater(llama(), TrainConfig(micro_batch_tokens=10), pad_id=0).step(episodes(3))
    msg = str(err.value)
    assert "[train.micro_batch_tokens]" in msg and "at least" in msg and "\n" not in msg
