"""Per-token log-probs (and entropy) of a causal LM in memory bounded by a chunk of positions.

The dense way, `log_softmax(model(ids).logits)`, holds the (B, T, V) logits in float32 three times over (the
logits, their log-softmax and its gradient): at V = 262k that is 3 GB per thousand tokens. Here the model's
backbone runs as usual, but its LM head is swapped, for the one call, for a scorer that takes the final hidden
states and applies the head and the log-softmax over chunks of `rows` positions, keeping per position only the
target's log-prob and the log-sum-exp. The backward recomputes each chunk's logits from the saved hidden
states and the head's weight (`_LinearLogProbs`), so no (B, T, V) tensor exists in the forward or the backward
pass; the extra cost is one more head matmul per token.

The scorer runs inside the model's own forward, where the head is called, so whatever wraps the model sees
an ordinary call: FSDP2 has gathered the root's weights (the head, or the embedding tied to it) when the head
runs, DDP's hooks fire, peft's adapters apply, autocast is the caller's. A head that is not a plain linear
layer (a LoRA-wrapped or saved head) is applied chunk by chunk under activation checkpointing instead, which
is also bounded; a model whose logits are transformed after the head (Gemma's soft-capping) uses the dense
path (`dense_scores`), which stays as the reference the tests compare against.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from rlvr.train.distributed import unwrapped

CHUNK_BYTES = {"cpu": 128 << 20, "cuda": 1 << 30}
"""Float32 logits computed at once, per device type: big enough that each chunk's matmul reads the head's
weight once for many positions (at V = 262k, 128 rows on a CPU), small enough to be a fixed cost beside the
weights."""


@dataclass(frozen=True)
class TokenScores:
    """What a forward pass gives the update, aligned with `input_ids`: position t scores token t given t' <
    t."""

    logp: Tensor
    """(B, T) log-prob of each token under the model at the sampling temperature; position 0 (no prefix): 0.
    Carries the gradient when computed with grad enabled."""
    entropy: Tensor | None
    """(B, T) entropy in nats of the distribution each token was drawn from, no gradient, only where
    `entropy_mask` was 1 (0 elsewhere); None when not asked for."""


def chunk_rows(vocab: int, device: torch.device) -> int:
    """Positions per chunk for a vocabulary of `vocab` (CHUNK_BYTES of float32 logits, at least 8)."""
    return max(8, CHUNK_BYTES.get(device.type, CHUNK_BYTES["cuda"]) // (4 * vocab))


def _compute_dtype(hidden: Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: the caller's autocast dtype if it is on, else the hidden
    states'."""
    dev = hidden.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return hidden.dtype


def _chunk_logits(h: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype,
                  temperature: float) -> Tensor:
    """Float32 logits of one chunk, computed as the dense path computes them (matmul in `dtype`, then float32,
    then divided by the temperature)."""
    z = F.linear(h.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype)).float()
    return z / temperature if temperature > 0 else z


