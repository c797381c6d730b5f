"""The `hf` backend: a local transformers causal LM with batched, left-padded, KV-cached, seeded sampling.

Each conversation samples from its own torch.Generator seeded by `SamplingParams.seeds`, so an episode's
stream depends on its seed and prompt only, never on which other episodes share the batch. A prompt that
several rows continue (a group's samples) and the prefix all prompts share (a system prompt) are prefilled
once (rlvr.rollout.policies.kvcache); decoding writes into reserved KV buffers and samples the whole batch
with tensor operations (rlvr.rollout.policies.sampling). Between calls, each row's keys and values are kept
(kvcache.PrefixCache, `kv_reuse_tokens` tokens at most): the next turn of an episode, whose prompt extends the
previous prompt and its sampled tokens, prefills only its new tokens. The trainer
updates `.model`'s weights in place and increments `.version`. In asynchronous training the trainer first
calls `separate_weights()`: generation then samples from a copy (rlvr.rollout.policies.weights.GenerationCopy)
that changes only through `sync_weights()`, and each completion records that copy's version.
"""
from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from rlvr.envs import dialects
from rlvr.envs.messages import Message
from rlvr.errors import UserError
from rlvr.rollout.core.tokens import AUTO, ChatTemplateCodec, choose_chat_template, context_window
from rlvr.rollout.policies.builtin import resolve_builtin
from rlvr.rollout.policies.constrain import RowConstraints
from rlvr.rollout.policies.kvcache import (
    BUCKET,
    MIN_SHARED,
    PrefixCache,
    common_prefix,
    fingerprint,
    is_reserved,
    prime,
    reserved_cache,
    row_kv,
    shared_prompts,
)
from rlvr.rollout.policies.sampling import row_noise, sample_tokens, top_alternatives
from rlvr.rollout.policies.weights import GenerationCopy, trainer_weights
from rlvr.rollout.policy import Completion, SamplingParams

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _dtype_keyword() -> str:
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in transformers 4.56


_DTYPE_KW = _dtype_keyword()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_causal_lm(path: str | Path, dtype: torch.dtype, *, trust_remote_code: bool = False) -> tuple[Any,
                                                                                                      Any]:
    """(tokenizer, model) of a local directory or cached hub name; bad input is one UserError naming the
    model, the problem and the fix: a GGUF file (convert it), a directory without a config or not a causal LM,
    a missing tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    where = {"file": str(path), "field": "policy.model"}
    local = Path(path)
    ggufs = sorted(local.glob("*.gguf")) if local.is_dir() and not (local / "config.json").is_file() else []
    if local.suffix == ".gguf" or ggufs:
        gguf = local if local.suffix == ".gguf" else ggufs[0]
        out = gguf.with_name(gguf.stem + "-hf")
        raise UserError("a GGUF file is not a Hugging Face model directory", **where,
                        fix=f"convert it once with `python -m rlvr.rollout.policies.gguf {gguf} {out}` "
                            f"(pip install 'rlvr[real]'), then use hf:{out}")
    text = str(path)
    if not local.exists() and (text.startswith((".", "/", "~")) or text.count("/") > 1):
        raise UserError("cannot load model: no such directory", **where,
                        fix="check the path (a hub name is ORG/NAME, and must be in the local cache)")
    if local.is_dir() and not (local / "config.json").is_file():
        raise UserError("not a model directory (no config.json)", **where,
                        fix="give a directory written by save_pretrained: config.json, weights and "
                            "tokenizer files")
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load model: {_first_line(exc)}", **where,
                        fix="give a local model directory or a hub name that is cached") from None
    remote = trust_remote_code and "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {})
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING and not remote:
        kinds = ", ".join(getattr(config, "architectures", None) or [config.model_type])
        raise UserError(f"not a causal language model ({kinds})", **where,
                        fix="give a causal LM that generates text (a *ForCausalLM checkpoint: Llama, Qwen, "
                            "GPT-2, ...)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as exc:
        raise UserError(f"cannot load its tokenizer: {_first_line(exc)}", **where,
                        fix="save the tokenizer with the model (tokenizer.save_pretrained into the "
                            "same directory)"
                        ) from None
    vocab = getattr(config, "vocab_size", None) or getattr(getattr(config, "text_config", None), "vocab_size",
                                                           None)
    if len(tokenizer) < 2:  # transformers builds an empty tokenizer for a directory without tokenizer files
        raise UserError("cannot load its tokenizer: the directory has no tokenizer files", **where,
                        fix="save the tokenizer with the model (tokenizer.save_pretrained into the "
                            "same directory)")
    if vocab and len(tokenizer) > vocab:
        raise UserError(f"its tokenizer has {len(tokenizer)} tokens, more than the model's {vocab}", **where,
                        fix="use the tokenizer the model was trained with (or resize the "
                            "embeddings and save)")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=trust_remote_code,
                                                     **{_DTYPE_KW: dtype})
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load model: {_first_line(exc)}", **where,
                        fix="give a complete model directory (config.json and weights)") from None
    return tokenizer, model


def resolve_device(device: str) -> torch.device:
    """`auto` -> cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown device {device!r}", field="policy.device",
                        fix="use auto, cpu, cuda or cuda:N") from None


