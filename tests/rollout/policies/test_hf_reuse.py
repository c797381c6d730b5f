"""The hf backend keeps each row's keys and values between calls: a later turn of an episode prefills only its
new tokens, and samples exactly what a fresh prefill of the whole conversation samples (within float noise),
also when the prefix differs, the weights change, the batch is composed differently or the store is full."""
from __future__ import annotations

import pytest
import torch

from rlvr.envs.messages import Message
from rlvr.rollout.policies.hf import HFPolicy, sequence_logprobs
from rlvr.rollout.policies.kvcache import MIN_SHARED, PrefixCache
from rlvr.rollout.policy import SamplingParams

SYSTEM = Message(role="system",
                 content="You are a careful assistant. Use the tools, then answer in one line.")
CONVS = [[SYSTEM, Message(role="user", content=t)]
         for t in ("list the files", "def f(x):\n    return", "?" * 30)]


@pytest.fixture(scope="module")
def pair(tiny_dir) -> tuple[HFPolicy, HFPolicy]:
    """The tiny model twice (own weights each): with the store, and without it (every call prefills all)."""
    return HFPolicy(tiny_dir, device="cpu", threads=1), HFPolicy(tiny_dir, device="cpu", threads=1,
                                                                 kv_reuse_tokens=0)


def prefilled(policy: HFPolicy, fn):
    """fn()'s result and the prompt tokens its forward passes computed (every pass but one-token decode
    steps)."""
    seen: list[int] = []
    hook = policy.model.register_forward_pre_hook(
        lambda mod, args, kw: seen.append(kw["input_ids"].numel()) if kw["input_ids"].shape[1] > 1 else None,
        with_kwargs=True)
    try:
        return fn(), sum(seen)
    finally:
        hook.remove()


def tail(policy: HFPolicy, turn: int, row: int) -> list[int]:
    """What the template adds after a turn: a tool message and the next generation prompt."""
    return policy.encode(f"<|end|><|tool|>output {turn} of row {row}: "
                         f"{'ok ' * (turn % 4)}<|end|><|assistant|>")


def same(a, b, tol: float = 1e-5) -> None:
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.finish_reason for c in a] == [c.finish_reason for c in b]
    for x, y in zip(a, b):
        assert x.prompt_token_ids == y.prompt_token_ids
        assert max((abs(p - q) for p, q in zip(x.logprobs, y.logprobs)), default=0.0) < tol


def teacher_forced(policy: HFPolicy, comps, temperature: float) -> None:
    """Each completion's log-probs are those of one forward pass over its prompt and tokens."""
    for c in comps:
        ref = sequence_logprobs(policy.model, c.prompt_token_ids + c.token_ids, temperature or 1.0)
        assert max(abs(x - y) for x, y in zip(ref[len(c.prompt_token_ids):], c.logprobs)) < 1e-4


def run_episode(reuse: HFPolicy, fresh: HFPolicy, convs, turns: int, temperature: float, top_p: float = 1.0,
                group: int = 1, flips: int = 0) -> list[tuple[int, int]]:
    """Both policies through `turns` turns of the same episodes (prompts extended token by token); checks
    every turn's completions agree and returns the prompt tokens each computed per turn (reusing, fresh).
    `flips` rows in all may sample another token where float noise moves a near tie (a random model's flat
    distributions): their log-probs must still be those of a fresh forward pass."""
    rows = [c for c in convs for _ in range(group)]
    prompts = [reuse.encode(reuse.render(c)) for c in rows]
    computed = []
    for t in range(turns):
        params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=24,
                                seeds=tuple(1000 * t + i for i in range(len(rows))),
                                budgets=tuple(8 + (5 * i + 3 * t) % 17 for i in range(len(rows))))
        got, used = prefilled(reuse, lambda p=params, q=prompts: reuse.generate(rows, p, prompt_token_ids=q))
        ref, full = prefilled(fresh, lambda p=params, q=prompts: fresh.generate(rows, p, prompt_token_ids=q))
        if flips:
            moved = [i for i, (x, y) in enumerate(zip(got, ref)) if x.token_ids != y.token_ids]
            flips -= len(moved)
            assert flips >= 0
            got_same, ref_same = [got[i] for i in range(len(rows)) if i not in moved], [
                ref[i] for i in range(len(rows)) if i not in moved]
            same(got_same, ref_same)
            if top_p == 1.0:
                teacher_forced(reuse, got, temperature)
        else:
            same(got, ref)
        computed.append((used, full))
        prompts = [p + c.token_ids + tail(reuse, t, i) for i, (p, c) in enumerate(zip(prompts, got))]
    return computed


