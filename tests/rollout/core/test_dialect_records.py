"""The token record of a 10-turn tool episode in each model family's own dialect, through the real engine and
Env: each family's published chat template around a small BPE tokenizer (tests/families.py), a model that
writes its turns as its template writes them (reasoning, several calls, a malformed call, a turn without a
call).

What must hold for every family: each turn's prompt extends the one before it by exactly the tokens sampled
and the template's text after them (no re-tokenised separator), and every sampled token is trained after
exactly the prefix it was sampled after (in the record or one of its segments). Where the family's template
keeps earlier turns as they were, the record is one segment whose text is a fresh render of the conversation;
where it rewrites them, the record starts a new segment there, and `RESTARTS` says when and why
(docs/DIALECTS.md); its last segment is then again a fresh render of the whole conversation."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from rlvr.config import RolloutConfig
from rlvr.envs.dialects import Dialect, resolve
from rlvr.envs.messages import Message, ToolCall, message_dicts
from rlvr.envs.tools import tools_for
from rlvr.errors import UserError
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.core.tokens import ChatTemplateCodec, end_texts
from rlvr.rollout.policy import Completion, SamplingParams
from rlvr.tasks.spec import Task, TaskLimits
from tests.families import FAMILIES, end_ids, family_tokenizer

WS = {"sol.py": "def add(a, b):\n    return a - b\n"}
FIXED = "def add(a, b):\n    return a + b\n"


def _calls(*spec: tuple[str, dict[str, str]]) -> list[ToolCall]:
    return [ToolCall(name=n, arguments=a) for n, a in spec]


SCRIPT: list[tuple[str, str, list[ToolCall] | None]] = [
    ("The fix is probably in sol.py.", "I'll look first.",
     _calls(("list_files", {}), ("read_file", {"path": "sol.py"}))),
    ("Does it import?", "", _calls(("run", {"command": "python -c 'import sol'"}))),
    ("Run it.", "", None),  # a call cut off mid-arguments: malformed
    ("Hm.", "Thinking it over.", []),  # no call at all
    ("Subtraction: the bug.", "Writing the fix.",
     _calls(("write_file", {"path": "sol.py", "content": FIXED}))),
    ("Check it.", "", _calls(("run", {"command": "python -c 'import sol; print(sol.add(1, 2))'"}))),
    ("Read it back.", "", _calls(("read_file", {"path": "sol.py"}))),
    ("Anything else?", "", _calls(("list_files", {"pattern": "*.py"}))),
    ("One more look.", "", _calls(("run", {"command": "cat sol.py"}))),
    ("It passes.", "Done.", _calls(("submit", {}))),
]
"""(reasoning, text, calls) of each turn; calls None: the malformed turn; []: text only. Every turn reasons,
as a model in thinking mode does (a family without reasoning blocks leaves it out)."""

RESTARTS = {
    "qwen2.5": 0, "qwen3-coder": 0, "llama-3.1": 0, "kimi-k2": 0, "kimi-k2-instruct": 0,
    "qwen3": 2, "qwen3.5": 2, "glm-4.5": 2, "deepseek-v3": 2,
    "mistral-small-3.2": 2, "gpt-oss": 2, "mistral-nemo": 4, "gemma-4": 3,
}
"""Times the record starts a new segment in this episode, and why (docs/DIALECTS.md):
- 0: the template prints an earlier turn as it was sampled (ChatML; Qwen3-Coder, which has no reasoning;
  Llama, whose calls go one a turn or `;`-separated; Kimi K2, both revisions).
- qwen3, qwen3.5, glm-4.5: a turn after the last user message keeps its reasoning; the Env's feedback to the
  malformed turn (3) and to the turn without a call (4) is a user message, after which the template drops the
  reasoning of every turn before it: two rewrites.
- deepseek-v3: a turn that follows the user (turn 1, and turn 5 after the feedback to turn 4) is rendered
  without its reasoning once it is history (the generation prompt opens `<think>`, the history drops up to
  `</think>`).
- mistral-small-3.2: the malformed turn is rendered from its one readable call (`tool_calls`), and the tool
  list, written before the last user message, moves after the turn without a call.
- gpt-oss: the malformed turn is rendered from its one readable call, and the turn without a call is a final
  answer, after which the template drops the analysis of the tool turns before it.
