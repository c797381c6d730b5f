"""The sections of a run config, one per part of the pipeline (`[tasks]`, `[sandbox]`, `[policy]`,
`[rollout]`, `[train]`, `[sft]`, `[schedule]`, `[store]`, `[monitor]`, `[cluster]`, `[agent]`): frozen, strict
pydantic models with a docstring under every field. `rlvr.config.run_config` puts them together as
RunConfig."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlvr.errors import UserError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True, frozen=True)


class TasksConfig(Section):
    """What the run practises and what it is judged on."""

    train: str = "code"
    """Tasks SPEC for training: domain names or pack paths, each with an optional `:N`, joined by commas."""
    heldout: str | None = None
    """Tasks SPEC of the held-out set (pass@1 before and after). Unset: 200 tasks of each procedural domain of
    `train`, from `heldout_offset` on (`code:200` for the quickstart); an empty string: no held-out
    evaluation. Held-out tasks of a finite domain or pack that training also uses are left out of training."""
    heldout_offset: int = Field(1_000_000, ge=0)
    """Index offset of held-out tasks in procedural domains, so they never overlap training indices."""
    domains: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per-domain settings passed to the domain factory, e.g. `[tasks.domains.code] tier = "tiny"` (the
    quickstart's). Unset: each domain's own defaults, as every command without a config uses them."""


class SandboxConfig(Section):
    """Where candidate code runs.

    `timeout_s`, `memory_mb`, `processes` and `output_bytes` are the defaults of every sandboxed command (tool
    calls and verifier runs alike). Per field, later layers go over them (`rlvr.sandbox.limits`): sandbox
    defaults < the task's own limits and what its verifier derives from them (these may raise or lower the
    defaults) < a scheduler budget < a tool call's own request (these two only lower)."""

    isolation: Literal["bwrap", "none"] = "bwrap"
    """`bwrap`: bubblewrap + namespaces + cgroups. `none`: no isolation at all (warns loudly; trusted code
    only)."""
    workers: int = Field(2, ge=1)
    """Warm workers in the local pool."""
    timeout_s: float = Field(10.0, gt=0)
    """Default wall-clock limit of one sandboxed command, in seconds (a task's `limits.exec_timeout_s` wins;
    budgets and requests only lower it)."""
    memory_mb: int = Field(512, ge=16)
    """Default memory limit of one sandboxed command, in MiB (a task's `limits.memory_mb` wins; budgets and
    requests only lower it)."""
    processes: int = Field(64, ge=1)
    """Default process/thread limit of one sandboxed command (budgets and requests only lower it)."""
    output_bytes: int = Field(1 << 20, ge=1024)
    """Default cap on captured stdout and stderr each, in bytes (budgets and requests only lower it)."""
    allow_network: bool = False
    """Let the jobs of tasks that ask for network access (`network = true`) reach the network, through a
    user-mode network without the host's loopback; a task that asks for it is refused while this is false.
    Other tasks never have network."""
    image_cache: str | None = None
    """Where images are unpacked, one root per image digest, shared by every pool of the machine (unset:
    `$RLVR_IMAGE_CACHE`, else `~/.cache/rlvr/images`; docs/IMAGES.md)."""
    image_pools: int = Field(4, ge=1)
    """Images whose workers are kept warm at once; beyond that the least recently used idle one is stopped."""
    trust_image_python: bool = True
    """In an image with a Python 3.9+, run the sandbox's supervisor on it, so `python` jobs fork warm (the
    image's interpreter then runs with the supervisor's privileges inside the worker: docs/SECURITY.md).
    False: the supervisor runs on the host's interpreter and every job in an image is exec'd."""