class _LinearLogProbs(torch.autograd.Function):
    """log_softmax(h W^T + b)[target] over chunks of rows, and the entropy where asked; the backward
    recomputes each chunk's logits. Runs with autocast off and casts explicitly, in forward and backward
    alike."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,
                ent_mask: Tensor | None,
                temperature: float, rows: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(logp)
        entropy = torch.zeros_like(logp)
        with torch.autocast(hidden.device.type, enabled=False):
            for s in range(0, n, rows):
                z = _chunk_logits(hidden[s:s + rows], weight, bias, dtype, temperature)
                norm = torch.logsumexp(z, -1)
                lse[s:s + rows] = norm
                logp[s:s + rows] = z.gather(-1, targets[s:s + rows, None]).squeeze(-1) - norm
                if ent_mask is not None:
                    keep = ent_mask[s:s + rows].nonzero().squeeze(-1)
                    if keep.numel():
                        zk = z.index_select(0, keep)
                        p = torch.exp(zk - norm[keep, None])
                        entropy[s + keep] = norm[keep] - (p * zk).sum(-1)
                del z
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.temperature, ctx.rows, ctx.dtype = temperature, rows, dtype
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor, _grad_entropy: Tensor):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        dtype, rows, temperature = ctx.dtype, ctx.rows, ctx.temperature
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        w = weight.to(dtype)
        with torch.autocast(hidden.device.type, enabled=False):
            for s in range(0, hidden.shape[0], rows):
                h = hidden[s:s + rows]
                g_out = grad_logp[s:s + rows, None].float()
                z = _chunk_logits(h, weight, bias, dtype, temperature)
                # d logp / d z = onehot(target) - softmax(z); through the temperature, / T
                g = z.sub_(lse[s:s + rows, None]).exp_().mul_(-g_out)  # in place: one chunk-sized buffer
                g.scatter_add_(-1, targets[s:s + rows, None], g_out)
                if temperature > 0:
                    g.div_(temperature)
                g = g.to(dtype)
                if grad_h is not None:
                    grad_h[s:s + rows] = (g @ w).to(hidden.dtype)
                if grad_w is not None and dtype == torch.float32:
                    grad_w.addmm_(g.t(), h)
                elif grad_w is not None:  # a low-precision matmul per chunk, summed in float32
                    grad_w.add_(g.t() @ h.to(dtype))
                if grad_b is not None:
                    grad_b.add_(g.sum(0))
        return (grad_h, None if grad_w is None else grad_w.to(weight.dtype),
                None if grad_b is None else grad_b.to(bias.dtype), None, None, None, None, None)


def _plain_linear(head: nn.Module) -> bool:
    return type(head) is nn.Linear or (isinstance(head, nn.Linear) and not hasattr(head, "base_layer"))


class _Scorer(nn.Module):
    """Stands in for the LM head during one forward: hidden states in, per-position log-probs out."""

    def __init__(self, head: nn.Module, targets: Tensor, temperature: float, ent_mask: Tensor | None) -> None:
        super().__init__()
        # not a submodule: the model's module tree and state dict stay as they are
        self.__dict__["head"] = head
        self.targets, self.temperature, self.ent_mask = targets, temperature, ent_mask
        self.entropy: Tensor | None = None

    @property
    def head(self) -> nn.Module:
        return self.__dict__["head"]

    def forward(self, hidden: Tensor) -> Tensor:
        b, t, width = hidden.shape
        flat = hidden[:, :-1].reshape(-1, width)  # position t predicts token t + 1
        targets = self.targets.reshape(-1)
        ent_mask = None if self.ent_mask is None else self.ent_mask.reshape(-1)
        head = self.head
        if isinstance(head, nn.Linear) and _plain_linear(head):
            rows = chunk_rows(head.out_features, hidden.device)
            logp, entropy = _LinearLogProbs.apply(flat, head.weight, head.bias, targets, ent_mask,
                                                  self.temperature,
                                                  rows, _compute_dtype(hidden))
        else:
            logp, entropy = self._module_chunks(flat, targets, ent_mask)
        self.entropy = None if ent_mask is None else entropy.view(b, t - 1)
        return logp.view(b, t - 1).clone()  # not a view: FSDP2 hooks the root's output for its backward

    def _module_chunks(self, flat: Tensor, targets: Tensor, ent_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """Any head module, one checkpointed chunk at a time: only one chunk's logits live in the backward."""
        vocab = int(getattr(self.head, "out_features", 0) or 32_768)
        rows = chunk_rows(vocab, flat.device)
        temperature = self.temperature

        def piece(h: Tensor, tgt: Tensor) -> Tensor:
            z = self.head(h).float()
            z = z / temperature if temperature > 0 else z
            return z.gather(-1, tgt[:, None]).squeeze(-1) - torch.logsumexp(z, -1)

        parts, ents = [], []
        for s in range(0, flat.shape[0], rows):
            h, tgt = flat[s:s + rows], targets[s:s + rows]
            parts.append(checkpoint(piece, h, tgt, use_reentrant=False) if torch.is_grad_enabled()
                         else piece(h, tgt))
            if ent_mask is not None:
                with torch.no_grad():
                    z = self.head(h).float()
                    logq = torch.log_softmax(z / temperature if temperature > 0 else z, -1)
                    ents.append(-(logq.exp() * logq).sum(-1) * ent_mask[s:s + rows])
        logp = torch.cat(parts) if parts else flat.new_zeros(0, dtype=torch.float32)
        entropy = torch.cat(ents) if ents else torch.zeros_like(logp)
        return logp, entropy


