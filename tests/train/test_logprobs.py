"""Log-probs over chunks of positions (rlvr.train.logprobs) equal the dense path's: log-probs, entropy, the
update's loss and its gradients, with temperature, tied and untied heads, LoRA, bf16, and on 2 FSDP2 ranks.

Run as a script (`torchrun --nproc-per-node 2 tests/train/test_logprobs.py OUT`) this file is one rank of the
2-rank check."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlvr.config import TrainConfig
from rlvr.train import logprobs, update
from rlvr.train.logprobs import dense_scores, token_scores
from rlvr.train.update import PolicyUpdater, Sample

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 97


def llama(tied: bool = True, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
                      attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seven positions per chunk, so every test crosses chunk boundaries."""
    monkeypatch.setitem(logprobs.CHUNK_BYTES, "cpu", 4 * VOCAB * 7)


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (4, 23), generator=g)
    att = torch.ones_like(ids)
    att[1, 17:] = 0
    att[2, 9:] = 0
    att[3, 20:] = 0
    return ids, att


def grads(model, fn, ids, att, temperature: float) -> tuple[object, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    weights = torch.linspace(-1.0, 2.0, ids.numel()).view_as(ids).float()
    sc = fn(model, ids, att, temperature, entropy_mask=att)
    (sc.logp * weights * att).sum().backward()
    return sc, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_trained(grads: dict[str, torch.Tensor]) -> None:
    """Equal gradients mean something only when there are some: the reference side's are not all zero."""
    assert grads and any(float(g.detach().norm()) > 0 for g in grads.values()), "no gradient at all"


def assert_rel(a: torch.Tensor, b: torch.Tensor, rtol: float) -> None:
    a, b = a.detach(), b.detach()
    assert float((a - b).norm()) <= rtol * max(float(b.norm()), 1e-12), (float((a - b).norm()),
                                                                         float(b.norm()))


@pytest.mark.parametrize("tied,temperature", [(True, 1.0), (False, 0.7), (True, 0.0)])
def test_chunked_equals_dense_logprobs_entropy_and_gradients(tied: bool, temperature: float) -> None:
    model = llama(tied)
    ids, att = batch()
    a, ga = grads(model, token_scores, ids, att, temperature)
    b, gb = grads(model, dense_scores, ids, att, temperature)
    assert_rel(a.logp * att, b.logp * att, 1e-5)
    assert a.logp[:, 0].abs().max() == 0
    assert_rel(a.entropy * att, b.entropy * att, 1e-5)
    assert ga.keys() == gb.keys() and ga
    assert_trained(gb)
    for name in gb:
        assert_rel(ga[name], gb[name], 1e-5)


def test_gpt2_with_its_tied_head(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 30), generator=torch.Generator().manual_seed(3))
    att = torch.ones_like(ids)
    a, ga = grads(model, token_scores, ids, att, 0.9)
    b, gb = grads(model, dense_scores, ids, att, 0.9)
    assert_rel(a.logp, b.logp, 1e-5)
    assert_trained(gb)
    for name in gb:
        assert_rel(ga[name], gb[name], 1e-5)


def test_lora_adapters_get_the_dense_gradient() -> None:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(llama(),
                           LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                      target_modules=["q_proj", "v_proj"],
                                               init_lora_weights=False))
    ids, att = batch(2)
    a, ga = grads(model, token_scores, ids, att, 1.0)
    b, gb = grads(model, dense_scores, ids, att, 1.0)
    assert_rel(a.logp * att, b.logp * att, 1e-5)
    assert any("lora_" in n for n in ga) and ga.keys() == gb.keys()
    assert_trained(gb)
    for name in gb:
        assert_rel(ga[name], gb[name], 1e-5)


