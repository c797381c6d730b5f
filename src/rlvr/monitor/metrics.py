"""Per-step metrics computed from a batch of episodes: a table of named functions, each adding its namespace.

Masked episodes (infra faults) are left out of reward and pass-rate figures: they are infra's fault, not the
policy's, and `infra/rate` counts them. Run-level figures the episodes cannot show (phase timings
`time/<phase>`, `policy/idle_fraction`, `policy/entropy`, the sampler/trainer mismatch `mismatch/*`, the
held-out pass rate) come from the trainer as extras.

The `agent/*` family reads tool use from the transcript, as the Env recorded it (rlvr.envs.env): every
executed call is answered by a `tool` message, whose content starts with `error:` for an unknown tool or bad
arguments and whose `exec_status` says how a command ended; a malformed call is answered by a `user` message
`error: ...` instead, and is not a tool call.

The `loop/*` family measures the seed's loop (write, check, read what failed, write again) in every episode of
several turns: the attempts of an attempts task (each answer's check on the visible cases, as the env recorded
it in `metadata["attempts"]`), or in a tool episode each run of the visible tests after the workspace changed
(`attempt_outcomes`). From them: the first attempt's pass rate, the recovery rate (the chance that attempt k
passes when attempt k-1 failed, pooled over k, and per k), the attempts used and the episodes' own pass rate
(the hidden verdict of the last attempt).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from rlvr.envs.messages import Message
from rlvr.rollout.core.groups import group_rewards, is_zero_variance
from rlvr.rollout.episode import TRUNCATION_REASONS, Episode, tool_names

Metrics = dict[str, float]


def _quantiles(prefix: str, values: list[float], scale: float = 1.0) -> Metrics:
    if not values:
        return {}
    arr = np.asarray(values, dtype=float) * scale
    return {f"{prefix}/mean": float(arr.mean()), f"{prefix}/std": float(arr.std()),
            f"{prefix}/min": float(arr.min()), f"{prefix}/max": float(arr.max()),
            f"{prefix}/p10": float(np.quantile(arr, 0.1)), f"{prefix}/p50": float(np.quantile(arr, 0.5)),
            f"{prefix}/p90": float(np.quantile(arr, 0.9))}


def reward_metrics(eps: list[Episode]) -> Metrics:
    scored = [e for e in eps if not e.masked]
    out = _quantiles("reward", [e.reward for e in scored])
    scores = [e.verdict.score for e in scored if e.verdict is not None]
    if scores:
        out["verdict/score_mean"] = float(np.mean(scores))
    return out


def pass_rate_metrics(eps: list[Episode]) -> Metrics:
    scored = [e for e in eps if not e.masked]
    if not scored:
        return {}
    by_domain: dict[str, list[bool]] = defaultdict(list)
    for e in scored:
        by_domain[e.domain].append(e.passed)
    out = {"pass_rate": float(np.mean([e.passed for e in scored]))}
    out.update({f"pass_rate/{d}": float(np.mean(v)) for d, v in sorted(by_domain.items())})
    return out


def flag_metrics(eps: list[Episode]) -> Metrics:
    if not eps:
        return {}
    kinds: dict[str, int] = defaultdict(int)
    flagged = 0
    for e in eps:
        ks = {f.kind for f in e.verdict.flags} if e.verdict else set()
        flagged += bool(ks)
        for k in ks:
            kinds[k] += 1
    out = {"flags/rate": flagged / len(eps)}
    out.update({f"flags/{k}": n / len(eps) for k, n in sorted(kinds.items())})
    return out


def infra_metrics(eps: list[Episode]) -> Metrics:
    if not eps:
        return {}
    return {"infra/rate": sum(e.masked for e in eps) / len(eps),
            "infra/retries_mean": float(np.mean([e.infra_retries for e in eps]))}


def length_metrics(eps: list[Episode]) -> Metrics:
    if not eps:
        return {}
    lengths = [e.num_generated_tokens for e in eps]
    return {"episode/length": float(np.mean(lengths)), "episode/length_max": float(max(lengths)),
            "episode/turns": float(np.mean([e.num_turns for e in eps])),
            "episode/truncated_rate": sum(e.status == "truncated" for e in eps) / len(eps)}


def truncation_metrics(eps: list[Episode]) -> Metrics:
    """`truncation/rate`, the share of judged episodes a budget cut, and `truncation/<reason>` per budget
    (`other` for a reason outside TRUNCATION_REASONS), shares of the same episodes."""
    judged = [e for e in eps if not e.masked]
    if not judged:
        return {}
    reasons = [(e.truncated_by if e.truncated_by in TRUNCATION_REASONS else "other")
               for e in judged if e.status == "truncated"]
    out = {"truncation/rate": len(reasons) / len(judged)}
    out.update({f"truncation/{r}": reasons.count(r) / len(judged) for r in (*TRUNCATION_REASONS, "other")})
    return out

def sandbox_latencies_s(ep: Episode) -> list[float]:
    """Sandbox latency samples of one episode: its `sandbox` timings, else tool time per tool call."""
    out = []
    if "sandbox" in ep.timings:
        out.append(ep.timings["sandbox"])
    elif "tools" in ep.timings:
        calls = sum(len(m.tool_calls) for m in ep.messages) or 1
        out.append(ep.timings["tools"] / calls)
    if ep.verdict is not None and "sandbox" in ep.verdict.timings:
        out.append(ep.verdict.timings["sandbox"])
    return [float(x) for x in out if x >= 0]


def sandbox_metrics(eps: list[Episode]) -> Metrics:
    lat = [x for e in eps for x in sandbox_latencies_s(e)]
    out: Metrics = {}
    if lat:
        out["sandbox/p50_ms"] = float(np.quantile(lat, 0.5) * 1000)
        out["sandbox/p95_ms"] = float(np.quantile(lat, 0.95) * 1000)
    statuses = [m.exec_status for e in eps for m in e.messages if m.role == "tool" and m.exec_status]
    if statuses:
        out["sandbox/exec_error_rate"] = sum(s != "ok" for s in statuses) / len(statuses)
        out["sandbox/timeout_rate"] = sum(s == "timeout" for s in statuses) / len(statuses)
        out["sandbox/infra_error_rate"] = sum(s == "infra_error" for s in statuses) / len(statuses)
    return out


def throughput_metrics(eps: list[Episode]) -> Metrics:
    gen_s = sum(e.timings.get("generate", 0.0) for e in eps)
    tokens = sum(e.num_generated_tokens for e in eps)
    # Per generation stream; the trainer's batch-wide figure (tokens over rollout wall time) overrides it.
    return {"policy/tokens_per_s": tokens / gen_s} if gen_s > 0 else {}


def timing_metrics(eps: list[Episode]) -> Metrics:
    phases: dict[str, list[float]] = defaultdict(list)
    for e in eps:
        for k, v in e.timings.items():
            phases[k].append(v)
    return {f"episode_time/{k}": float(np.mean(v)) for k, v in sorted(phases.items())}


def group_metrics(eps: list[Episode]) -> Metrics:
    """Groups of two or more judged episodes, and the share of them with zero variance
    (rlvr.rollout.core.groups).

    Smaller groups are left out of this metric: a lone sample (a held-out probe, a group the infra thinned)
    says nothing about whether the policy's groups have collapsed."""
    judged = [g for g in group_rewards(eps).values() if len(g) > 1]
    if not judged:
        return {}
    zero = sum(is_zero_variance(g) for g in judged)
    return {"groups/count": float(len(judged)), "groups/zero_variance_share": zero / len(judged)}


