"""The real model's chat template and the token record over multi-turn tool episodes.

Each episode's first turn is a tool call the model is made to say (its tokens teacher-forced, with the model's
own log-probs), so that every episode has a tool message to render; the later turns are sampled. The token
record's invariant is checked against one forward pass over the whole record: every token with loss_mask 1
has the log-prob it was sampled with, so it was sampled after exactly the tokens before it.
"""
from __future__ import annotations

import json

import pytest

from rlvr.config import RolloutConfig
from rlvr.envs.tools import TOOLS
from rlvr.errors import UserError
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.policies.builtin import CHAT_TEMPLATE
from rlvr.rollout.policies.hf import HFPolicy, sequence_logprobs
from rlvr.rollout.policy import Completion, SamplingParams
from rlvr.tasks.loaders import load_task_dir
from tests.conftest import ADD_HIDDEN, ADD_WORKSPACE, write_task

from .conftest import TOOLS_TEMPLATE

pytestmark = pytest.mark.real

READ = '<tool_call>{"name": "read_file", "arguments": {"path": "add.py"}}</tool_call>'
SUBMIT = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
TOLERANCE = 1e-3
"""Log-prob agreement between batched, left-padded sampling and one unpadded forward pass (float32)."""


class Forced(HFPolicy):
    """The real model made to say `turns` first (teacher-forced, with its own log-probs), then sampling."""

    turns: list[str]

    def generate(self, conversations, params, *, prompt_token_ids=None):
        out: list[Completion | None] = [None] * len(conversations)
        sample = []
        for i, (conv, prompt) in enumerate(zip(conversations, prompt_token_ids)):
            n = sum(m.role == "assistant" for m in conv)
            if n >= len(self.turns):
                sample.append(i)
                continue
            ids = self.encode(self.turns[n]) + [min(self.eos_ids)]
            lps = sequence_logprobs(self.model, prompt + ids, params.temperature or 1.0)[len(prompt):]
            out[i] = Completion(text=self.decode(ids), token_ids=ids, logprobs=lps, prompt_token_ids=prompt)
        if sample:
            sub = SamplingParams(temperature=params.temperature, top_p=params.top_p,
                                 max_new_tokens=params.max_new_tokens,
                                 seeds=tuple(params.seeds[i] for i in sample),
                                 budgets=tuple(params.budgets[i] for i in sample) if params.budgets else None)
            for i, comp in zip(sample, super().generate([conversations[i] for i in sample], sub,
                                                        prompt_token_ids=[prompt_token_ids[i]
                                                                          for i in sample])):
                out[i] = comp
        return out


def forced(policy: HFPolicy, turns: list[str]) -> Forced:
    f = Forced.__new__(Forced)
    f.__dict__.update(policy.__dict__)
    f.turns = turns
    return f


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("pack")
    write_task(root, "add", toml='id = "add"\ndomain = "code"\n[limits]\nmax_turns = 3\nmax_tokens = 400\n',
               workspace=ADD_WORKSPACE, hidden=ADD_HIDDEN)
    return load_task_dir(root / "add")


def run(policy, task, pool, turns, group=2):
    eng = EnvRollouts(forced(policy, turns), pool, config=RolloutConfig(tool_workers=2),
                        sampling=SamplingParams(temperature=1.0, max_new_tokens=16))
    return eng.run([task], group, seed=7)


def check_record(policy: HFPolicy, ep, tools=None) -> None:
    """The token record is the template's rendering of the transcript, and every trained token was sampled
    (or forced) after exactly the tokens before it."""
    assert len(ep.token_ids) == len(ep.loss_mask) == len(ep.logprobs)
    assert ep.metadata["token_restarts"] == 0 and sum(ep.loss_mask) == ep.num_generated_tokens > 0
    last = max(i for i, m in enumerate(ep.messages) if m.role == "assistant")
    kw = {"tools": tools} if tools else {}
    expected = policy.render(ep.messages[:last + 1], add_generation_prompt=False, **kw)
    text = policy.tokenizer.decode(ep.token_ids, skip_special_tokens=False)
    assert expected.startswith(text) and len(expected) - len(text) <= len("<|im_end|>\n"), (text[-200:],
                                                                                            expected[-200:])
    ref = sequence_logprobs(policy.model, ep.token_ids)
    diffs = [abs(r - lp) for r, lp, m in zip(ref, ep.logprobs, ep.loss_mask) if m]
    assert max(diffs) < TOLERANCE, max(diffs)
    assert all(lp == 0.0 for lp, m in zip(ep.logprobs, ep.loss_mask) if not m)


