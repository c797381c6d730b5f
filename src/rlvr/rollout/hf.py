"""The `hf` backend: a local transformers causal LM with batched, left-padded, KV-cached, seeded sampling.

Each conversation samples from its own torch.Generator seeded by `SamplingParams.seeds`, so an episode's
stream depends on its seed and prompt only, never on which other episodes share the batch. The trainer
updates `.model`'s weights in place and increments `.version`. In asynchronous training the trainer first
calls `separate_weights()`: generation then samples from a copy (rlvr.rollout.weights.GenerationCopy) that
changes only through `sync_weights()`, and each completion records that copy's version.
"""
from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.envs.messages import Message
from rlvr.errors import UserError
from rlvr.rollout.builtin import CHAT_TEMPLATE, resolve_builtin
from rlvr.rollout.policy import Completion, SamplingParams
from rlvr.rollout.tokens import ChatTemplateCodec
from rlvr.rollout.weights import GenerationCopy, trainer_weights

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _dtype_keyword() -> str:
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in transformers 4.56


_DTYPE_KW = _dtype_keyword()


def resolve_device(device: str) -> torch.device:
    """`auto` -> cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown device {device!r}", field="policy.device", fix="use auto, cpu, cuda or cuda:N") from None


class HFPolicy(ChatTemplateCodec):
    """A transformers causal LM as a Policy."""

    def __init__(self, model_path_or_name: str | Path, device: str = "auto", dtype: str = "float32", *,
                 max_context: int | None = None, threads: int | None = 1, seed: int = 0,
                 trust_remote_code: bool = False) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        name = str(model_path_or_name)
        path: str | Path = resolve_builtin(name, seed=seed) if name.startswith("builtin:") else name
        if dtype not in DTYPES:
            raise UserError(f"unknown dtype {dtype!r}", field="policy.dtype", fix=f"use one of {', '.join(DTYPES)}")
        self.device = resolve_device(device)
        if threads and self.device.type == "cpu":
            torch.set_num_threads(threads)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
            self.model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=trust_remote_code,
                                                              **{_DTYPE_KW: DTYPES[dtype]})
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(f"cannot load model: {first}", file=str(path), field="policy.model",
                            fix="give a local model directory or a hub name that is cached") from None
        self.model.to(self.device).eval()
        self.name = name
        self.version = 0
        self._copy: GenerationCopy | None = None
        tok = self.tokenizer
        if not getattr(tok, "chat_template", None):
            tok.chat_template = CHAT_TEMPLATE  # a plain LM gets the compact template, spelled as text
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        self.pad_id = int(tok.pad_token_id)
        self.eos_ids = self._eos_ids()
        limit = getattr(self.model.config, "max_position_embeddings", None) or getattr(
            self.model.config, "n_positions", None)
        self.max_context = min(x for x in (max_context, limit, 1 << 30) if x)
        """Prompt plus generated tokens never exceed this."""

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for src in (getattr(self.model.generation_config, "eos_token_id", None), self.tokenizer.eos_token_id):
            if isinstance(src, int):
                ids.add(src)
            elif src:
                ids.update(int(x) for x in src)
        if not ids:
            raise UserError("the tokenizer has no eos token", file=self.name, fix="set eos_token in the tokenizer")
        return frozenset(ids)

    # --------------------------------------------------------------------------------------------- generation
    def generate(self, conversations: Sequence[list[Message]], params: SamplingParams, *,
                 prompt_token_ids: Sequence[list[int] | None] | None = None) -> list[Completion]:
        """Batched sampling: one completion per conversation (see rlvr.rollout.policy for the log-prob rule)."""
        if not conversations:
            return []
        prompts, seeds, budgets, results, live = self.prepare(conversations, params, prompt_token_ids)
        if live and self._copy is not None:
            with self._copy.lock:  # a sync waits for this call to end, and this call for a sync
                outs = self._decode(self._copy.model, [prompts[i] for i in live], [budgets[i] for i in live],
                                    params, [seeds[i] for i in live])
                version: int | None = self._copy.version
        elif live:
            version = None
            training = self.model.training
            self.model.eval()  # sampling never sees dropout, even between a trainer's updates
            try:
                outs = self._decode(self.model, [prompts[i] for i in live], [budgets[i] for i in live], params,
                                    [seeds[i] for i in live])
            finally:
                self.model.train(training)
        for i, (ids, lps, reason) in zip(live, outs if live else []):
            results[i] = Completion(text=self.decode(ids), token_ids=ids, logprobs=lps, prompt_token_ids=prompts[i],
                                    finish_reason=reason, policy_version=version)
        return results

    # ------------------------------------------------------------------------------------ asynchronous mode
    def separate_weights(self) -> None:
        """Generate from a copy of the current weights from now on (call before wrapping `.model` in LoRA)."""
        if self._copy is None:
            self._copy = GenerationCopy(self.model, self.version)

    def sync_weights(self, weights: Any = None, version: int | None = None) -> float | None:
        """Copy weights into the generation copy: the trainer's (`weights=None`) or (name, tensor) pairs of
        version `version` (default `.version`); seconds taken (None: there is no copy)."""
        if self._copy is None:
            return None
        t0 = time.perf_counter()
        pairs = trainer_weights(self.model) if weights is None else list(weights)
        self._copy.load(pairs, self.version if version is None else version)
        return time.perf_counter() - t0

    @property
    def generation_version(self) -> int:
        """Version of the weights that generate now."""
        return self._copy.version if self._copy is not None else self.version

    @torch.no_grad()
    def _decode(self, model: Any, prompts: list[list[int]], budgets: list[int], params: SamplingParams,
                seeds: list[int]) -> list[tuple[list[int], list[float], str]]:
        dev = self.device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, p in enumerate(prompts):  # left padding: every row's next token sits in the last column
            ids[r, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[r, width - len(p):] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        gens = [torch.Generator(device=dev).manual_seed(int(s) & 0xFFFF_FFFF_FFFF) for s in seeds]
        cache_kw, keep_kw = _forward_names(model)
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                         **({keep_kw: 1} if keep_kw else {}))
        past, logits = _cache_of(out), out.logits[:, -1, :]
        toks: list[list[int]] = [[] for _ in prompts]
        lps: list[list[float]] = [[] for _ in prompts]
        reasons: list[str | None] = [None] * len(prompts)
        rows = list(range(len(prompts)))  # original index of each row still in the batch
        last_pos = pos[:, -1:]
        while True:
            tok, lp = sample_tokens(logits.float(), params.temperature, params.top_p, gens)
            for j, (t, p) in enumerate(zip(tok.tolist(), lp.tolist())):
                r = rows[j]
                toks[r].append(t)
                lps[r].append(p)
                reasons[r] = self._stopped(toks[r], t, budgets[r], params.stop)
            keep = [j for j, r in enumerate(rows) if reasons[r] is None]
            if not keep:
                break
            if len(keep) < len(rows):  # finished rows leave the batch (and the KV cache)
                idx = torch.tensor(keep, device=dev)
                past.batch_select_indices(idx)
                mask, last_pos, tok = mask[idx], last_pos[idx], tok[idx]
                gens = [gens[j] for j in keep]
                rows = [rows[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            last_pos = last_pos + 1
            out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=last_pos,
                             use_cache=True, **{cache_kw: past})
            past, logits = _cache_of(out), out.logits[:, -1, :]
        return [(t, lp, reason or "length") for t, lp, reason in zip(toks, lps, reasons)]

    def _stopped(self, row: list[int], tok: int, budget: int, stop: tuple[str, ...]) -> str | None:
        if tok in self.eos_ids:
            return "stop"
        if stop and any(s in self.decode(row[-64:]) for s in stop):
            return "stop"
        if len(row) >= budget:
            return "length"
        return None


@functools.cache
def _names_for(cls: type) -> tuple[str, str | None]:
    params = inspect.signature(cls.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"  # transformers renamed it in 5.2x
    keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
    return cache_kw, keep_kw


def _forward_names(model: Any) -> tuple[str, str | None]:
    """(KV-cache keyword, logits-to-keep keyword or None) of this transformers version's forward."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft wrapper forwards **kw
    return _names_for(type(base))


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                  gens: list[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its behaviour log-prob; row r draws its noise from gens[r] only."""
    if temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        tok = logp.argmax(dim=-1)
        return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
    scaled = logits / temperature
    if top_p < 1.0:
        sorted_logits, order = scaled.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the mass before it already reaches top_p (the most likely token always stays)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    logp = torch.log_softmax(scaled, dim=-1)
    # Gumbel-max: argmax(logp + Gumbel noise) is an exact sample from softmax(logp)
    u = torch.stack([torch.rand(logits.shape[-1], generator=g, device=logits.device) for g in gens])
    gumbel = -torch.log(-torch.log(u.clamp(min=1e-20, max=1 - 1e-7)))
    tok = (logp + gumbel).argmax(dim=-1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)


@torch.no_grad()
def sequence_logprobs(model: Any, token_ids: Sequence[int], temperature: float = 1.0) -> list[float]:
    """Log-prob of each token given the ones before it (0.0 for the first), from one forward pass."""
    dev = next(model.parameters()).device
    ids = torch.tensor([list(token_ids)], dtype=torch.long, device=dev)
    logits = model(input_ids=ids).logits[0, :-1].float()
    if temperature > 0:
        logits = logits / temperature
    lp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return [0.0] + lp.tolist()