RUN_TESTS = "run_tests"
"""The tool that runs the visible tests (rlvr.envs.tools)."""
NOT_TOOL_ERRORS = frozenset({None, "ok", "infra_error"})
"""Exec statuses of a tool result that are not the policy's error (an infra fault is the sandbox's)."""


def is_multi_turn(ep: Episode) -> bool:
    """Whether the episode acted through tools (a multi-turn task): `metadata["multi_turn"]` when the rollout
    recorded it, else the transcript says so. A multi-turn Env answers every action (a tool result, a call
    error or "No tool call found"); a single-turn one never answers, so its transcript ends on the answer
    (native tool calls in it included: they were not run)."""
    flag = ep.metadata.get("multi_turn")
    if isinstance(flag, bool):
        return flag
    if "attempts" in ep.metadata:  # an attempts task answers; the env's feedback is not a tool result
        return False
    acted = False
    for m in ep.messages:
        if m.role == "tool" or (acted and m.role != "assistant"):
            return True
        acted = acted or m.role == "assistant"
    return False


def tool_results(ep: Episode) -> list[Message]:
    """The tool messages of an episode: one per executed tool call."""
    return [m for m in ep.messages if m.role == "tool"]


def is_tool_error(m: Message) -> bool:
    """A tool result that was an error: an unknown tool or bad arguments (`error: ...`), or a command that did
    not end `ok` (exited non-zero, timed out, hit a limit)."""
    return m.role == "tool" and (m.content.startswith("error:") or m.exec_status not in NOT_TOOL_ERRORS)


def malformed_calls(ep: Episode) -> int:
    """Calls the Env could not parse: as the rollout counted them (`metadata["call_errors"]`; a family whose
    template takes no user message there gets them inside a tool result), else the `user` messages `error:
    ...` after an action."""
    counted = ep.metadata.get("call_errors")
    if isinstance(counted, int) and not isinstance(counted, bool):
        return counted
    acted, n = False, 0
    for m in ep.messages:
        acted = acted or m.role == "assistant"
        n += acted and m.role == "user" and m.content.startswith("error: ")
    return n