- mistral-nemo: the system prompt and the tool list are written with the last user message, so they move at
  turn 2 and after each user message (3 and 4); and the malformed turn is rendered from its readable call:
  four."""


class FamilyModel(ChatTemplateCodec):
    """A model of one family: its template and tokenizer; it writes each scripted turn the way its template
    writes an assistant turn (its canonical form), else in its dialect's own form, and records every prompt it
    is given."""

    def __init__(self, family: str) -> None:
        self.family, self.name = family, family
        self.tokenizer = family_tokenizer(family)
        self.dialect: Dialect = resolve("auto", self.tokenizer.chat_template)
        self.eos_ids = end_ids(self.tokenizer, family)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.max_context, self.version, self.model = 1 << 20, 0, None
        self.prompts: list[list[int]] = []
        self.sampled: list[list[int]] = []
        self.given: list[Message] = []
        """The conversation a gateway test is holding (the gateway sends the model token ids only)."""

    generation_version = property(lambda self: self.version)

    def separate_weights(self) -> None:
        pass

    def sync_weights(self, weights: Any = None, version: int | None = None) -> None:
        return None

    def write(self, conversation: Sequence[Message], k: int) -> tuple[str, str]:
        """(text, end token) of scripted turn `k`."""
        reasoning, text, calls = SCRIPT[min(k, len(SCRIPT) - 1)]
        d = self.dialect
        if calls is None:
            cut = _calls(("read_file", {"path": "sol.py"}), ("run", {"command": "CUT"}))
            whole = d.format_turn(cut, text)
            return whole[:whole.index("CUT")], FAMILIES[self.family]["eos"][0]
        msgs = message_dicts(conversation, d)
        try:
            prompt = self.render_dicts(msgs, True)
            full = self.render_dicts([*msgs, d.structured(text, calls, reasoning)], False)
        except UserError:  # Llama's renders one call a turn: the model writes several its own way
            prompt, full = "", None
        ends = end_texts(self.tokenizer, self.eos_ids)
        if full is not None and full.startswith(prompt):
            turn = full[len(prompt):]
            at, end = min(((turn.index(e), e) for e in ends if e in turn), default=(len(turn), ""))
            if end in d.markers:
                return turn[:at + len(end)], ""
            return turn[:at], end or (d.turn_end if calls else None) or FAMILIES[self.family]["eos"][0]
        think = f"{d.think[0]}\n{reasoning}\n{d.think[1]}\n\n" if reasoning and d.think else ""
        if d.think and prompt.rstrip().endswith(d.think[0]):
            think = think[len(d.think[0]) + 1:] if think else f"\n{d.think[1]}\n\n"
        return think + d.format_turn(calls, text), FAMILIES[self.family]["eos"][0]

    def generate(self, conversations: Sequence[list[Message]], params: SamplingParams, *,
                 prompt_token_ids: Sequence[list[int] | None] | None = None) -> list[Completion]:
        out = []
        for conv, prompt in zip(conversations, prompt_token_ids or [None] * len(conversations)):
            if not any(m.content for m in conv):  # the gateway sends token ids only
                conv = self.given
            k = sum(m.role == "assistant" for m in conv)
            text, end = self.write(conv, k)
            ids = self.encode(text) + ([self.tokenizer.convert_tokens_to_ids(end)] if end else [])
            self.prompts.append(list(prompt or []))
            self.sampled.append(ids)
            out.append(Completion(text=self.decode_turn(ids), token_ids=ids, logprobs=[-0.25] * len(ids),
                                  prompt_token_ids=list(prompt or [])))
        return out


def _task() -> Task:
    return Task(id="fix", domain="toy", prompt="Fix add in sol.py.", workspace=WS,
                verifier={"kind": "test-rollout-file"}, limits=TaskLimits(max_turns=12, max_tokens=100_000))


def _runs(mask: list[int], ids: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i, (m, t) in enumerate(zip(mask, ids)):
        if m and (i == 0 or not mask[i - 1]):
            out.append([])
        if m:
            out[-1].append(t)
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_ten_turn_episode_records_exactly_what_was_sampled(pool, family: str) -> None:
    model = FamilyModel(family)
    eng = EnvRollouts(model, pool, config=RolloutConfig(tool_workers=1),
                        sampling=SamplingParams(temperature=0.0, max_new_tokens=4096))
    [ep] = eng.run([_task()], group_size=1)
    assert ep.num_turns == 10 and ep.status == "done", (family, ep.status, ep.metadata.get("error"))
    assert ep.metadata["tool_format"] == model.dialect.name == FAMILIES[family]["dialect"]
    assert ep.metadata["call_errors"] == 1 and ep.metadata["tool_calls"] >= 8
    # each prompt extends the one before by the sampled tokens, unless the record started a new segment there
    restarts = 0
    for k in range(1, len(model.prompts)):
        before = model.prompts[k - 1] + model.sampled[k - 1]
        restarts += model.prompts[k][:len(before)] != before
    assert restarts == ep.metadata["token_restarts"] == RESTARTS[family], family
    # every sampled turn is trained once, after exactly its prompt
    records = [*ep.metadata.get("segments", []), {"token_ids": ep.token_ids, "loss_mask": ep.loss_mask}]
    trained = [run for r in records for run in _runs(r["loss_mask"], r["token_ids"])]
    assert trained == model.sampled
    for r in records:
        ids = r["token_ids"]
        starts = [i for i, m in enumerate(r["loss_mask"]) if m and (i == 0 or not r["loss_mask"][i - 1])]
        assert all(ids[:i] in [p for p in model.prompts if len(p) == i] for i in starts)
    # the record (its last segment, where it started over) reads as a fresh render of the whole conversation,
    # in every family: the template's text after the last turn aside (ChatML's newline) and the end token
    # sampled (GLM's <|observation|>, which its template writes with the next message)
    last = max(i for i, m in enumerate(ep.messages) if m.role == "assistant")
    tools = [t.spec() for t in tools_for(_task()).values()]
    fresh = model.render(ep.messages[:last + 1], add_generation_prompt=False, tools=tools)
    text = model.tokenizer.decode(ep.token_ids, skip_special_tokens=False)
    ends = end_texts(model.tokenizer, model.eos_ids)
    assert fresh.rstrip() == text.rstrip() or (text.startswith(fresh.rstrip()) and text[len(fresh.rstrip()):]
                                               in ends), (family, text[-300:], fresh[-300:])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_gold_trajectories_speak_each_familys_form(pool, family: str) -> None:
    from rlvr.rollout.policies.gold import plan_for, play
    from rlvr.tasks import registry
    from rlvr.verify.scorer import Scorer

    model = FamilyModel(family)
    task = registry.make("code", tier="easy").get(4)
    engine_for = lambda p: EnvRollouts(p, pool, Scorer(pool), config=RolloutConfig(),
                                         sampling=SamplingParams(temperature=0.0, max_new_tokens=1 << 20))
    [ep] = play([plan_for(task)], engine_for, encoder=model)  # kept: it passed, its calls read in its form
    assert ep.metadata["tool_format"] == model.dialect.name and ep.metadata["call_errors"] == 0
    turns = [m.content for m in ep.messages if m.role == "assistant"]
    calls = [model.dialect.parse(t).calls for t in turns]
    assert all(calls) and calls[-1][-1].name == "submit"
    assert all(len(c) == 1 for c in calls) or not model.dialect.single_call
    records = [*ep.metadata.get("segments", []), {"token_ids": ep.token_ids, "loss_mask": ep.loss_mask}]
    trained = [run for r in records for run in _runs(r["loss_mask"], r["token_ids"])]
    assert len(trained) == len(turns)
    for ids, text in zip(trained, turns):  # each trained turn: the text the Env read, then an end token
        assert ids[-1] in model.eos_ids and model.decode_turn(ids) == text


@pytest.mark.parametrize("family", ["qwen3.5", "gpt-oss", "mistral-small-3.2", "llama-3.1"])
def test_the_gateway_reads_a_familys_calls_and_extends_its_record(family: str) -> None:
    import json

    from rlvr.rollout.gateway.core import Gateway

    model = FamilyModel(family)
    gw = Gateway(model, SamplingParams(temperature=0.0, max_new_tokens=4096))
    try:
        session = gw.open_session("e1")
        auth = {"authorization": f"Bearer {session.key}"}
        tools = [t.spec() for t in tools_for(_task()).values()]
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix add in sol.py."}]
        model.given = [Message(role="user", content=msgs[0]["content"])]
        for turn in range(2):
            body = {"model": "m", "messages": msgs, "tools": tools}
            r = gw.handle("POST", "/v1/chat/completions", auth, body)
            assert r.status == 200, r.body
            msg = r.body["choices"][0]["message"]
            sampled = model.dialect.parse(model.decode_turn(model.sampled[-1]), tools).calls
            scripted = [c.name for c in SCRIPT[turn][2] or []]
            assert sampled and [c.name for c in sampled] == scripted[:len(sampled)]
            sent = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                    for c in msg["tool_calls"]]
            assert sent == [(c.name, c.arguments) for c in sampled]
            msgs.append({k: v for k, v in msg.items() if v is not None})
            msgs += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in msg["tool_calls"]]
            model.given += [Message(role="assistant", content=model.decode_turn(model.sampled[-1]))] + [
                Message(role="tool", content="ok", tool_call_id=c["id"]) for c in msg["tool_calls"]]
        assert session.stream is not None and session.stream.restarts == 0 and not session.segments
    finally:
        gw.close()