class HFPolicy(ChatTemplateCodec):
    """A transformers causal LM as a Policy."""

    def __init__(self, model_path_or_name: str | Path, device: str = "auto", dtype: str = "float32", *,
                 max_context: int | None = None, threads: int | None = 1, seed: int = 0,
                 trust_remote_code: bool = False, chat_template: str = AUTO,
                 kv_reuse_tokens: int | None = None, tool_format: str = AUTO) -> None:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        name = str(model_path_or_name)
        path: str | Path = resolve_builtin(name, seed=seed) if name.startswith("builtin:") else name
        if dtype not in DTYPES:
            raise UserError(f"unknown dtype {dtype!r}", field="policy.dtype",
                            fix=f"use one of {', '.join(DTYPES)}")
        self.device = resolve_device(device)
        if threads and self.device.type == "cpu":
            torch.set_num_threads(threads)
        self.name = name
        self.tokenizer, self.model = load_causal_lm(path, DTYPES[dtype], trust_remote_code=trust_remote_code)
        self.model.to(self.device).eval()
        self.version = 0
        self._copy: GenerationCopy | None = None
        self.kv_reuse = PrefixCache(kv_reuse_tokens)
        """Keys and values kept between calls (`kv_reuse_tokens`: its cap; None: REUSE_BYTES' worth; 0:
        off)."""
        tok = self.tokenizer
        tok.chat_template = choose_chat_template(tok, chat_template, name)
        self.dialect = dialects.resolve(tool_format, tok.chat_template, model=name)
        self.eos_ids = self._eos_ids()
        if tok.pad_token_id is None:  # padding never reaches the model's view (masked): any end token will do
            tok.pad_token = (tok.eos_token if tok.eos_token is not None
                             else tok.convert_ids_to_tokens(min(self.eos_ids)))
        self.pad_id = int(tok.pad_token_id)
        self.max_context = context_window(self.model.config, tok, max_context)
        """Prompt plus generated tokens never exceed this."""

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for src in (getattr(self.model.generation_config, "eos_token_id", None), self.tokenizer.eos_token_id):
            if isinstance(src, int):
                ids.add(src)
            elif src:
                ids.update(int(x) for x in src)
        if not ids:
            what = "neither an eos nor a pad token" if self.tokenizer.pad_token_id is None else "no eos token"
            raise UserError(f"the tokenizer has {what}", file=self.name, field="policy.model",
                            fix="set eos_token (the token that ends a turn) in the model's "
                                "tokenizer_config.json")
        return frozenset(ids)

    # --------------------------------------------------------------------------------------------- generation
    def generate(self, conversations: Sequence[list[Message]], params: SamplingParams, *,
                 prompt_token_ids: Sequence[list[int] | None] | None = None) -> list[Completion]:
        """Batched sampling: one completion per conversation (see rlvr.rollout.policy for the log-prob
        rule)."""
        if not conversations:
            return []
        prompts, seeds, budgets, results, live = self.prepare(conversations, params, prompt_token_ids)
        args = ([prompts[i] for i in live], [budgets[i] for i in live], _rows_of(params, live),
                [seeds[i] for i in live])
        if live and self._copy is not None:
            with self._copy.lock:  # a sync waits for this call to end, and this call for a sync
                outs = self._decode(self._copy.model, *args)
                version: int | None = self._copy.version
        elif live:
            version = None
            training = self.model.training
            self.model.eval()  # sampling never sees dropout, even between a trainer's updates
            try:
                outs = self._decode(self.model, *args)
            finally:
                self.model.train(training)
        for i, (ids, lps, reason, tops) in zip(live, outs if live else []):
            results[i] = Completion(text=self.decode_turn(ids), token_ids=ids, logprobs=lps,
                                    prompt_token_ids=prompts[i], finish_reason=reason, policy_version=version,
                                    top_logprobs=tops)
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
                seeds: list[int]) -> list[tuple[list[int], list[float], str, list[dict[int, float]]]]:
        """Prefill (`_prefill`), then sample all rows in lockstep into a reserved KV cache; per token the work
        is whole-batch tensor work (a row's Python work is paid once per call), apart from the check for stop
        strings, the grammar masks of constrained rows, and the streaming callback, when there are any."""
        dev, n, longest = self.device, len(prompts), max(budgets)
        grammars = RowConstraints(self.tokenizer, self.eos_ids, params.constraints, model.config.vocab_size) \
            if params.constraints and any(g is not None for g in params.constraints) else None
        tops: list[list[dict[int, float]]] = [[] for _ in range(n)]
        cache_kw, _ = _forward_names(model)
        reuse = self.kv_reuse
        if reuse.on:
            reuse.check(fingerprint(model, self.generation_version))
        past, logits, mask, last_pos, width = self._prefill(model, prompts, longest)
        # each row's keys and values, taken before the row leaves the batch
        saved: dict[int, torch.Tensor] = {}
        keep_kv = reuse.on and is_reserved(past)
        noise = row_noise(seeds, longest, dev)
        toks = torch.zeros((n, longest), dtype=torch.long, device=dev)
        lps = torch.zeros((n, longest), dtype=torch.float32, device=dev)
        ends = torch.full((n,), longest, dtype=torch.long, device=dev)
        stopped = torch.zeros(n, dtype=torch.bool, device=dev)  # ended on eos or a stop string (else: length)
        budget = torch.tensor(budgets, device=dev)
        eos = torch.tensor(sorted(self.eos_ids), device=dev)
        rows = torch.arange(n, device=dev)  # original index of each row of the batch
        live = torch.ones(n, dtype=torch.bool, device=dev)  # rows of the batch still generating
        step = 0
        while True:
            logits = logits.float()
            if grammars:
                grammars.mask(logits, rows.tolist(), live.tolist())
            tok, lp = sample_tokens(logits, params.temperature, params.top_p, noise[rows, step])
            toks[rows, step], lps[rows, step] = tok, lp
            if grammars or params.top_logprobs or params.on_token:
                self._per_token(logits, rows, live, tok, lp, params, grammars, tops)
            hit = torch.isin(tok, eos)
            if params.stop:
                hit |= self._stop_strings(toks[rows, max(0, step - 63):step + 1], live, params.stop)
            done = live & (hit | (budget[rows] <= step + 1))
            ends[rows[done]] = step + 1
            stopped[rows[done]] = hit[done]
            live &= ~done
            left = int(live.sum())
            if left == 0:
                if keep_kv:
                    _save_rows(past, range(len(rows)), rows, ends, mask, width, saved)
                break
            if 4 * (len(live) - left) >= len(live):  # finished rows leave the batch (and the KV cache)
                keep = live.nonzero().squeeze(1)
                if keep_kv:
                    _save_rows(past, (~live).nonzero().squeeze(1).tolist(), rows, ends, mask, width, saved)
                past.batch_select_indices(keep)
                rows, live, tok, mask, last_pos = (rows[keep], live[keep], tok[keep], mask[keep],
                                                   last_pos[keep])
            step += 1
            out = model(input_ids=tok[:, None], attention_mask=mask[:, :width + step],
                        position_ids=(last_pos + step)[:, None], use_cache=True, **{cache_kw: past})
            past, logits = _cache_of(out), out.logits[:, -1, :]
        outs = [(t[:e], p[:e], "stop" if s else "length", top[:e])
                for t, p, e, s, top in zip(toks.tolist(), lps.tolist(), ends.tolist(), stopped.tolist(),
                                           tops)]
        if keep_kv:
            for r, (ids, *_) in enumerate(outs):  # the record's next turn starts with prompt + ids[:-1]
                reuse.store(prompts[r] + ids[:-1], saved[r])
        return outs

    def _prefill(self, model: Any, prompts: list[list[int]], extra: int) -> tuple[Any, torch.Tensor,
                                                                                  torch.Tensor,
                                                                                  torch.Tensor, int]:
        """Each prompt's keys and values, each token computed once. A prompt that continues a sequence the
        PrefixCache holds starts from its stored keys and values; otherwise the prefix that all distinct
        prompts share (at least MIN_SHARED tokens) is prefilled once. Then the rest of each distinct prompt is
        prefilled (left padded, so the padding sits between the two), and rows that repeat a prompt copy its
        cache. Returns the cache, each row's next-token logits, its attention mask with `extra` columns for
        the tokens to come, its last position, and the prompt width."""
        dev = self.device
        distinct, owner = shared_prompts(prompts)
        hits = [self.kv_reuse.lookup(p)
                for p in distinct] if self.kv_reuse.on else [(None, 0)] * len(distinct)
        kvs = [self.kv_reuse.kv(e) if e is not None else None for e, _ in hits]
        cached = [n if kv is not None else 0 for (_, n), kv in zip(hits, kvs)]
        head = max(cached)
        cache = None
        for _ in range(2):
            shared = 0 if head else common_prefix(distinct) if len(distinct) > 1 else 0
            shared = shared if shared >= MIN_SHARED else 0
            lead = head or shared  # the columns before the rests: stored prefixes, or the shared one
            rests = [p[max(shared, c):] for p, c in zip(distinct, cached)]
            width = max(len(p) for p in rests)
            cache = reserved_cache(model, lead + width + min(extra, BUCKET))  # grown if rows live longer
            if cache is not None or not head:
                break
            head, cached = 0, [0] * len(distinct)  # stored keys need a reserved cache: prefill all
        ids = torch.full((len(rests), width), self.pad_id, dtype=torch.long)
        # the columns to come are ones
        mask = torch.zeros((len(rests), lead + width + extra), dtype=torch.long)
        mask[:, :shared] = 1
        # left padding: every row's next token in the last column
        for r, (p, c) in enumerate(zip(rests, cached)):
            ids[r, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[r, lead + width - len(p):] = 1
            mask[r, head - c:head] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask[:, :lead + width].cumsum(-1) - 1).clamp(min=0)[:, lead:]
        cache_kw, keep_kw = _forward_names(model)
        kw: dict[str, Any] = {keep_kw: 1} if keep_kw else {}
        if head and cache is not None:
            prime(cache, kvs, cached, head, lead + width + min(extra, BUCKET))
        if self.kv_reuse.on:
            self.kv_reuse.reused_tokens += sum(cached[o] for o in owner)
            self.kv_reuse.prefilled_tokens += sum(len(rests[o]) for o in owner)  # rows' view, not compute
        if shared:
            head_ids = torch.tensor([distinct[0][:shared]], dtype=torch.long, device=dev)
            out = model(input_ids=head_ids, attention_mask=mask[:1, :shared],
                        position_ids=pos.new_tensor([list(range(shared))]), use_cache=True, **kw,
                        **({cache_kw: cache} if cache is not None else {}))
            cache = _cache_of(out)
            cache.batch_select_indices(torch.zeros(len(rests), dtype=torch.long, device=dev))
        out = model(input_ids=ids, attention_mask=mask[:, :lead + width], position_ids=pos, use_cache=True,
                    **kw,
                    **({cache_kw: cache} if cache is not None else {}))
        past, logits, last_pos = _cache_of(out), out.logits[:, -1, :], pos[:, -1]
        if len(distinct) < len(prompts):
            idx = torch.tensor(owner, device=dev)
            past.batch_select_indices(idx)
            logits, mask, last_pos = logits[idx], mask[idx], last_pos[idx]
        return past, logits, mask, last_pos, lead + width

    @staticmethod
    def _per_token(logits: torch.Tensor, rows: torch.Tensor, live: torch.Tensor, tok: torch.Tensor,
                   lp: torch.Tensor, params: SamplingParams, grammars: RowConstraints | None,
                   tops: list[list[dict[int, float]]]) -> None:
        """A step's row-wise extras: feed the grammars, keep the top alternatives, stream the tokens."""
        order, on, ids, lp_list = rows.tolist(), live.tolist(), tok.tolist(), lp.tolist()
        if grammars:
            grammars.advance(order, ids, on)
        alt: list[dict[int, float] | None] = [None] * len(order)
        if params.top_logprobs:
            alt_ids, alt_lps = top_alternatives(logits, params.temperature, params.top_p, params.top_logprobs)
            alt = [{a: b for a, b in zip(i, v) if b > float("-inf")}
                   for i, v in zip(alt_ids.tolist(), alt_lps.tolist())]
        for j, row in enumerate(order):
            if on[j]:
                if alt[j] is not None:
                    tops[row].append(alt[j])  # type: ignore[arg-type]
                if params.on_token is not None:
                    params.on_token(row, ids[j], lp_list[j], alt[j])

    def _stop_strings(self, window: torch.Tensor, live: torch.Tensor, stop: tuple[str, ...]) -> torch.Tensor:
        """Rows whose text over their latest tokens (`window`) contains a stop string (live rows only)."""
        hit = torch.zeros_like(live)
        for j, row in zip(live.nonzero().squeeze(1).tolist(), window[live].tolist()):
            if any(s in self.decode(row) for s in stop):
                hit[j] = True
        return hit