@pytest.mark.parametrize("temperature,top_p", [(0.0, 1.0), (1.0, 1.0), (0.7, 0.9)])
def test_later_turns_prefill_only_their_new_tokens_and_sample_as_a_fresh_prefill(pair, temperature,
                                                                                 top_p) -> None:
    reuse, fresh = pair
    reuse.kv_reuse.clear()
    before = reuse.kv_reuse.reused_tokens
    computed = run_episode(reuse, fresh, CONVS, 6, temperature, top_p, group=2)
    assert reuse.kv_reuse.reused_tokens > before
    assert computed[0][0] == computed[0][1]  # nothing stored yet
    # the tool message, the generation prompt and the last sampled token per row
    for used, full in computed[1:]:
        assert used <= 6 * 40 < full
    assert len(reuse.kv_reuse) == 6  # one stored sequence per row: each turn's replaced the one before


def test_a_llama_model_with_rotary_positions_reuses_exactly(tmp_path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.rollout.policies.builtin import build_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    reuse, fresh = HFPolicy(tmp_path, device="cpu"), HFPolicy(tmp_path, device="cpu", kv_reuse_tokens=0)
    computed = run_episode(reuse, fresh, CONVS, 5, 1.0, group=2, flips=2)
    assert all(3 * used < full for used, full in computed[2:])


def test_a_prompt_that_changes_earlier_tokens_reuses_only_what_it_shares(pair) -> None:
    reuse, fresh = pair
    reuse.kv_reuse.clear()
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seeds=(3, 4, 5))
    prompts = [reuse.encode(reuse.render(c)) for c in CONVS]
    first = reuse.generate(CONVS, params, prompt_token_ids=prompts)
    nxt = [p + c.token_ids + tail(reuse, 0, i) for i, (p, c) in enumerate(zip(prompts, first))]
    cut = len(prompts[0]) - 3
    # a stream that restarted: earlier tokens
    nxt[0] = nxt[0][:cut] + reuse.encode("[elided]") + nxt[0][cut + 1:]
    nxt[1] = nxt[1][:len(prompts[1]) + 2]  # a shorter prompt: part of what was generated
    nxt[2] = [nxt[2][0] + 1] + nxt[2][1:]  # differs from the first token: nothing to reuse
    before = reuse.kv_reuse.reused_tokens
    same(reuse.generate(CONVS, params, prompt_token_ids=nxt),
         fresh.generate(CONVS, params, prompt_token_ids=nxt))
    assert reuse.kv_reuse.reused_tokens - before == cut + len(prompts[1]) + 1


def test_changed_weights_empty_the_store(pair) -> None:
    reuse, fresh = pair
    reuse.kv_reuse.clear()
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    prompts = [reuse.encode(reuse.render(c)) for c in CONVS]
    first = reuse.generate(CONVS, params, prompt_token_ids=prompts)
    nxt = [p + c.token_ids + tail(reuse, 0, i) for i, (p, c) in enumerate(zip(prompts, first))]
    with torch.no_grad():  # an optimizer step without a version bump
        for policy in pair:
            for p in policy.model.parameters():
                p.mul_(1.05)
    before = reuse.kv_reuse.reused_tokens
    same(reuse.generate(CONVS, params, prompt_token_ids=nxt),
         fresh.generate(CONVS, params, prompt_token_ids=nxt))
    assert reuse.kv_reuse.reused_tokens == before  # the old keys were not used
    reuse.version += 1  # a new policy version empties it too
    later = [p + tail(reuse, 1, 0) for p in nxt]
    reuse.generate(CONVS, params, prompt_token_ids=later)
    assert reuse.kv_reuse.reused_tokens == before