def test_bf16_autocast_matches_the_dense_path_in_bf16() -> None:
    model = llama()
    ids, att = batch(4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a, ga = grads(model, token_scores, ids, att, 1.0)
        b, gb = grads(model, dense_scores, ids, att, 1.0)
    assert_rel(a.logp * att, b.logp * att, 1e-5)  # the same bf16 matmul per position, then float32
    for name in gb:
        assert ga[name].dtype == torch.float32
        assert_rel(ga[name], gb[name], 2e-2)  # per-chunk bf16 sums round differently from one big matmul


def test_no_chunk_holds_the_whole_vocabulary_for_every_position(monkeypatch: pytest.MonkeyPatch) -> None:
    """The largest float32 tensor alive in the forward and backward is one chunk of logits, not (B, T, V)."""
    model = llama()
    ids = torch.randint(0, VOCAB, (2, 200), generator=torch.Generator().manual_seed(5))
    biggest = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        biggest[0] = max(biggest[0], t.numel() if t.shape[-1:] == (VOCAB,) else 0)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        sc = token_scores(model, ids, torch.ones_like(ids), 1.0)
    sc.logp.sum().backward()
    assert biggest[0] <= VOCAB * VOCAB  # the head's weight, never 2 x 199 x V logits


def samples(n: int = 4, seed: int = 0) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = 12 + 5 * i
        ids = torch.randint(0, VOCAB, (length,), generator=g).tolist()
        mask = [0] * 6 + [1] * (length - 6)
        old = [0.0] * 6 + (-torch.rand(length - 6, generator=g) * 3 - 2).tolist()
        out.append(Sample(ids, mask, old, advantage=(-1.0) ** i * (0.5 + i)))
    return out


def update_grads(cfg: TrainConfig, dense: bool, monkeypatch: pytest.MonkeyPatch, ref: bool = False):
    """Loss, metrics and gradients of one optimizer step's accumulation on a fresh model."""
    model = llama()
    with monkeypatch.context() as m:
        if dense:
            m.setattr(update, "token_scores", dense_scores)
        upd = PolicyUpdater(model, cfg, pad_id=0, temperature=0.8, ref_model=llama(seed=9) if ref else None)
        chunk = samples()
        upd.optimizer.zero_grad()
        totals = update.BatchTotals(tokens=float(sum(sum(s.loss_mask) for s in chunk)),
                                    sequences=float(len(chunk)))
        losses = []
        for micro, _ in upd.micro_batches(chunk):
            loss, _ = upd.micro_loss(micro, totals, update.MismatchProbe())
            loss.backward()
            losses.append(float(loss))
        prox = upd.with_proximal(chunk)
    return sum(losses), {n: p.grad.clone() for n, p in model.named_parameters()}, prox


@pytest.mark.parametrize("train", [{}, {"kl_coef": 0.1, "loss": "gspo", "aggregation": "sequence"},
                                   {"micro_batch_size": 2, "loss": "cispo"}])
def test_the_update_loss_and_gradients_equal_the_dense_path(train: dict,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = TrainConfig(**train)
    loss_a, ga, prox_a = update_grads(cfg, False, monkeypatch, ref=cfg.kl_coef > 0)
    loss_b, gb, prox_b = update_grads(cfg, True, monkeypatch, ref=cfg.kl_coef > 0)
    assert abs(loss_a - loss_b) <= 1e-5 * abs(loss_b)
    assert_trained(gb)
    for name in gb:
        assert_rel(ga[name], gb[name], 1e-5)
    for a, b in zip(prox_a, prox_b):
        assert_rel(torch.tensor(a.proximal), torch.tensor(b.proximal), 1e-5)


# ---------------------------------------------------------------------------------------------- 2 ranks
@pytest.mark.timeout(300)
def test_chunked_log_probs_and_gradients_on_two_ranks(tmp_path: Path) -> None:
    """Each rank of a 2-rank gloo job computes chunked log-probs and the gradient of its half of the batch,
    under FSDP2, FSDP2 with activation checkpointing and DDP with it; the gathered full gradients equal the
    dense gradient of the whole batch in one process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", __file__, str(tmp_path)], capture_output=True, text=True,
                          timeout=240, env=env, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    model = llama()
    ids, att = batch()
    b, gb = grads(model, dense_scores, ids, att, 0.8)
    for setup in RANK_SETUPS:
        got = torch.load(tmp_path / f"{setup}.pt")
        assert_rel(got["logp"] * att, b.logp * att, 1e-5)
        assert got["grads"].keys() == gb.keys()
        assert_trained(gb)
        for name in gb:
            assert_rel(got["grads"][name], gb[name], 1e-5)
    assert json.loads((tmp_path / "rank1.json").read_text()) == {"fsdp": True, "fsdp+ac": True,
                                                                 "ddp+ac": False}


RANK_SETUPS = {"fsdp": ("fsdp", False), "fsdp+ac": ("fsdp", True), "ddp+ac": ("ddp", True)}
"""Name -> (sharding, activation checkpointing) of the 2-rank check."""


def _rank_main(out: Path) -> None:
    import torch.distributed as tdist
    from torch.distributed.tensor import DTensor

    from rlvr.train.activations import enable_activation_checkpointing
    from rlvr.train.distributed import Dist, shard

    logprobs.CHUNK_BYTES["cpu"] = 4 * VOCAB * 7
    tdist.init_process_group("gloo")
    rank, world = tdist.get_rank(), tdist.get_world_size()
    sharded = {}
    for name, (sharding, ac) in RANK_SETUPS.items():
        model = shard(llama(), Dist(rank=rank, world_size=world, backend="gloo", sharding=sharding))
        if ac:
            enable_activation_checkpointing(model)
        ids, att = batch()
        mine = slice(rank, None, world)  # this rank's rows of the batch
        weights = torch.linspace(-1.0, 2.0, ids.numel()).view_as(ids).float()
        sc = token_scores(model, ids[mine], att[mine], 0.8)
        (sc.logp * weights[mine] * att[mine]).sum().mul(world).backward()  # the ranks average: x world sums
        full = {n.removeprefix("module."): (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad)
                for n, p in model.named_parameters()}
        logp = [torch.zeros_like(sc.logp) for _ in range(world)]
        tdist.all_gather(logp, sc.logp.detach().contiguous())
        sharded[name] = any(isinstance(p, DTensor) for p in model.parameters())
        if rank == 0:
            rows = torch.zeros(ids.shape)
            for r in range(world):
                rows[r::world] = logp[r]
            torch.save({"logp": rows, "grads": {n: g.detach() for n, g in full.items()}}, out / f"{name}.pt")
    (out / f"rank{rank}.json").write_text(json.dumps(sharded))
    tdist.destroy_process_group()


if __name__ == "__main__":
    _rank_main(Path(sys.argv[1]))
