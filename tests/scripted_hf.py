"""A tiny hf model made to write scripted turns, for gateway and harness tests.

The text of each turn is scripted (by the number of assistant turns already in the prompt, or by a function of
the prompt's text); its tokens and their log-probs are the model's own, computed under the exact prompt, so
the record is trainable. Tokens are handed to `on_token` one by one (streaming), and a turn under a grammar
constraint is checked against it with llguidance, so a script that breaks the grammar fails loudly. """
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

from rlvr.rollout.policies.hf import HFPolicy
from rlvr.rollout.policy import Completion

Script = Sequence[str] | Callable[[str], str]


class ScriptedHF(HFPolicy):
    """`script`: the n-th assistant turn's text (a list), or the text for a prompt (a function)."""

    def __init__(self, path, script: Script, *, forward: bool = True, **kw) -> None:
        super().__init__(path, device="cpu", threads=1, **kw)
        self.script, self.forward = script, forward
        if not forward:  # a harness's prompt (tens of thousands of tokens) is only tokenized, never run
            self.max_context = 1 << 20
        self.prompts: list[str] = []
        """Every prompt seen, decoded."""
        self.gate: threading.Event | None = None
        """When set: streaming pauses after the first token until the test opens the gate (at most 10 s)."""
        self.gate_waited: bool | None = None

    def text_for(self, prompt: str) -> str:
        if callable(self.script):
            return self.script(prompt)
        n = prompt.count("<|assistant|>") - 1
        return self.script[n] if n < len(self.script) else "Done."

    def generate(self, conversations, params, *, prompt_token_ids=None):
        out = []
        for i, prompt in enumerate(prompt_token_ids):
            seen = self.tokenizer.decode(prompt)
            self.prompts.append(seen)
            text = self.text_for(seen)
            ids = (self.encode(text) + [min(self.eos_ids)])[:params.budget(i)]
            grammar = params.constraints[i] if params.constraints else None
            if grammar is not None:
                _check(self, grammar, ids)
            reason = "stop" if ids[-1] in self.eos_ids else "length"
            lps = _logprobs(self.model, prompt, ids) if self.forward else [0.0] * len(ids)
            for k, (t, lp) in enumerate(zip(ids, lps)):
                if params.on_token is not None:
                    params.on_token(i, t, lp, None)
                    if k == 0 and self.gate is not None:
                        self.gate_waited = self.gate.wait(10)
            out.append(Completion(text=self.decode(ids), token_ids=ids, logprobs=lps,
                                  prompt_token_ids=list(prompt),
                                  finish_reason=reason))
        return out


def _logprobs(model, prompt: list[int], ids: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1).tolist()


def _check(policy: HFPolicy, grammar: str, ids: list[int]) -> None:
    from rlvr.rollout.policies.constrain import RowConstraints

    rows = RowConstraints(policy.tokenizer, policy.eos_ids, [grammar], len(policy.tokenizer))
    for t in ids:
        allowed = rows.allowed(0)
        assert allowed is not None and bool(allowed[t]), \
            f"the script breaks its grammar at {policy.decode([t])!r}"
        rows.advance([0], [t], [True])