def test_the_generation_copy_keeps_its_store_until_a_sync(tiny_dir) -> None:
    policy = HFPolicy(tiny_dir, device="cpu")
    fresh = HFPolicy(tiny_dir, device="cpu", kv_reuse_tokens=0)
    policy.separate_weights()
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seeds=(1, 2, 3))
    prompts = [policy.encode(policy.render(c)) for c in CONVS]
    first = policy.generate(CONVS, params, prompt_token_ids=prompts)
    with torch.no_grad():  # the trainer's weights move; the copy's do not, so its keys stay valid
        for p in policy.model.parameters():
            p.add_(0.01)
    policy.version += 1
    nxt = [p + c.token_ids + tail(policy, 0, i) for i, (p, c) in enumerate(zip(prompts, first))]
    before = policy.kv_reuse.reused_tokens
    same(policy.generate(CONVS, params, prompt_token_ids=nxt),
         fresh.generate(CONVS, params, prompt_token_ids=nxt))
    assert policy.kv_reuse.reused_tokens > before
    policy.sync_weights()  # now the copy has the new weights: nothing stored may be used
    with torch.no_grad():
        for p in fresh.model.parameters():
            p.add_(0.01)
    later = [p + tail(policy, 1, 0) for p in nxt]
    before = policy.kv_reuse.reused_tokens
    same(policy.generate(CONVS, params, prompt_token_ids=later),
         fresh.generate(CONVS, params, prompt_token_ids=later))
    assert policy.kv_reuse.reused_tokens == before


def test_other_batches_reuse_exactly_and_the_store_stays_under_its_cap(tiny_dir, pair) -> None:
    _, fresh = pair
    fresh.model.load_state_dict(HFPolicy(tiny_dir, device="cpu").model.state_dict())
    small = HFPolicy(tiny_dir, device="cpu", kv_reuse_tokens=400)
    params = SamplingParams(temperature=1.0, max_new_tokens=20, seeds=(7, 8, 9))
    prompts = [small.encode(small.render(c)) for c in CONVS]
    first = small.generate(CONVS, params, prompt_token_ids=prompts)
    assert small.kv_reuse.tokens <= 400
    nxt = [p + c.token_ids + tail(small, 0, i) for i, (p, c) in enumerate(zip(prompts, first))]
    # the rows come back one at a time, in another order, beside a new conversation
    for i in (2, 0, 1):
        convs = [CONVS[i], [Message(role="user", content=f"new {i}")]]
        rows = [nxt[i], small.encode(small.render(convs[1]))]
        p = SamplingParams(temperature=1.0, max_new_tokens=20, seeds=(i, 50 + i))
        same(small.generate(convs, p, prompt_token_ids=rows), fresh.generate(convs, p, prompt_token_ids=rows))
        assert small.kv_reuse.tokens <= 400


def kv(n: int) -> torch.Tensor:
    return torch.zeros((1, 2, 1, n, 2))


def test_prefix_cache_lookup_store_and_eviction() -> None:
    cache = PrefixCache(max_tokens=100)
    a = list(range(40))
    cache.store(a, kv(40))
    assert cache.lookup(a + [99]) == (0, 40)
    assert cache.lookup(a) == (0, 39)  # a prompt keeps its last token to prefill
    assert cache.lookup(a[:MIN_SHARED - 1] + [7] * 30) == (None, 0)  # too short a common part
    assert cache.lookup(a[:20] + [7] * 30)[1] == 20
    cache.store(list(range(100, 150)), kv(50))
    cache.lookup(a + [1])  # a is now the most recently used
    cache.store(list(range(200, 230)), kv(30))  # 120 tokens: the least recently used goes
    assert cache.tokens == 70 and cache.lookup(list(range(100, 150)) + [1]) == (None, 0)
    cache.store(list(range(500)), kv(500))  # longer than the cap: not kept
    assert cache.tokens == 70
    with pytest.raises(ValueError):
        cache.store([1, 2], kv(3))
    cache.check(("other weights",))
    assert len(cache) == 0 and cache.tokens == 0
