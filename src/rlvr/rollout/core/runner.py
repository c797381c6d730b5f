"""The built-in env loop (`EnvRollouts`, a `Rollouts` driver): many episodes at once, generation batched
across every live episode while tools and scoring of the others run on worker threads; produces Episode
records with exact token data.

Each episode that ends is scored exactly once, by the run's `Scorer` (rlvr.verify.scorer: verification,
its retries, the verdict cache, the flag penalty), on the worker thread that finished it. Infra faults (a
sandbox that died, a verifier that could not judge, a backend request that failed) are retried
`RolloutConfig.infra_retries` times; after that the episode is kept with status "infra_error" and is
masked from training, never scored 0. The policy's idle fraction is the share of wall time in which the
generation loop had no episode to generate for because all of them were waiting on tools or verification.
"""
from __future__ import annotations

import queue
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rlvr.config import RolloutConfig
from rlvr.envs.context import cap_tokens, elide
from rlvr.envs.dialects import HERMES, Dialect
from rlvr.envs.env import Env
from rlvr.envs.messages import Message
from rlvr.errors import InfraError, Stalled, UserError
from rlvr.rollout.core.rollouts import OnEpisode, Progress, RolloutStats, Sample, samples, verify_seed
from rlvr.rollout.core.tokens import ChatEncoder, TokenStream, end_texts
from rlvr.rollout.episode import TOKEN_BUDGET, Episode
from rlvr.rollout.policies.trainable import generation_version, is_trainable
from rlvr.rollout.policy import Completion, Policy, SamplingParams
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import Scorer

BATCH_WINDOW_S = 0.005
"""How long generation waits, once an episode is ready, for others to become ready and join the same batched
call: resets and tool calls that finish within a few milliseconds of each other (a step's first turn, above
all) are generated together instead of in a small call followed by a large one."""


@dataclass
class _Live:
    """One episode in flight."""

    ep: Episode
    task: Task
    env: Env
    stream: TokenStream | None
    messages: list[Message] = field(default_factory=list)
    turn: int = 0
    gen_failures: int = 0
    t_start: float = field(default_factory=time.perf_counter)
    """When the episode was started (its sandbox leased); `timings["total"]` runs from here to the verdict."""
    elided_originals: dict[int, str] = field(default_factory=dict)
    versions: list[int] = field(default_factory=list)
    """Policy version of each generated turn."""
    phase: str = "queued"
    """What the episode is doing on a worker thread now (named by the watchdog when nothing progresses)."""
    phase_since: float = field(default_factory=time.monotonic)
    verify_seed: int = 0
    """The group's verification seed (`verify_seed`)."""