def _rows_of(params: SamplingParams, live: list[int]) -> SamplingParams:
    """`params` for the live rows of a call only: their constraints, and a callback that names the call's
    row."""
    if params.constraints is None and params.on_token is None:
        return params
    sink = params.on_token
    return replace(params, constraints=None if params.constraints is None else tuple(
        params.constraints[i] for i in live),
        on_token=None if sink is None else (lambda r, t, lp, top: sink(live[r], t, lp, top)))


def _save_rows(past: Any, batch_rows: Any, rows: torch.Tensor, ends: torch.Tensor, mask: torch.Tensor,
               width: int,
               saved: dict[int, torch.Tensor]) -> None:
    """Copy the keys and values of finished batch rows into `saved` (by original row): the prompt's and all
    generated tokens' but the last, which was never fed."""
    originals, stops = rows.tolist(), ends.tolist()
    for j in batch_rows:
        r = originals[j]
        cols = mask[j, :width + stops[r] - 1].nonzero().squeeze(1)
        saved[r] = row_kv(past, j, cols)


@functools.cache
def _names_for(cls: type) -> tuple[str, str | None]:
    params = inspect.signature(cls.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"  # transformers renamed it in 5.2x
    keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
    return cache_kw, keep_kw


def _forward_names(model: Any) -> tuple[str, str | None]:
    """(KV-cache keyword, logits-to-keep keyword or None) of this transformers version's forward."""
    # a peft wrapper forwards **kw
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _names_for(type(base))


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


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