class PolicyConfig(Section):
    """Which model acts and how it generates."""

    backend: Literal["hf", "openai", "scripted", "vllm"] = "hf"
    """Inference backend."""
    model: str = "builtin:tiny"
    """Model path or hub name (`hf`), `BASE_URL#MODEL` (`openai`), a script file (`scripted`), or
    `builtin:tiny` — the small model rlvr builds from scratch with its own tokenizer."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights and compute dtype."""
    device: str = "auto"
    """`auto`, `cpu`, `cuda` or `cuda:N`."""
    max_context: int | None = Field(None, ge=16)
    """Tokens of prompt plus generation the policy holds (and the gateway serves an agent). Unset: the model's
    own window (its config's `max_position_embeddings` or `n_positions`, else the tokenizer's
    `model_max_length`); larger than the window: the window."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature (0: greedy)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    max_new_tokens: int = Field(256, ge=1)
    """Tokens generated per model turn."""
    request_timeout_s: float = Field(120.0, gt=0)
    """`openai` backend: timeout of one request."""
    max_retries: int = Field(3, ge=0)
    """`openai` backend: retries of a failed request."""
    threads: int = Field(1, ge=1)
    """torch CPU threads (1 is fastest beside sandboxes on a small machine)."""
    chat_template: str = "auto"
    """`hf` and `vllm` backends: how conversations become text. `auto`: the tokenizer's own chat template, and
    for a model without one (a base model) the `plain` one; `plain`: `<|role|>content<|end|>` per message (the
    built-in model's template; other models read the markers as text); or the path of a Jinja template
    file."""
    tool_format: str = "auto"
    """The form the model writes tool calls in: its family's tool dialect (docs/DIALECTS.md). `auto` (`hf`,
    `vllm`): placed from the chat template, and a template that writes no calls of its own keeps rlvr's own
    `hermes` form; or one of hermes, qwen3_coder, llama3, mistral, mistral_v3, deepseek_v3, gpt_oss, glm45,
    kimi_k2, gemma4 (also for `openai` and `scripted`, which have no template: text in that family's form)."""
    vllm_kv_cache_mb: int | None = Field(512, ge=16)
    """`vllm` backend: memory reserved for the engine's KV cache (MiB); None lets vLLM size it from free GPU
    memory (CUDA only: on CPU vLLM would claim most of the machine's RAM)."""
    engines: int = Field(0, ge=0)
    """`vllm` backend: generate with this many vLLM engines as Ray actors (one GPU each, or one CPU), which
    receive the trainer's weights over a torch.distributed group after each update; needs `[cluster] address`.
    0: one engine inside the trainer's process."""
    engine_tp: int = Field(1, ge=1)
    """Tensor-parallel size of each of the `engines` (GPUs per engine; CUDA only)."""
    engines_min: int | None = Field(None, ge=1)
    """`engines`: the fewest engines the fleet scales down to (unset: `engines`)."""
    engines_max: int | None = Field(None, ge=1)
    """`engines`: the most engines the fleet scales up to, asking the cluster's autoscaler for their resources
    (unset: `engines`)."""
    scale_up_wait_s: float | None = Field(None, gt=0)
    """`engines`: add an engine (up to `engines_max`) when a generate call waits longer than this from its
    arrival to its completions (unset: never)."""
    scale_down_idle_s: float | None = Field(None, gt=0)
    """`engines`: stop an engine (down to `engines_min`) that has had no work for this long (unset: never)."""
    engine_lora_rank: int = Field(0, ge=0)
    """`engines`: start the engines with vLLM's LoRA support for adapters up to this rank, so that each sync
    sends only the adapters; 0: `train.lora_rank` when the run trains LoRA adapters, else the engines take
    merged weights."""

    @model_validator(mode="after")
    def _engines(self) -> PolicyConfig:
        if self.engines and self.backend != "vllm":
            raise UserError(f"engines = {self.engines} needs the vllm backend, not {self.backend!r}",
                            field="policy.engines", fix='set policy.backend = "vllm", or engines = 0')
        if self.engine_tp > 1 and not self.engines:
            raise UserError("engine_tp sets the size of each of policy.engines, which is 0",
                            field="policy.engine_tp", fix="set policy.engines >= 1, or engine_tp = 1")
        if self.engine_tp > 1 and self.device == "cpu":
            raise UserError(f"engine_tp = {self.engine_tp} needs CUDA GPUs, and policy.device is cpu",
                            field="policy.engine_tp", fix="use engine_tp = 1 on CPU")
        fleet = {"engines_min": self.engines_min, "engines_max": self.engines_max,
                 "scale_up_wait_s": self.scale_up_wait_s, "scale_down_idle_s": self.scale_down_idle_s,
                 "engine_lora_rank": self.engine_lora_rank or None}
        for name, value in fleet.items():
            if value is not None and not self.engines:
                raise UserError(f"{name} sizes the policy.engines fleet, which is 0", field=f"policy.{name}",
                                fix="set policy.engines >= 1, or leave it unset")
        if self.engines_min is not None and self.engines_min > self.engines:
            raise UserError(f"engines_min = {self.engines_min} is above engines = {self.engines}",
                            field="policy.engines_min", fix="start with at least engines_min engines")
        if self.engines_max is not None and self.engines_max < self.engines:
            raise UserError(f"engines_max = {self.engines_max} is below engines = {self.engines}",
                            field="policy.engines_max", fix="raise engines_max, or start with fewer engines")
        return self


class RolloutConfig(Section):
    """How episodes are run."""

    group_size: int = Field(8, ge=1)
    """Episodes per task per step (the GRPO group)."""
    max_turns: int | None = Field(None, ge=1)
    """Override of the tasks' turn budget (None: each task's own)."""
    max_tokens: int | None = Field(None, ge=1)
    """Override of the tasks' generated-token budget per episode (None: each task's own)."""
    concurrency: int = Field(64, ge=1)
    """Episodes in flight at once."""
    tool_workers: int = Field(2, ge=1)
    """Threads executing tools and verification beside generation."""
    stall_timeout_s: float = Field(900.0, gt=0)
    """Watchdog: seconds in which no episode ends a tool call, a lease or its scoring before the rollout stops
    with an error naming where the episodes are stuck (never a silent hang). Longer than any one tool call,
    sandbox lease or verification of the run's tasks."""
    infra_retries: int = Field(1, ge=0)
    """Retries of an infra fault before the episode is masked."""
    max_output_chars: int = Field(4000, ge=200)
    """Characters of one tool result the model sees (head and tail kept, the middle cut)."""
    max_context_tokens: int | None = Field(None, ge=16)
    """Tokens one episode's context may hold (prompt, every turn and tool output so far, and room for the next
    turn). Past it, older tool output is elided (`context_elided`), then the episode is truncated by
    "context". Unset: the model's window; larger than the window: the window."""
    feedback: Literal["cases", "blank"] = "cases"
    """What the environment tells a failed answer of an attempts task (`Task.attempts`): `cases`, each visible
    case it failed as its call, the result expected and what it got; `blank`, only "wrong" (the control that
    shows whether a model uses what failed or only tries again; docs/BENCHMARKS.md, "The loop")."""
    max_tool_output_tokens: int | None = Field(None, ge=8)
    """Tokens of one tool result the model sees: a longer one keeps its first third and last two thirds around
    a visible "[... N tokens of output cut ...]" marker (after `max_output_chars`). Unset: no token cap."""


class TrainConfig(Section):
    """The GRPO-family trainer."""

    steps: int = Field(150, ge=0)
    """Policy-update steps."""
    batch_size: int = Field(16, ge=1)
    """Tasks per step (each sampled `rollout.group_size` times)."""
    lr: float = Field(3e-4, gt=0)
    """AdamW peak learning rate (reached after warm-up, then shaped by `lr_decay`; the quickstart's
    0.8M-parameter model learns fastest at 3e-4 and loses ground at 5e-4 — larger models want far less, e.g.
    1e-6)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear learning-rate warm-up steps."""
    lr_decay: Literal["constant", "linear", "cosine"] = "cosine"
    """After warm-up: decay the rate over the remaining `steps` to `lr_final` x `lr` along a half cosine
    (cosine) or a line (linear), or keep `lr` (constant). The quickstart gains more with cosine than at a
    constant rate from the same start (docs/BENCHMARKS.md, "Training")."""
    lr_final: float = Field(0.1, ge=0, le=1)
    """The learning rate at the last step, as a fraction of `lr`, under a decaying `lr_decay`."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    advantage: str = "grpo"
    """Advantage estimator: grpo, dr_grpo or rloo."""
    turn_baseline: bool = False
    """Multi-turn episodes: each generated turn's tokens get the estimator's advantage among the group's
    episodes that reached that turn, not the whole group's (`rlvr.train.advantages.turn_advantages`). An
    episode reaches a later turn only when its earlier ones failed, so against the whole group later turns are
    pushed down on average and, on a small model, drift to high entropy. Not with `loss = "gspo"` (one
    advantage per sequence)."""
    loss: str = "ppo_clip"
    """Policy loss from the loss table: ppo_clip (PPO's clipped token ratio), pg (importance-weighted policy
    gradient, no clipping), gspo (GSPO: one ratio per sequence, the geometric mean of its token ratios,
    clipped per sequence) or cispo (CISPO: the clipped token ratio, gradient stopped, times the log-prob;
    every token keeps its gradient). `clip_low`, `clip_high` and `aggregation` left unset take the loss's
    paper defaults (`rlvr.train.losses.PAPER_DEFAULTS`): ppo_clip and pg 0.2 / 0.2, token; gspo 3e-4 / 4e-4,
    sequence (GSPO v2, section 5.1); cispo 1.0 (no lower clip, MiniMax-M1) / 4.0, token.
    Differs from its paper: cispo's clip_high, MiniMax-M1 tunes it, no value given (ScaleRL: eps_max 5)."""
    aggregation: Literal["token", "sequence", "constant"] | None = None
    """Average the loss over all tokens of the batch (token), per sequence then over sequences (sequence), or
    sum it over tokens and divide by sequences x `norm_length` (constant: Dr. GRPO, no length bias). Unset:
    the loss's paper's (sequence for gspo, token otherwise)."""
    norm_length: int = Field(256, ge=1)
    """The constant length of the `constant` aggregation."""
    clip_low: float | None = Field(None, ge=0)
    """Clip range below 1 (the token ratio's for ppo_clip, the sequence ratio's for gspo, the detached
    weight's for cispo: 1.0 means no lower clip). Unset: the loss's paper's (0.2; gspo 3e-4; cispo 1.0)."""
    clip_high: float | None = Field(None, ge=0)
    """Clip range above 1 (DAPO's clip-higher: set it above clip_low, e.g. 0.28). Unset: the loss's paper's
    (0.2; gspo 4e-4; cispo 4.0)."""
    kl_coef: float = Field(0.0, ge=0)
    """Coefficient of the KL penalty to a frozen reference (0: no reference model)."""
    epochs: int = Field(1, ge=1)
    """Gradient passes over each batch (importance ratios from the stored log-probs)."""
    minibatches: int = Field(1, ge=1)
    """Optimizer steps per pass over a batch (the batch is split into this many parts)."""
    micro_batch_size: int = Field(32, ge=1)
    """Sequences per forward/backward; gradients accumulate over the batch."""
    micro_batch_tokens: int | None = Field(None, ge=1)
    """Cut micro-batches by tokens instead of `micro_batch_size`: each forward/backward computes at most this
    many tokens, episodes packed into one row (position ids restarting, no attention across episodes) where
    the model's attention allows, else grouped by length with at most 10 % padding (`train/padding_fraction`).
    It must hold the longest episode. The gradient is the same: loss normalisers are the batch's."""
    threads: int | None = Field(None, ge=1)
    """torch CPU threads while the trainer computes alone: the SFT warm start and, in a synchronous run, each
    update (the sandboxes and the sampler are idle then). Unset: every CPU this process may use on one rank,
    `policy.threads` on several (each rank has its share) and in asynchronous mode (the next rollout runs
    beside the update; SFT still gets every CPU). Rollouts always run with `policy.threads`."""
    activation_checkpointing: bool = False
    """Keep only each transformer block's input for the backward pass and recompute the block then (about a
    third more compute, activations of one block instead of all): for long episodes. Also in SFT, under LoRA,
    DDP and FSDP2."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping norm."""
    max_staleness: int = Field(0, ge=0)
    """Asynchronous mode when >= 1: the rollouts of the next steps are generated (from a separate copy of the
    weights, synced after each update) while this step's update runs, and no episode trains more than this
    many policy versions after the one that sampled it. 0: synchronous, every episode on-policy."""
    off_policy: Literal["behaviour", "decoupled"] = "behaviour"
    """Importance ratio of the loss: against the stored behaviour log-probs (behaviour: plain PPO, stale
    tokens clipped at 1 +- clip), or decoupled PPO: the ratio is taken against the weights at the start of the
    update (recomputed) and weighted by the behaviour correction `is_correction` (by default min(proximal /
    behaviour, `is_cap`)). Decoupled also measures `mismatch/*` on every token (behaviour: on the first
    minibatch's)."""
    is_cap: float = Field(2.0, ge=1)
    """Truncation of the behaviour importance weight in the decoupled correction."""
    is_correction: str = "tis"
    """The decoupled correction's weight on rho = pi_trainer / pi_behaviour, the ratio of the trainer's
    recomputed log-probs to the sampler's (it corrects the sampler/trainer mismatch, and the lag in
    asynchronous mode): tis (truncated importance sampling, min(rho, `is_cap`)), mis (masked importance
    sampling: rho inside [`is_mask_low`, `is_mask_high`], 0 outside: the token or sequence is dropped) or none
    (no weight). Other than tis it needs `off_policy = "decoupled"`."""
    is_level: str = "token"
    """Level of rho in the decoupled correction: token (each token's own), sequence (the product over the
    sequence's generated tokens, one weight per sequence) or geometric (their geometric mean:
    length-normalised, for mis with a tight band). Other than token it needs `off_policy = "decoupled"`."""
    is_mask_low: float = Field(0.5, gt=0, le=1)
    """Masked importance sampling (`is_correction = "mis"`): ratios below this are dropped."""
    is_mask_high: float = Field(2.0, ge=1)
    """Masked importance sampling: ratios above this are dropped."""
    lora: bool = False
    """Train LoRA adapters (peft) instead of all weights."""
    lora_rank: int = Field(16, ge=1)
    """LoRA rank."""
    checkpoint_every: int = Field(10, ge=1)
    """Steps between checkpoints (a final one is always written)."""
    flag_penalty: float = 0.0
    """Reward of an episode with an integrity flag."""
    truncation: Literal["score", "mask", "overlong"] = "mask"
    """What an episode cut by a budget (turns, tokens, wall, context) teaches (rlvr.train.truncation):
    `mask` (default), nothing (left out of the update like an infra fault: DAPO's overlong filtering), so
    that a cut episode is never a clean failure unless the run says so; `score`, its verdict as it stands
    (the work done so far); `overlong`, its verdict plus DAPO's soft overlong penalty, ramping over the last
    `overlong_buffer` of the token budget."""
    overlong_buffer: float = Field(0.2, gt=0, le=1)
    """Share of the episode's token budget over which the overlong penalty ramps from 0 to
    `overlong_penalty` (DAPO: 4,096 of 20,480 tokens)."""
    overlong_penalty: float = Field(1.0, ge=0)
    """Largest overlong penalty, subtracted at the budget and past it (DAPO: 1)."""
    heldout_samples: int = Field(4, ge=1)
    """Samples per held-out task for pass@1 (the share that pass at the policy's temperature, per task)."""
    heldout_greedy: bool = True
    """Also measure greedy pass@1 (one argmax decode per held-out task)."""
    heldout_every: int = Field(0, ge=0)
    """Also measure held-out pass@1 every this many steps, for the learning curve in summary.json (0: only
    before and after RL)."""
    world_size: int | None = Field(None, ge=1)
    """Ranks of the torch.distributed job (docs/SCALING.md). Unset: as launched (torchrun's WORLD_SIZE), else
    1; set, it must match the launcher; with `--cluster` this many Ray workers are started. It must divide
    `batch_size` (a group never spans ranks)."""
    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"
    """torch.distributed backend: auto picks nccl when the policy runs on CUDA, gloo on CPU."""
    sharding: Literal["fsdp", "ddp"] = "fsdp"
    """How several ranks hold the policy: fsdp (FSDP2 per transformer block: each rank about 1/N of
    parameters, gradients and optimizer state) or ddp (a full replica per rank, gradients all-reduced)."""
    mixed_precision: Literal["no", "bf16"] = "no"
    """bf16: the update's forward and backward passes compute in bfloat16 while the weights, the optimizer
    state and the gradient reduction stay float32 (FSDP2's MixedPrecisionPolicy; one rank or DDP: autocast).
    Needs `policy.dtype = "float32"`."""


class SFTConfig(Section):
    """Supervised warm start before RL."""

    enabled: bool = True
    """Run SFT before RL (the quickstart's warm start: a brief constant-rate SFT on reference answers)."""
    source: str = "reference"
    """`reference`: the training domains' reference answers (single-turn tasks); `gold`: gold tool
    trajectories, each training task's reference played through the env as a multi-turn tool episode (look,
    run the failing tests, write the fix, run them again, submit) and trained on as its token record
    (`rlvr.rollout.policies.gold`); or a JSONL file of {prompt, completion} records. Held-out tasks are never
    used."""
    examples: int = Field(6400, ge=1)
    """Examples drawn from the reference solutions (the quickstart sees each once: steps x batch_size); with
    `gold`, the number of training tasks whose trajectories are played (each one a sandboxed episode)."""
    recovery_every: int = Field(0, ge=0)
    """Every N RL steps, one SFT step on recovery samples: failed episodes of the last N steps, their turns
    before the last replayed (no loss on them) and continued by the task's gold turns played through the env
    (loss on those), never from a held-out task. 0: off."""
    recovery_samples: int = Field(8, ge=1)
    """Most recovery samples of one such step (the newest failures first)."""
    steps: int = Field(200, ge=0)
    """Optimizer steps."""
    lr: float = Field(2e-3, gt=0)
    """Peak learning rate (after `warmup_steps`, then shaped by `lr_decay`)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up steps."""
    lr_decay: Literal["constant", "linear", "cosine"] = "constant"
    """After warm-up: keep the rate (`constant`), or decay it over the remaining `steps` to `lr_final` x `lr`
    (`train.lr_decay`'s shapes, `rlvr.train.update.lr_lambda`). A decayed rate ends SFT in a settled state:
    at a constant rate the last steps' noise decides much of where the start lands."""
    lr_final: float = Field(0.1, ge=0, le=1)
    """The learning rate at the last step, as a fraction of `lr`, under a decaying `lr_decay`."""
    batch_size: int = Field(32, ge=1)
    """Examples per step."""


class BudgetConfig(Section):
    """Episode budget overrides of a tier or domain (unset: keep the task's own)."""

    max_turns: int | None = Field(None, ge=1)
    """Model turns allowed."""
    max_tokens: int | None = Field(None, ge=1)
    """Tokens the model may generate over the whole episode."""


class ScheduleConfig(Section):
    """What to practise next."""

    weights: dict[str, float] = Field(default_factory=dict)
    """Sampling weight per domain (default: equal)."""
    quotas: dict[str, int] = Field(default_factory=dict)
    """Minimum tasks per step per domain."""
    ema: float = Field(0.3, gt=0, le=1)
    """Weight of a new observation in a task's pass-rate EMA."""
    band_low: float = Field(0.05, ge=0, le=1)
    """Pass rate at or below which a task counts as never solved."""
    band_high: float = Field(0.95, ge=0, le=1)
    """Pass rate at or above which a task counts as always solved."""
    outside_band_weight: float = Field(0.2, ge=0)
    """Relative sampling weight of tasks outside the learnable band."""
    skip_zero_variance: bool = True
    """Leave groups with equal rewards out of the update (counted and stored)."""
    failed_retention: float = Field(1.0, ge=0, le=1)
    """Share of failed trajectories kept in the store."""
    pass_rates_from: str | None = None
    """Path of a previous run's pass rates to start from."""
    fresh_share: float = Field(1.0, ge=0, le=1)
    """Procedural domains: share of draws that take a fresh index; the rest revisit known tasks by tier. Fresh
    tasks teach the skill rather than the tasks: the quickstart gained 18.5 held-out points with 1.0 and 12.7
    with 0.5 (revisits help where fresh tasks are scarce or mostly unlearnable)."""
    tier_budgets: dict[str, BudgetConfig] = Field(default_factory=dict)
    """Episode budgets per tier (`unseen`, `never`, `learnable`, `always`); they win over domain budgets."""
    domain_budgets: dict[str, BudgetConfig] = Field(default_factory=dict)
    """Episode budgets per domain, over the tasks' own limits."""

    @model_validator(mode="after")
    def _bands(self) -> ScheduleConfig:
        if self.band_low >= self.band_high:
            raise ValueError("band_low must be below band_high")
        return self


class StoreConfig(Section):
    """What is kept."""

    url: str | None = None
    """fsspec URL of the run's storage (default: the run directory). `s3://bucket/run` works."""
    storage_options: dict[str, Any] = Field(default_factory=dict)
    """Options of the fsspec filesystem, e.g. `{ endpoint_url = "http://127.0.0.1:9000" }` for an
    S3-compatible server (credentials come from the usual environment variables, never from this file)."""
    compression: Literal["zstd", "snappy", "gzip", "none"] = "zstd"
    """Parquet compression of stored episodes."""


class MonitorConfig(Section):
    """What is seen."""

    tensorboard: bool = True
    """Write TensorBoard event files under the run directory."""
    mlflow: bool = False
    """Also log to MLflow (needs mlflow installed)."""
    wandb: bool = False
    """Also log to Weights & Biases (needs wandb installed)."""
    report: bool = True
    """Write the HTML report at the end of the run."""
    mlflow_tracking_uri: str | None = None
    """MLflow tracking URI (None: MLflow's own default, `./mlruns` or MLFLOW_TRACKING_URI)."""
    mlflow_experiment: str = "rlvr"
    """MLflow experiment name."""
    wandb_project: str = "rlvr"
    """Weights & Biases project."""
    wandb_mode: Literal["online", "offline", "disabled"] = "online"
    """Weights & Biases mode (`offline` writes under the run directory and syncs later)."""
    detectors: bool = True
    """Run the anomaly detectors and write alerts to `<run_dir>/alerts.jsonl` and the run log."""
    window: int = Field(5, ge=1)
    """Steps in each window the trend detectors compare (the latest window against the one before it); while a
    run has fewer than two windows of steps, half of its steps (at least two)."""
    flag_rate_rise: float = Field(0.10, gt=0, le=1)
    """Reward hacking: rise of the flagged share of episodes between the two windows that raises an alert."""
    truncation_rise: float = Field(0.10, gt=0, le=1)
    """Rise of the share of episodes one budget cut (turns, tokens, wall, context) between the two windows
    that raises an alert."""
    reward_rise: float = Field(0.10, gt=0)
    """Reward hacking: rise of the mean training reward between the two windows that counts as rising."""
    heldout_metric: str = "heldout/pass_rate"
    """Extra metric holding the held-out pass rate (logged by the trainer at its eval steps)."""
    heldout_tolerance: float = Field(0.02, ge=0)
    """Reward hacking: a held-out pass rate that rose by no more than this counts as not rising."""
    task_spike: float = Field(0.5, gt=0, le=1)
    """Jump of one task's mean reward above its own history that raises a spike alert."""
    task_spike_z: float = Field(4.0, ge=0)
    """And it must stand this many standard errors above the task's own reward noise."""
    task_min_history: int = Field(2, ge=1)
    """Earlier steps a task must have been seen at before spikes on it are judged."""
    length_ratio: float = Field(2.0, gt=1)
    """Length blow-up: mean generated tokens at or above this multiple of the recent median."""
    length_min_delta: float = Field(32.0, ge=0)
    """Length blow-up: and at least this many tokens above it (ignores noise on short answers)."""
    entropy_ratio: float = Field(0.2, gt=0, lt=1)
    """Entropy collapse: `policy/entropy` at or below this share of its early level."""
    mismatch_kl: float = Field(0.01, gt=0)
    """Sampler/trainer mismatch: `mismatch/kl` (k3 estimate of KL(sampler || trainer), nats per generated
    token) above this for `patience` steps raises an alert (in asynchronous mode it includes the policy's
    lag)."""
    mismatch_ratio_low: float = Field(0.8, gt=0, lt=1)
    """Sampler/trainer mismatch: `mismatch/ratio_p5` (trainer / sampler probability) below this for `patience`
    steps raises an alert."""
    mismatch_ratio_high: float = Field(1.25, gt=1)
    """Sampler/trainer mismatch: `mismatch/ratio_p95` above this for `patience` steps raises an alert."""
    zero_variance_share: float = Field(0.8, gt=0, le=1)
    """Share of groups with equal rewards (no learning signal) that raises an alert."""
    no_tool_call_share: float = Field(1.0, gt=0, le=1)
    """Share of multi-turn episodes with no tool call (`agent/no_tool_call_share`) that, held for `patience`
    steps, raises an alert: the policy stopped using its tools."""
    patience: int = Field(3, ge=1)
    """Consecutive steps the level detectors (entropy, zero-variance groups, mismatch, no tool calls) must see
    before alerting."""


class ClusterConfig(Section):
    """Scale-out: the Ray cluster, and how the sandbox fleet on it grows, shrinks and drains
    (docs/SCALING.md)."""

    address: str | None = None
    """Ray address (`auto`, `ray://host:port`); None: run locally."""
    sandbox_cpus: float = Field(1.0, ge=0.0)
    """CPUs each node's sandbox worker reserves in Ray, so that an autoscaler counts a node doing sandbox work
    as busy (0: none; the node then looks idle to an autoscaler, which may remove it mid-episode)."""
    sandbox_workers_min: int = Field(1, ge=1)
    """Fewest sandbox workers (one per node): the run waits for this many at start and never scales below
    it."""
    sandbox_workers_max: int | None = Field(None, ge=1)
    """Most sandbox workers; None: one on every node that can hold one, joiners included."""
    scale_up_wait_s: float = Field(5.0, gt=0.0)
    """A job that waited this long for a sandbox slot asks for one more worker (an idle node first, else a
    node from the autoscaler through Ray's `request_resources`)."""
    scale_down_idle_s: float = Field(120.0, gt=0.0)
    """A worker idle (no job, no open workspace) this long is stopped while more than `sandbox_workers_min`
    run."""
    watch_interval_s: float = Field(2.0, gt=0.0)
    """How often the fleet looks for nodes that joined, left or are draining."""
    handback_s: float = Field(10.0, ge=0.0)
    """A draining node's open workspaces are handed back (their episodes go on elsewhere, the changes they
    made replayed) this many seconds before the node's deadline."""

    @model_validator(mode="after")
    def _bounds(self) -> ClusterConfig:
        if self.sandbox_workers_max is not None and self.sandbox_workers_max < self.sandbox_workers_min:
            raise UserError(f"sandbox_workers_max = {self.sandbox_workers_max} is below "
                            f"sandbox_workers_min = {self.sandbox_workers_min}",
                            field="cluster.sandbox_workers_max",
                            fix="raise it to at least sandbox_workers_min, or leave it unset")
        return self


class AgentConfig(Section):
    """An agent from outside as the policy (`rlvr eval --agent`, and the rollouts of `rlvr train`): it runs in
    each episode's sandbox and calls the gateway in front of the policy through OPENAI_BASE_URL
    (docs/INTEGRATIONS.md, "Train your own agent")."""

    command: str = ""
    """Shell command that runs the agent in the task's workspace, or a harness preset (claude-code, codex,
    openai-agents, mini-swe-agent, smolagents, smolagents-code: rlvr.rollout.gateway.presets); empty: the
    built-in env plays the policy."""
    dir: str = "."
    """Directory of the agent's files, mounted read-only in the sandbox as $RLVR_AGENT_DIR."""
    python: str | None = None
    """Interpreter (or venv directory) with the agent's packages, mounted read-only; None: rlvr's own."""
    concurrency: int = Field(4, ge=1)
    """Agents running at once (each holds one sandbox worker)."""
    memory_mb: int = Field(1024, ge=64)
    """Memory limit of one agent's process tree, in MiB."""
    processes: int = Field(128, ge=8)
    """Processes and threads one agent may run."""