def _base(model: nn.Module) -> nn.Module:
    """The transformers model inside DDP and peft wrappers (FSDP2 keeps the model itself)."""
    inner = unwrapped(model)
    get_base = getattr(inner, "get_base_model", None)
    return get_base() if callable(get_base) else inner


def head_slot(model: nn.Module) -> tuple[nn.Module, str] | None:
    """(parent module, attribute) where the model keeps its LM head, or None when the chunked path cannot
    stand in for it (no output embeddings, or logits transformed after the head)."""
    base = _base(model)
    get = getattr(base, "get_output_embeddings", None)
    head = get() if callable(get) else None
    config = getattr(base, "config", None)
    if head is None or getattr(config, "final_logit_softcapping", None):
        return None
    for name, module in base.named_modules():
        if module is head and name:
            parent_name, _, attr = name.rpartition(".")
            return base.get_submodule(parent_name) if parent_name else base, attr
    return None


@contextlib.contextmanager
def _scoring(model: nn.Module, scorer_args: tuple) -> Iterator[_Scorer]:
    slot = head_slot(model)
    assert slot is not None
    parent, attr = slot
    head = getattr(parent, attr)
    scorer = _Scorer(head, *scorer_args)
    parent._modules[attr] = scorer  # the same slot nn.Module.__setattr__ would write, without re-registration
    try:
        yield scorer
    finally:
        parent._modules[attr] = head


def token_scores(model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None, temperature: float, *,
                 position_ids: Tensor | None = None, entropy_mask: Tensor | None = None) -> TokenScores:
    """Log-prob of each token given its prefix (and the entropy at `entropy_mask`'s positions) in bounded
    memory.

    `attention_mask` None with `position_ids` restarting inside a row: packed episodes (transformers builds
    the block-diagonal causal mask). Calls the model itself, so it works under FSDP2, DDP, peft and
    autocast."""
    if head_slot(model) is None:
        return dense_scores(model, input_ids, attention_mask, temperature, position_ids=position_ids,
                            entropy_mask=entropy_mask)
    targets = input_ids[:, 1:]
    ent = None if entropy_mask is None else entropy_mask[:, 1:].bool()
    with _scoring(model, (targets, temperature, ent)) as scorer:
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    use_cache=False)
    logp = F.pad(out.logits, (1, 0))
    entropy = None if scorer.entropy is None else F.pad(scorer.entropy, (1, 0))
    return TokenScores(logp=logp, entropy=entropy)


def dense_scores(model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None, temperature: float, *,
                 position_ids: Tensor | None = None, entropy_mask: Tensor | None = None) -> TokenScores:
    """The same from the full (B, T, V) logits: the path before chunking, kept as the reference."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).logits[:, :-1].float()
    if temperature > 0:
        logits = logits / temperature
    logq = torch.log_softmax(logits, -1)
    logp = F.pad(logq.gather(-1, input_ids[:, 1:, None]).squeeze(-1), (1, 0))
    entropy = None
    if entropy_mask is not None:
        with torch.no_grad():
            entropy = F.pad(-(logq.exp() * logq).sum(-1) * entropy_mask[:, 1:], (1, 0))
    return TokenScores(logp=logp, entropy=entropy)
