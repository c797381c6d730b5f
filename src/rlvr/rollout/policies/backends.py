"""The backend registry: `make_policy` builds a Policy from a SPEC string or a PolicyConfig.

Backends: `hf` (a local transformers causal LM), `openai` (any OpenAI-compatible server), `scripted`
(replays actions from a file, for tests) and `vllm` (an in-process vLLM engine, `rlvr[vllm]`; with
`policy.engines = K`, K engines as Ray actors, rlvr.rollout.fleet.engines). Each builder
imports its backend when called, so naming a backend pulls in its dependencies (torch, vllm, httpx) and
nothing else does. The backends import the contract from `rlvr.rollout.policy`, never this module.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlvr.errors import UserError
from rlvr.rollout.policy import Policy

if TYPE_CHECKING:
    from rlvr.config import PolicyConfig


def _hf(target: str, cfg: PolicyConfig | None, seed: int) -> Policy:
    from rlvr.rollout.policies.hf import HFPolicy

    kw: dict[str, Any] = {"seed": seed}
    if cfg is not None:
        kw.update(device=cfg.device, dtype=cfg.dtype, max_context=cfg.max_context, threads=cfg.threads,
                  chat_template=cfg.chat_template, tool_format=cfg.tool_format)
    return HFPolicy(target, **kw)


def _openai(target: str, cfg: PolicyConfig | None, seed: int) -> Policy:
    from rlvr.rollout.policies.openai import OpenAIPolicy

    base, sep, model = target.partition("#")
    if not sep or not base or not model:
        raise UserError(f"openai policy {target!r} is not BASE_URL#MODEL", field="policy",
                        fix="e.g. openai:http://127.0.0.1:8000/v1#my-model")
    kw: dict[str, Any] = {}
    if cfg is not None:
        kw = {"timeout_s": cfg.request_timeout_s, "max_retries": cfg.max_retries}
    return _named_dialect(OpenAIPolicy(base, model, **kw), cfg)


def _scripted(target: str, cfg: PolicyConfig | None, seed: int) -> Policy:
    from rlvr.rollout.policies.scripted import ScriptedPolicy

    return _named_dialect(ScriptedPolicy.from_file(target), cfg)


def _named_dialect(policy: Policy, cfg: PolicyConfig | None) -> Policy:
    """A backend without a chat template writes rlvr's own form unless `policy.tool_format` names another (a
    server that returns a family's text, a script written in one); `auto` has no template to place here."""
    if cfg is not None and cfg.tool_format != "auto":
        from rlvr.envs import dialects

        policy.dialect = dialects.get(cfg.tool_format)  # type: ignore[attr-defined]
    return policy


def _vllm(target: str, cfg: PolicyConfig | None, seed: int) -> Policy:
    from rlvr.rollout.policies.vllm import VLLMPolicy

    kw: dict[str, Any] = {}
    if cfg is not None:
        kw = {"device": cfg.device, "dtype": cfg.dtype, "max_context": cfg.max_context,
              "kv_cache_mb": cfg.vllm_kv_cache_mb, "chat_template": cfg.chat_template,
              "tool_format": cfg.tool_format}
    if cfg is not None and cfg.engines:  # disaggregated: engines as Ray actors on the running Ray (or "auto")
        from rlvr.rollout.fleet.engines import EnginesPolicy

        return EnginesPolicy.from_config(target, cfg, **kw)
    return VLLMPolicy(target, **kw)


BACKENDS = {"hf": _hf, "openai": _openai, "scripted": _scripted, "vllm": _vllm}
"""Backend name -> builder(target, config, seed)."""


def parse_spec(spec: str) -> tuple[str, str]:
    """`hf:PATH`, `openai:URL#MODEL`, `scripted:FILE`, `vllm:PATH`, or `builtin:tiny` (hf) -> (backend,
    target)."""
    if spec.startswith("builtin:"):
        return "hf", spec
    backend, sep, target = spec.partition(":")
    if not sep or backend not in BACKENDS or not target:
        raise UserError(f"bad policy spec {spec!r}", field="policy",
                        fix="use hf:PATH_OR_NAME, openai:BASE_URL#MODEL, scripted:FILE, vllm:PATH or "
                            "builtin:tiny")
    return backend, target


def make_policy(spec_or_config: str | PolicyConfig, *, seed: int = 0) -> Policy:
    """Build a policy from a SPEC string or a PolicyConfig (`backend` + `model`); `seed` initialises a builtin
    model's weights."""
    if isinstance(spec_or_config, str):
        backend, target = parse_spec(spec_or_config)
        return BACKENDS[backend](target, None, seed)
    cfg = spec_or_config
    if cfg.backend not in BACKENDS:
        raise UserError(f"policy backend {cfg.backend!r} is not available here", field="policy.backend",
                        fix=f"use one of {', '.join(BACKENDS)}")
    return BACKENDS[cfg.backend](cfg.model, cfg, seed)