def agent_metrics(eps: list[Episode]) -> Metrics:
    """Tool use of the step's multi-turn episodes (masked ones left out): calls per episode, the share of
    calls whose result was an error, the share of episodes with no tool call, turns and `run_tests` calls to a
    pass."""
    agents = [e for e in eps if not e.masked and is_multi_turn(e)]
    if not agents:
        return {}
    results = [tool_results(e) for e in agents]
    made = [len(tool_names(e)) for e in agents]  # the model's own calls, however their results came back
    out: Metrics = {"agent/episodes": float(len(agents)),
                    "agent/tool_calls_per_episode": sum(made) / len(agents),
                    "agent/no_tool_call_share": sum(not n for n in made) / len(agents),
                    "agent/malformed_calls_per_episode": float(np.mean([malformed_calls(e) for e in agents])),
                    "agent/turns_per_episode": float(np.mean([e.num_turns for e in agents]))}
    if answered := sum(len(r) for r in results):
        out["agent/tool_error_rate"] = sum(is_tool_error(m) for r in results for m in r) / answered
    passed = [(e, r) for e, r in zip(agents, results) if e.passed]
    if passed:
        out["agent/turns_to_pass"] = float(np.mean([e.num_turns for e, _ in passed]))
        out["agent/run_tests_before_pass"] = float(np.mean([sum(m.name == RUN_TESTS for m in r) for _,
                                                            r in passed]))
    return out


def attempt_outcomes(ep: Episode) -> list[bool]:
    """Whether each attempt of the episode passed its check, in order: an attempts task's answers (the env's
    record of its checks on the visible cases; its last answer, which the env does not check, passed when the
    verifier passed it), or a tool episode's runs of the visible tests after a successful call of a tool
    that changes the workspace (a test run with nothing changed since the last is not a new attempt). Empty:
    none."""
    recorded = ep.metadata.get("attempts")
    if isinstance(recorded, list):
        return [ep.passed if x is None else bool(x) for x in recorded]
    out: list[bool] = []
    changed = False
    for m in ep.messages:
        if m.role != "tool":
            continue
        if m.name == RUN_TESTS:
            if changed:
                out.append(m.exec_status == "ok")
            changed = False
        elif m.name in MUTATING and not is_tool_error(m):
            changed = True
    return out


MUTATING = frozenset({"write_file", "apply_patch", "run", "bash"})
"""The tools whose call may change the workspace (`Tool.mutates` in rlvr.envs.tools)."""
LOOP_K = 3
"""Recovery rates are also logged per attempt k = 2..LOOP_K (`loop/recovery_rate_k`)."""


def loop_counts(eps: list[Episode]) -> dict[str, float]:
    """The loop's counts over the judged episodes with at least one attempt: episodes, passed, first attempts
    passed, attempts, retries (attempts that followed a failed one) and recoveries (retries that passed), also
    per attempt k (`retries_k`, `recoveries_k`), and the passed episodes among those whose first attempt
    failed."""
    out: dict[str, float] = defaultdict(float)
    for ep in eps:
        seq = attempt_outcomes(ep) if not ep.masked else []
        if not seq:
            continue
        out["episodes"] += 1
        out["passed"] += ep.passed
        out["first_passed"] += seq[0]
        out["attempts"] += len(seq)
        out["failed_first"] += not seq[0]
        out["passed_after_failure"] += (not seq[0]) and ep.passed
        for k in range(1, len(seq)):
            if not seq[k - 1]:
                out["retries"] += 1
                out["recoveries"] += seq[k]
                out[f"retries_{k + 1}"] += 1
                out[f"recoveries_{k + 1}"] += seq[k]
    return dict(out)


LOOP_RATES: dict[str, tuple[str, str]] = {
    "pass_rate": ("passed", "episodes"), "first_attempt_pass": ("first_passed", "episodes"),
    "recovery_rate": ("recoveries", "retries"), "attempts": ("attempts", "episodes"),
    "pass_after_failure": ("passed_after_failure", "failed_first"),
    **{f"recovery_rate_{k}": (f"recoveries_{k}", f"retries_{k}") for k in range(2, LOOP_K + 1)},
}
"""Each loop figure as (numerator, denominator) of `loop_counts`: a ratio of sums, so that an interval over
tasks resamples both."""


def loop_rates(c: dict[str, float]) -> Metrics:
    """The `loop/*` figures of `loop_counts` (one whose denominator is 0 is left out)."""
    if not c.get("episodes"):
        return {}
    out: Metrics = {"loop/episodes": c["episodes"]}
    out.update({f"loop/{name}": c.get(num, 0.0) / c[den] for name, (num, den) in LOOP_RATES.items()
                if c.get(den)})
    return out


def loop_metrics(eps: list[Episode]) -> Metrics:
    """The loop's figures of the step's episodes of several turns (see the module docstring)."""
    return loop_rates(loop_counts(eps))


METRICS: dict[str, Callable[[list[Episode]], Metrics]] = {
    "reward": reward_metrics, "pass_rate": pass_rate_metrics, "flags": flag_metrics, "infra": infra_metrics,
    "episode": length_metrics, "sandbox": sandbox_metrics, "policy": throughput_metrics,
    "episode_time": timing_metrics, "groups": group_metrics, "agent": agent_metrics, "loop": loop_metrics,
    "truncation": truncation_metrics,
}
"""Every metric family, by namespace."""


def compute_metrics(episodes: list[Episode]) -> Metrics:
    """All metric families of one step's episodes, plus the episode count."""
    out: Metrics = {"episodes/count": float(len(episodes))}
    for fn in METRICS.values():
        out.update(fn(episodes))
    return out
