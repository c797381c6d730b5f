"""SFT warm start: example sources, malformed input, encoding as the engine renders, and that it learns."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.config import SFTConfig
from rlvr.envs.messages import Message
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.train.sft import SFTExample, encode, jsonl_examples, reference_examples, train_sft


def test_reference_examples_come_from_gold_answers_below_the_heldout_offset() -> None:
    src = registry.make("code", tier="tiny")
    exs = reference_examples([src], 30, seed=1, limit_index=500)
    assert len(exs) == 30
    by_prompt = {src.get(i).prompt: src.gold(src.get(i)).answer for i in range(500)}
    assert all(by_prompt.get(ex.prompt) == ex.completion for ex in exs)  # every one is a training task's gold


def test_multi_turn_tasks_give_no_examples() -> None:
    with pytest.raises(UserError, match="no single-turn reference answers"):
        reference_examples([registry.make("code", tier="easy")], 3, limit_index=50)


def test_jsonl_examples_and_malformed_lines(tmp_path: Path) -> None:
    good = tmp_path / "sft.jsonl"
    good.write_text('{"prompt": "1+1=", "completion": "2"}\n\n{"prompt": "2+2=", "completion": "4"}\n')
    assert jsonl_examples(good) == [SFTExample("1+1=", "2"), SFTExample("2+2=", "4")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": 3}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2.*prompt and completion"):
        jsonl_examples(bad)
    bad.write_text('{"prompt": "a", "completion": "b"}\nnot json\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2.*invalid JSON"):
        jsonl_examples(bad)
    bad.write_text("\n\n")
    with pytest.raises(UserError, match="no records"):
        jsonl_examples(bad)
    with pytest.raises(UserError, match="no such SFT file"):
        jsonl_examples(tmp_path / "missing.jsonl")


def test_encoding_matches_the_engine_prompt_and_masks_only_the_completion(tiny_policy) -> None:
    ex = SFTExample("def f(x):\n    return ", "x+1")
    enc = encode(tiny_policy, ex, max_len=1000)
    prompt = tiny_policy.encode(tiny_policy.render([Message(role="user", content=ex.prompt)]))
    assert enc.ids[:len(prompt)] == prompt  # exactly what the rollout engine feeds the model
    assert enc.ids[len(prompt):] == tiny_policy.encode("x+1") + [tiny_policy.tokenizer.eos_token_id]
    assert enc.mask == [0] * len(prompt) + [1] * 4
    short = encode(tiny_policy, ex, max_len=5)
    assert len(short.ids) == len(short.mask) == 5


def test_sft_learns_the_examples(tiny_policy) -> None:
    exs = [SFTExample(f"q{i}", a) for i, a in enumerate(["ab", "cd", "ef", "gh"])]
    seen: list[float] = []
    version = tiny_policy.version
    metrics = train_sft(tiny_policy, exs, SFTConfig(enabled=True, steps=60, lr=1e-2, batch_size=4),
                        on_step=lambda i, loss: seen.append(loss))
    assert len(seen) == 60 and seen[-1] < seen[0] / 3
    assert metrics["sft/final_loss"] < seen[0] / 3
    assert tiny_policy.version == version + 1


@pytest.mark.parametrize("decay", ["linear", "cosine"])
def test_a_decaying_rate_reaches_lr_final_at_the_last_step(tiny_policy, decay: str) -> None:
    exs = [SFTExample(f"q{i}", a) for i, a in enumerate(["ab", "cd", "ef", "gh"])]
    weight = next(p for p in tiny_policy.model.parameters() if p.requires_grad)
    moved: list[float] = []
    last = [weight.detach().clone()]

    def on_step(step: int, loss: float) -> None:
        moved.append(float((weight.detach() - last[0]).abs().max()))
        last[0] = weight.detach().clone()

    cfg = SFTConfig(enabled=True, steps=6, lr=1e-2, batch_size=4, warmup_steps=1, lr_decay=decay,
                    lr_final=0.0)
    train_sft(tiny_policy, exs, cfg, on_step=on_step)
    assert len(moved) == 6 and all(m > 0 for m in moved[:-1])
    assert moved[-1] == 0.0  # the rate at the last step is lr_final x lr = 0
