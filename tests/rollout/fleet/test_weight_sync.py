"""The weight-sync group (rlvr.rollout.fleet.weight_sync): the bucket plan and a broadcast between two ranks
in one process, bit for bit, for every dtype and layout; what a sync sends: unchanged frozen blocks skipped,
every change of them seen, LoRA adapters as peft saves them (no Ray, no vLLM)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from rlvr.rollout.fleet.weight_sync import (
    ALIGN,
    Changes,
    WeightGroup,
    adapter_weights,
    base_weights,
    bucket_size,
    buckets,
    frozen_mask,
    is_adapter_model,
    tensor_aliases,
    tensor_meta,
    unit_of,
)


def test_bucket_plan_is_aligned_and_bounded() -> None:
    meta = [("a", "float32", (10,)), ("b", "bfloat16", (3,)), ("big", "float32", (100,)),
            ("c", "int64", (2,))]
    plan = buckets(meta, limit=128)
    assert [[s.index for s in b] for b in plan] == [[0, 1], [2], [3]]  # 400 bytes goes alone
    assert all(s.offset % ALIGN == 0 for b in plan for s in b)
    assert all(bucket_size(b) <= 128 for b in plan if len(b) > 1)
    assert sum(s.nbytes for b in plan for s in b) == 40 + 6 + 400 + 16


def test_weight_group_broadcasts_every_dtype_and_layout() -> None:
    """Two ranks in one process (threads): what rank 0 sends is what rank 1 receives, bit for bit."""
    g = torch.Generator().manual_seed(0)
    pairs = [("w", torch.randn(3, 5, generator=g)), ("half", torch.randn(7, generator=g).to(torch.bfloat16)),
             ("ids", torch.arange(4, dtype=torch.int64).reshape(2, 2)),
             ("mask", torch.tensor([True, False, True])),
             ("t", torch.randn(5, 3, generator=g).t()), ("scalar", torch.tensor(2.5)),
             ("empty", torch.zeros(0, 4)),
             ("large", torch.randn(300, generator=g))]
    pairs.append(("tied", pairs[0][1]))  # the very same tensor under another name: sent once, received twice
    pairs.append(("view", pairs[0][1].reshape(15)))  # same memory, another shape: sent as its own tensor
    store = WeightGroup.host_store("127.0.0.1", 2, timeout_s=30)
    with ThreadPoolExecutor(2) as pool:
        joining = pool.submit(WeightGroup.open, "127.0.0.1", store.port, 1, 2, "gloo", timeout_s=30)
        sender = WeightGroup.open("127.0.0.1", store.port, 0, 2, "gloo", store=store, timeout_s=30)
        receiver = joining.result(timeout=30)
        sender.bucket_bytes = receiver.bucket_bytes = 256  # several buckets
        meta, aliases = tensor_meta(pairs), tensor_aliases(pairs)
        got = pool.submit(lambda: [(k, v.clone()) for k, v in receiver.receive(meta, aliases)])
        sent = sender.send(pairs, aliases)
        received = got.result(timeout=30)
    assert aliases == {len(pairs) - 2: 0}
    assert len(buckets(meta, 256, aliases)) >= 3
    assert sent == sum(t.numel() * t.element_size() for _, t in pairs[:-2]) + pairs[-1][1].numel() * 4
    assert sorted(k for k, _ in received) == sorted(k for k, _ in pairs)
    want = dict(pairs)
    for name, have in received:
        assert have.dtype == want[name].dtype and have.shape == want[name].shape and torch.equal(have,
                                                                                                 want[name])
    sender.close()
    receiver.close()


# ------------------------------------------------------------------------------------- what a sync sends
def tiny_llama(layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=layers,
                                        num_attention_heads=2, num_key_value_heads=1,
                                        max_position_embeddings=64,
                                        tie_word_embeddings=True))


def sent_names(changes: Changes, model) -> set[str]:
    pairs = [(k, v.detach()) for k, v in model.state_dict().items()]
    chosen, prints = changes.select(pairs, frozen_mask(model, pairs))
    changes.commit(prints)
    return {k for k, _ in chosen}


def test_units_are_blocks_or_modules() -> None:
    assert unit_of("model.layers.3.self_attn.q_proj.weight") == "model.layers.3"
    assert unit_of("transformer.h.0.attn.c_attn.bias") == "transformer.h.0"
    assert unit_of("model.embed_tokens.weight") == "model.embed_tokens"
    assert unit_of("lm_head.weight") == "lm_head"


def test_frozen_tensors_are_skipped_until_they_change_however_they_change() -> None:
    """Frozen embeddings and a frozen block go once; an in-place change (through the parameter, or behind
    autograd's back through `.data`, which torch's version counter does not see) sends them again, with their
    whole block; trainable tensors always go."""
    model = tiny_llama()
    everything = set(model.state_dict())
    model.model.embed_tokens.weight.requires_grad_(False)
    for p in model.model.layers[0].parameters():
        p.requires_grad_(False)
    changes = Changes()
    assert sent_names(changes, model) == everything  # the first sync: the engines' copy is unknown
    block0 = {k for k in everything if k.startswith("model.layers.0.")}
    embed = {"model.embed_tokens.weight", "lm_head.weight"}  # tied: one tensor under two names
    steady = everything - block0 - embed
    assert sent_names(changes, model) == steady
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.5)  # bumps the version counter
    assert sent_names(changes, model) == steady | embed
    v = model.model.layers[0].self_attn.q_proj.weight
    before = v._version
    v.data.add_(1e-3)  # does not bump it
    assert v._version == before
    assert sent_names(changes, model) == steady | block0  # q_proj goes with k, v, o and the rest of its block
    assert sent_names(changes, model) == steady
    changes.forget()
    assert sent_names(changes, model) == everything


def test_trainable_tensors_are_always_sent() -> None:
    model = tiny_llama(layers=1)
    changes = Changes()
    assert sent_names(changes, model) == sent_names(changes, model) == set(model.state_dict())


def test_adapter_weights_are_what_peft_saves(tmp_path) -> None:
    import json

    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    model = get_peft_model(tiny_llama(), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    pairs, config = adapter_weights(model)
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "adapter_model.safetensors")
    assert sorted(k for k, _ in pairs) == sorted(saved) and all(torch.equal(v, saved[k]) for k, v in pairs)
    on_disk = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["r"] == on_disk["r"] == 4 and config["lora_alpha"] == 8
    assert sorted(config["target_modules"]) == sorted(on_disk["target_modules"])
    assert is_adapter_model(model) and not is_adapter_model(tiny_llama())
    base = dict(base_weights(model))
    assert sorted(base) == sorted(tiny_llama().state_dict()) and not any(".lora_" in k for k in base)


def test_adapters_are_written_as_safetensors_reads_them(tmp_path) -> None:
    from safetensors.torch import load_file

    from rlvr.rollout.fleet.actor import write_safetensors

    buf = torch.randn(40)
    pairs = [("a.lora_A.weight", buf[:12].view(3, 4)), ("b.lora_B.weight", buf[12:20].to(torch.bfloat16)),
             ("c", torch.arange(3)), ("empty", torch.zeros(0, 2))]  # views of one buffer, as received
    write_safetensors(tmp_path / "x.safetensors", pairs)
    back = load_file(tmp_path / "x.safetensors")
    assert sorted(back) == sorted(k for k, _ in pairs)
    assert all(back[k].dtype == v.dtype and torch.equal(back[k], v) for k, v in pairs)