def test_real_template_and_token_record_over_a_tool_episode(real, task, pool) -> None:
    assert not real.native_tools  # SmolLM2's template has no tools: the Env's system message describes them
    eps = run(real, task, pool, [READ])
    for ep in eps:
        roles = [m.role for m in ep.messages]
        assert roles[:4] == ["system", "user", "assistant", "tool"] and ep.num_turns >= 2 and not ep.masked
        assert "def add(a, b)" in ep.messages[3].content  # the tool ran in the sandbox
        text = real.tokenizer.decode(ep.token_ids, skip_special_tokens=False)
        assert text.startswith("<|im_start|>system\nAct by calling tools") and "<|im_start|>tool\n" in text
        assert "Tools: list_files(" in ep.messages[0].content  # the text description, the fallback
        check_record(real, ep)
    assert eps[0].token_ids != eps[1].token_ids  # two samples of the group, each its own seed


def test_tool_schemas_go_natively_to_a_template_that_takes_tools(real_dir, task, pool) -> None:
    native = HFPolicy(real_dir, device="cpu", max_context=2048, chat_template=str(TOOLS_TEMPLATE))
    assert native.native_tools
    specs = [t.spec() for t in TOOLS.values()]
    [ep] = run(native, task, pool, [READ, SUBMIT], group=1)
    assert ep.status == "done" and [m.role for m in ep.messages][2:] == ["assistant", "tool", "assistant",
                                                                         "tool"]
    text = native.tokenizer.decode(ep.token_ids, skip_special_tokens=False)
    assert "<tools>" in text and json.dumps(specs[0]["function"]["name"]) in text
    assert all(f'"name": "{t.name}"' in text for t in TOOLS.values())
    assert "<tool_response>\ndef add(a, b)" in text  # tool messages rendered by the template's own rule
    check_record(native, ep, tools=specs)


def test_a_base_model_without_a_chat_template_uses_the_plain_fallback(real, real_dir, task, pool,
                                                                      tmp_path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (base / name).symlink_to(real_dir / name)
    tok = real.tokenizer.__class__.from_pretrained(real_dir)
    tok.chat_template = None
    tok.save_pretrained(base)
    assert not (base / "chat_template.jinja").exists()
    plain = HFPolicy(base, device="cpu", max_context=1024)  # policy.chat_template = "auto"
    assert plain.tokenizer.chat_template == CHAT_TEMPLATE
    ep = run(plain, task, pool, [READ], group=1)[0]
    text = plain.tokenizer.decode(ep.token_ids, skip_special_tokens=False)
    assert text.startswith("<|system|>Act by calling tools") and "<|tool|>def add(a, b)" in text
    assert len(ep.token_ids) == len(ep.loss_mask) and ep.metadata["token_restarts"] == 0
    ref = sequence_logprobs(plain.model, ep.token_ids)
    assert max(abs(r - lp) for r, lp, m in zip(ref, ep.logprobs, ep.loss_mask) if m) < TOLERANCE


def test_a_template_that_refuses_tool_messages_is_one_line(real_dir, task, pool, tmp_path) -> None:
    strict = tmp_path / "strict.jinja"
    strict.write_text("{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
                      "{{ raise_exception('Conversation roles must be system, user or assistant') "
                      "}}{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    policy = HFPolicy(real_dir, device="cpu", max_context=1024, chat_template=str(strict))
    with pytest.raises(UserError) as err:
        run(policy, task, pool, [READ], group=1)
    msg = str(err.value)
    assert "\n" not in msg and str(real_dir) in msg and "tool messages" in msg and "roles must be" in msg
    assert 'policy.chat_template = "plain"' in msg
