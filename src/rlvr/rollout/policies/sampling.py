"""Batched token sampling for the `hf` backend: one token per row from its logits and one uniform of its own.

A row's token is the first whose cumulative probability passes the row's uniform (inverse-CDF sampling, an
exact draw from the categorical distribution). Each row's uniforms come from a generator seeded with that
row's seed alone, drawn once per generation call, so a row's tokens never depend on the other rows of the
batch and a step costs a few whole-batch tensor operations: no per-row Python work and no noise over the whole
vocabulary. The nucleus (top-p) is found among the most likely tokens (`torch.topk`), widened only while it
does not fit, rather than by sorting the vocabulary.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

NOISE_CHUNK = 64
"""Uniforms are drawn in chunks of this many, so a row's stream is the same however many steps a call
needs."""
NUCLEUS_K = 256
"""Most likely tokens searched first for the top-p nucleus (then 8 times more, then a sort of the
vocabulary)."""
SEED_MASK = 0xFFFF_FFFF_FFFF


def row_noise(seeds: Sequence[int], steps: int, device: torch.device) -> torch.Tensor:
    """[rows, steps] uniforms in [0, 1): row r's from a generator seeded with seeds[r] only."""
    chunks = -(-steps // NOISE_CHUNK)
    out = []
    for seed in seeds:
        gen = torch.Generator(device=device).manual_seed(int(seed) & SEED_MASK)
        out.append(torch.cat([torch.rand(NOISE_CHUNK, generator=gen, device=device) for _ in range(chunks)]))
    return torch.stack(out)[:, :steps]


def nucleus(weights: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask of the top-p nucleus of each row of unnormalised probabilities: a token is dropped when the mass
    of the tokens more likely than it already reaches top_p (the most likely token always stays; tokens tied
    with the least likely kept one stay too)."""
    vocab = weights.shape[-1]
    total = weights.sum(-1, keepdim=True)
    k = min(NUCLEUS_K, vocab)
    while True:
        top = weights.topk(k, dim=-1).values if k < vocab else weights.sort(dim=-1, descending=True).values
        kept = (top.cumsum(-1) - top) < top_p * total
        if k == vocab or not bool(kept[:, -1].any()):  # every row's nucleus ends inside the k most likely
            break
        k = k * 8 if k * 64 <= vocab else vocab  # a wide nucleus: one sort beats ever larger top-k searches
    cut = top.gather(-1, (kept.sum(-1, keepdim=True) - 1).clamp(min=0))
    return weights >= cut


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                  noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its behaviour log-prob (rlvr.rollout.policy), row r drawn with the uniform
    noise[r]."""
    if temperature <= 0:
        tok = logits.argmax(dim=-1)
        return tok, logits.gather(-1, tok[:, None]).squeeze(-1) - logits.logsumexp(-1)
    scaled = logits / temperature
    top = scaled.max(dim=-1, keepdim=True).values
    weights = (scaled - top).exp()  # probabilities times the normaliser; the most likely token has weight 1
    if top_p < 1.0:
        weights = weights * nucleus(weights, top_p)
    cdf = weights.cumsum(-1)
    end = cdf[:, -1]
    target = torch.minimum(noise * end, torch.nextafter(end, torch.zeros_like(end)))  # strictly below the end
    # zero-weight tokens are never chosen
    tok = torch.searchsorted(cdf, target[:, None], right=True).squeeze(-1)
    lp = (scaled.gather(-1, tok[:, None]) - top).squeeze(-1) - weights.sum(-1).log()
    return tok, lp


def top_alternatives(logits: torch.Tensor, temperature: float, top_p: float, k: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """([rows, k] token ids, [rows, k] log-probs) of each row's k most likely tokens under the distribution
    `sample_tokens` draws from (tempered and cut to the nucleus; untempered when greedy)."""
    if temperature <= 0:
        lps = logits.log_softmax(-1)
    else:
        scaled = logits / temperature
        if top_p < 1.0:
            weights = (scaled - scaled.max(dim=-1, keepdim=True).values).exp()
            scaled = scaled.masked_fill(~nucleus(weights, top_p), float("-inf"))
        lps = scaled.log_softmax(-1)
    values, ids = lps.topk(min(k, lps.shape[-1]), dim=-1)
    return ids, values