class EnvRollouts:
    """Runs GRPO groups of episodes for a batch of tasks with one policy and one sandbox pool, through the
    built-in env (`rlvr.envs.env.Env`): the policy generates, the env runs its tool calls."""

    def __init__(self, policy: Policy, pool: SandboxPool | None, scorer: Scorer | None = None, *,
                 config: RolloutConfig | None = None, sampling: SamplingParams | None = None,
                 run_id: str = "",
                 progress: Progress | None = None, on_episode: OnEpisode | None = None) -> None:
        """`scorer` defaults to one on `pool` with the config's retries, no flag penalty and its own cache.
        `progress(done, total)` and `on_episode(episode)` are called on the driver's thread as each episode
        ends (so an interrupted run's caller still holds every finished episode)."""
        self.policy = policy
        self.pool = pool
        self.config = config or RolloutConfig()
        self.scorer = scorer or Scorer(pool, retries=self.config.infra_retries)
        self.sampling = sampling or SamplingParams()
        self.run_id = run_id
        self.progress = progress
        self.on_episode = on_episode
        self.encoder: ChatEncoder | None = policy if isinstance(policy, ChatEncoder) else None
        self.dialect: Dialect = getattr(policy, "dialect", None) or HERMES
        """How the policy's model family writes tool calls: what each episode's Env parses."""
        self._eos: tuple[frozenset[int], tuple[str, ...]] = (frozenset(), ())
        """What ends a turn in the token record: the end ids and their texts (trainable backends)."""
        if is_trainable(policy):
            eos = policy.eos_ids  # type: ignore[attr-defined]
            self._eos = (eos, end_texts(policy.tokenizer, eos))  # type: ignore[attr-defined]
        self.stats = RolloutStats()

    # --------------------------------------------------------------------------------------------- driver
    def with_sampling(self, sampling: SamplingParams, *, progress: Progress | None = None,
                      on_episode: OnEpisode | None = None, policy: Policy | None = None) -> EnvRollouts:
        """The same loop (pool, Scorer, config) sampling with `sampling`, on this policy or `policy` (a gold
        policy playing reference solutions)."""
        return EnvRollouts(policy or self.policy, self.pool, self.scorer, config=self.config,
                           sampling=sampling,
                           run_id=self.run_id, progress=progress, on_episode=on_episode)

    def run(self, tasks: Sequence[Task], group_size: int, *, step: int = 0, seed: int = 0,
            repeats: Sequence[int] | None = None) -> list[Episode]:
        """`group_size` episodes per task (sharing a group_id), in task order then sample order. `repeats`:
        how many times each task came earlier in the whole batch, when `tasks` is one rank's share of it."""
        t0 = time.perf_counter()
        self.stats = RolloutStats()
        lives = [self._new(sample, step, seed, group_size) for sample in samples(tasks, group_size, repeats)]
        events: queue.Queue[tuple[str, _Live, BaseException | None]] = queue.Queue()
        pending = list(reversed(lives))
        in_flight = finished = 0
        user_error: BaseException | None = None
        pool = ThreadPoolExecutor(self.config.tool_workers, thread_name_prefix="rlvr-tools")
        stalled = False
        try:
            while finished < len(lives):
                while pending and in_flight < self.config.concurrency:
                    live = pending.pop()
                    in_flight += 1
                    self._submit(pool, events, live, self._reset, "sandbox lease and reset")
                ready: list[_Live] = []
                w0 = time.perf_counter()
                try:
                    kind, live, exc = events.get(timeout=self.config.stall_timeout_s)
                except queue.Empty:
                    stalled = True
                    raise self._stalled(lives) from None
                self.stats.idle_s += time.perf_counter() - w0
                window = time.perf_counter() + BATCH_WINDOW_S
                while True:
                    if kind == "done":
                        finished += 1
                        in_flight -= 1
                        user_error = user_error or exc
                        if self.on_episode:
                            self.on_episode(live.ep)
                        if self.progress:
                            self.progress(finished, len(lives))
                    else:
                        ready.append(live)
                    try:  # what else becomes ready within the window joins this batch
                        kind, live, exc = events.get(timeout=max(0.0, window - time.perf_counter()))
                    except queue.Empty:
                        break
                if ready:
                    self._generate(ready, pool, events)
        # a stuck worker cannot be joined: after a stall the error ends the run instead of a second hang
        finally:
            pool.shutdown(wait=not stalled, cancel_futures=stalled)
        if user_error is not None:
            raise user_error
        self.stats.wall_s = time.perf_counter() - t0
        self.stats.episodes = len(lives)
        return [lv.ep for lv in lives]

    def _new(self, sample: Sample, step: int, seed: int, group_size: int) -> _Live:
        ep = sample.episode(run_id=self.run_id, step=step, seed=seed, group_size=group_size,
                            policy_version=self._version())
        env = Env(self.pool, max_turns=self.config.max_turns, max_tokens=self.config.max_tokens,
                  max_output_chars=self.config.max_output_chars, infra_retries=self.config.infra_retries,
                  feedback=self.config.feedback, dialect=self.dialect)
        ep.timings = {"generate": 0.0, "tools": 0.0, "verify": 0.0, "total": 0.0}
        ep.metadata = {"finish_reasons": [], "tool_calls": 0, "call_errors": 0,
                       "tool_format": self.dialect.name}
        return _Live(ep, sample.task, env, TokenStream(self.encoder) if self.encoder is not None else None,
                     verify_seed=verify_seed(seed, sample.task.key, sample.repeat))

    @property
    def context_limit(self) -> int:
        """Tokens an episode's context may hold: `rollout.max_context_tokens`, at most the model's window."""
        window = self.encoder.max_context  # type: ignore[union-attr]
        cap = self.config.max_context_tokens
        return window if cap is None else min(cap, window)

    def _version(self) -> int:
        """The version that generates now: a separate generation copy's, else the policy's."""
        return generation_version(self.policy)

    def _stalled(self, lives: list[_Live]) -> Stalled:
        """The watchdog's error: where the episodes in flight are, and for how long."""
        now, waiting = time.monotonic(), [lv for lv in lives if lv.phase not in ("queued", "done")]
        phases: dict[str, list[float]] = {}
        for lv in waiting:
            phases.setdefault(lv.phase, []).append(now - lv.phase_since)
        where = "; ".join(f"{len(ages)} in {phase} (the oldest for {max(ages):.0f} s)"
                          for phase, ages in sorted(phases.items(), key=lambda kv: -len(kv[1])))
        return Stalled(f"rollout stalled: no episode progressed for {self.config.stall_timeout_s:.0f} s "
                       f"(rollout.stall_timeout_s); {len(waiting)} episodes in flight: {where or 'none'}")

    def _submit(self, pool: ThreadPoolExecutor, events: queue.Queue, live: _Live, fn: Callable[[_Live], str],
                phase: str) -> None:
        live.phase, live.phase_since = f"waiting for a tool thread (for {phase})", time.monotonic()
        pool.submit(self._guard, events, live, fn, phase)

    def _guard(self, events: queue.Queue, live: _Live, fn: Callable[[_Live], str], phase: str) -> None:
        """Run one piece of episode work on a worker thread; whatever happens, the episode comes back."""
        live.phase, live.phase_since = phase, time.monotonic()
        try:
            kind = fn(live)
            live.phase = "done" if kind == "done" else "waiting for generation"
            if kind == "done":
                live.ep.timings["total"] = time.perf_counter() - live.t_start
            events.put((kind, live, None))
        except UserError as exc:  # bad input (e.g. an unknown verifier kind): stop the run with its message
            self._fail(live, str(exc))
            events.put(("done", live, exc))
        # an infra fault or a bug below us: mask this episode, keep the batch
        except Exception as exc:  # noqa: BLE001
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self._fail(live, detail)
            events.put(("done", live, None))

    def _fail(self, live: _Live, why: str) -> None:
        live.ep.timings["total"] = time.perf_counter() - live.t_start
        live.ep.status = "infra_error"
        live.ep.metadata["error"] = why
        live.ep.infra_retries += live.env.retries_used
        self._place(live)
        live.ep.messages = list(live.messages)
        if live.stream is not None:  # nothing is lost: the tokens so far stay with the masked episode
            live.ep.token_ids, live.ep.loss_mask = live.stream.ids, live.stream.mask
            live.ep.logprobs = live.stream.logprobs
        live.env.close()

    # ------------------------------------------------------------------------------------- worker phases
    def _reset(self, live: _Live) -> str:
        t0 = live.t_start = time.perf_counter()
        for attempt in range(self.config.infra_retries + 1):
            try:
                obs = live.env.reset(live.task, live.ep.seed)
                break
            except InfraError:
                if attempt == self.config.infra_retries:
                    raise
                live.ep.infra_retries += 1
        live.messages = list(obs.messages)
        if live.stream is not None and obs.tools:
            live.stream.tools = list(obs.tools)  # rendered natively by templates that take `tools=`
        live.ep.timings["tools"] += time.perf_counter() - t0
        return "ready"

    def _act(self, live: _Live, comp: Completion) -> str:
        """Run the model's action in the env; then either come back for the next turn or finish."""
        t0 = time.perf_counter()
        action = live.messages[-1]
        res = live.env.step(action, num_tokens=comp.num_tokens, finish_reason=comp.finish_reason,
                             call_errors=comp.call_errors)
        live.messages.extend(self._capped(live, res.messages))
        live.ep.metadata["tool_calls"] += res.info.get("tool_calls", 0)
        live.ep.metadata["call_errors"] += res.info.get("call_errors", 0)
        if "attempt_passed" in res.info:  # an attempts task: each answer's check, in order (None: unchecked)
            live.ep.metadata.setdefault("attempts", []).append(res.info["attempt_passed"])
        live.ep.timings["tools"] += time.perf_counter() - t0
        if res.terminated or res.truncated:
            return self._finish(live, "done" if res.terminated else "truncated", res.truncated_by)
        return "ready"

    def _capped(self, live: _Live, messages: Sequence[Message]) -> list[Message]:
        """Tool results cut to `rollout.max_tool_output_tokens` (head and tail around a visible marker), so
        one large output cannot fill the context; counted in the episode's `tool_outputs_cut`."""
        limit = self.config.max_tool_output_tokens
        decode = getattr(self.encoder, "decode", None)
        if limit is None or self.encoder is None or decode is None:
            return list(messages)
        out = []
        for m in messages:
            if m.role == "tool":
                text, cut = cap_tokens(m.content, limit, self.encoder.encode, decode)
                if cut:
                    m = m.model_copy(update={"content": text})
                    live.ep.metadata["tool_outputs_cut"] = live.ep.metadata.get("tool_outputs_cut", 0) + 1
            out.append(m)
        return out

    def _finish(self, live: _Live, status: str, truncated_by: str | None) -> str:
        ep = live.ep
        final = live.env.final_state()
        live.env.close()
        ep.status = status  # type: ignore[assignment]
        ep.truncated_by = truncated_by
        budgets = live.env.budgets  # what it could generate: the overlong penalty ramps towards it
        ep.metadata[TOKEN_BUDGET] = min(budgets.max_tokens, self.sampling.max_new_tokens * budgets.max_turns)
        ep.final_state = final
        self._place(live)
        self._score(live, final)
        ep.messages = list(live.messages)
        ep.infra_retries += live.env.retries_used
        if live.elided_originals:
            ep.metadata["elided_originals"] = {str(k): v for k, v in live.elided_originals.items()}
        if live.stream is not None:
            ep.token_ids, ep.loss_mask, ep.logprobs = live.stream.ids, live.stream.mask, live.stream.logprobs
            ep.metadata["token_restarts"] = live.stream.restarts
            if live.stream.segments:  # the records it started over from, each trained on its own tokens
                ep.metadata["segments"] = live.stream.segments
        return "done"

    @staticmethod
    def _place(live: _Live) -> None:
        """Where the episode's workspace was: the last node that held it, and the ones lost under it."""
        if live.env.nodes:
            live.ep.node, live.ep.lost_nodes = live.env.nodes[-1], list(live.env.nodes[:-1])

    def _score(self, live: _Live, final: FinalState) -> None:
        """The episode's one call to the Scorer: its verdict and reward."""
        live.phase, live.phase_since = "scoring", time.monotonic()
        scored = self.scorer.score(live.task, final, live.verify_seed)
        live.ep.verdict, live.ep.reward = scored.verdict, scored.reward
        live.ep.infra_retries += max(0, scored.attempts - 1)
        live.ep.timings["verify"] += scored.seconds
        # no workspace: the node that verified it, for a cached verdict the node that verified the same
        # state (its verdict is this episode's), so a node's faults can be traced from the store
        node = scored.verdict.details.get("node")
        if live.ep.node is None and isinstance(node, str):
            live.ep.node = node
        if scored.infra_error is not None:
            live.ep.status = "infra_error"
        if scored.cached:
            live.ep.metadata["verdict_cached"] = True

    # ------------------------------------------------------------------------------------------ generation
    def _generate(self, ready: list[_Live], pool: ThreadPoolExecutor, events: queue.Queue) -> None:
        """One batched generation call for every ready episode; their actions go to the worker threads."""
        batch, prompts, budgets = [], [], []
        for live in ready:
            prompt, budget, cut = self._prepare(live)
            if cut is not None:
                self._submit(pool, events, live, lambda lv, c=cut: self._finish(lv, "truncated", c),
                             "scoring")
                continue
            batch.append(live)
            prompts.append(prompt)
            budgets.append(budget)
        if not batch:
            return
        sp = self.sampling
        params = SamplingParams(temperature=sp.temperature, top_p=sp.top_p, max_new_tokens=max(budgets),
                                stop=sp.stop,
                                seeds=tuple(lv.ep.seed + 1_000_003 * lv.turn for lv in batch),
                                budgets=tuple(budgets))
        t0 = time.perf_counter()
        try:
            kw: dict[str, Any] = {"prompt_token_ids": prompts} if self.encoder is not None else {}
            comps = self.policy.generate([lv.messages for lv in batch], params, **kw)
            if len(comps) != len(batch):
                raise RuntimeError(f"the policy returned {len(comps)} completions for {len(batch)} "
                                   f"conversations")
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 (a backend fault: each episode retries, then is masked)
            comps = [Completion(text="", finish_reason="error", error=f"{type(exc).__name__}: {exc}")
                     for _ in batch]
        dt = time.perf_counter() - t0
        self.stats.generate_s += dt
        self.stats.generate_calls += 1
        for live, comp in zip(batch, comps):
            live.ep.timings["generate"] += dt
            if comp.finish_reason == "error":
                live.gen_failures += 1
                live.ep.infra_retries += 1
                if live.gen_failures > self.config.infra_retries:
                    self._fail(live, f"generation failed: {comp.error}")
                    events.put(("done", live, None))
                else:
                    events.put(("ready", live, None))
                continue
            self._record(live, comp)
            self._submit(pool, events, live, lambda lv, c=comp: self._act(lv, c), "tool call")

    def _record(self, live: _Live, comp: Completion) -> None:
        live.turn += 1
        live.ep.num_turns = live.turn
        live.ep.num_generated_tokens += comp.num_tokens
        self.stats.generated_tokens += comp.num_tokens
        live.ep.metadata["finish_reasons"].append(comp.finish_reason)
        if comp.policy_version is not None:  # the oldest weights that sampled any turn (asynchronous mode)
            live.versions.append(comp.policy_version)
            live.ep.policy_version = min(live.versions)
            if len(set(live.versions)) > 1:
                live.ep.metadata["policy_versions"] = list(live.versions)
        live.messages.append(Message(role="assistant", content=comp.text, tool_calls=list(comp.tool_calls)))
        if live.stream is not None:
            live.stream.add_completion(comp, *self._eos)

    def _prepare(self, live: _Live) -> tuple[list[int] | None, int, str | None]:
        """(prompt tokens, max new tokens, truncation reason) for the next turn, eliding old output if
        needed."""
        budgets = live.env.budgets
        left = budgets.max_tokens - live.env.tokens
        budget = min(self.sampling.max_new_tokens, left)
        if budget <= 0:
            return None, 0, "tokens"
        if live.stream is None:
            return None, budget, None
        limit = self.context_limit
        reserve = min(budget, max(1, limit // 8))
        # committed only if the turn fits, so the record never outgrows the context
        trial = live.stream.copy()
        prompt = trial.prompt(live.messages)
        if len(prompt) + reserve > limit:
            msgs, _, fits = elide(live.messages, lambda ms: trial.count(ms) + reserve <= limit)
            if not fits:
                return None, 0, "context"
            for i, (old, new) in enumerate(zip(live.messages, msgs)):
                if new.elided and not old.elided:
                    live.elided_originals[i] = old.content
            live.messages = msgs
            live.ep.context_elided = True
            live.ep.metadata["elided_messages"] = len(live.elided_originals)
            trial.restart(trial.render(msgs))
            prompt = list(trial.ids)
        live.stream = trial
        return prompt, min(budget, limit - len(prompt)), None
