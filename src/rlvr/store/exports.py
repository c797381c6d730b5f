"""Training data mined from a run: recovery samples (SFT JSONL) and contrastive pairs (preference JSONL).

Both use the chat-message format (`role`, `content`, and `tool_calls` / `tool_call_id` / `name` where a tool
was involved). The prompt is everything up to the first user message inclusive; an attempt is what follows.
Masked episodes (infra faults) are never used; flagged episodes are never the good example, and never the
failed attempt of a recovery sample (they are the rejected side of contrastive pairs).
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rlvr.atomic import atomic_write
from rlvr.envs.dialects import HERMES, Dialect, of_episode
from rlvr.envs.messages import Message
from rlvr.rollout.episode import Episode
from rlvr.store.failures import signature

MAX_PER_TASK = 4
"""Recovery samples per task (each a different failed attempt)."""
MAX_PAIRS_PER_GROUP = 4
"""Contrastive pairs per group."""


def _msg(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}}
                             for c in m.tool_calls]
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id or ""
        out["name"] = m.name or ""
    return out


def chat_messages(messages: list[Message], dialect: Dialect = HERMES,
                  tools: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A transcript as chat-template messages, the form TRL's SFTTrainer and Hugging Face chat templates read:
    an assistant turn's tool calls (native, or written in the model family's form, read with its `dialect`
    and taken out of its content) as `tool_calls` with their arguments as objects, its reasoning block as
    `reasoning_content`, and each tool message with the id of the call it answers. `tools` (the episode's
    tool specs) keeps a string argument a string in a family whose arguments are untyped text."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of the calls not answered yet, in order
    n = 0
    for m in messages:
        if m.role == "assistant":
            parsed = None if m.tool_calls else dialect.parse(m.content, tools)
            calls = list(m.tool_calls) if parsed is None else parsed.calls
            content = m.content if parsed is None else parsed.content
            rec: dict[str, Any] = {"role": "assistant", "content": content}
            if parsed is not None and parsed.reasoning:
                rec["reasoning_content"] = parsed.reasoning
            if calls:
                ids = []
                for c in calls:
                    ids.append(c.id or f"call_{n}")
                    n += 1
                rec["tool_calls"] = [{"id": i, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}}
                                     for i, c in zip(ids, calls)]
                pending = ids
            out.append(rec)
        elif m.role == "tool":
            rec = {"role": "tool", "content": m.content, "name": m.name or ""}
            rec["tool_call_id"] = pending.pop(0) if pending else (m.tool_call_id or "")
            out.append(rec)
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def sft_record(ep: Episode, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """One conversation of a chat SFT dataset: `messages` (`chat_messages`), `tools` (the OpenAI tool specs
    the episode offered, empty for a single-turn task), and where it came from."""
    return {"messages": chat_messages(ep.messages, of_episode(ep.metadata), tools), "tools": tools,
            "task_id": ep.task_id, "domain": ep.domain, "episode_id": ep.episode_id}


def split_prompt(ep: Episode) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(prompt messages, attempt messages) of an episode."""
    first_user = next((i for i, m in enumerate(ep.messages) if m.role == "user"), -1)
    return [_msg(m) for m in ep.messages[:first_user + 1]], [_msg(m) for m in ep.messages[first_user + 1:]]


def _good(ep: Episode) -> bool:
    return ep.passed and not ep.masked and not (ep.verdict and ep.verdict.flags)


def _bad(ep: Episode) -> bool:
    return not ep.passed and not ep.masked


def _honest_failure(ep: Episode) -> bool:
    # A flagged attempt is a hack, not a mistake to recover from: SFT on it would teach the hack.
    return _bad(ep) and not (ep.verdict and ep.verdict.flags)


def error_summary(ep: Episode) -> str:
    """What went wrong, for the feedback turn of a recovery sample."""
    v = ep.verdict
    failing = [c for c in (v.checks if v else []) if not c.passed]
    if failing:
        lines = [f"- {c.name}: {c.detail}".rstrip(": ") for c in failing[:5]]
        return "The attempt failed these checks:\n" + "\n".join(lines)
    return f"The attempt failed ({signature(ep).key})."


def recovery_samples(episodes: Iterable[Episode]) -> list[dict[str, Any]]:
    """A failed attempt, its error, and a passing attempt at the same task, as one SFT conversation."""
    by_task: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        by_task[ep.task_id].append(ep)
    out = []
    for task, eps in sorted(by_task.items()):
        good = [e for e in eps if _good(e)]
        bad = [e for e in eps if _honest_failure(e)]
        for i, fail in enumerate(bad[:MAX_PER_TASK] if good else []):
            # Prefer a passing attempt from the same group (same prompt and policy version).
            same = [g for g in good if g.group_id and g.group_id == fail.group_id]
            win = (same or good)[i % len(same or good)]
            prompt, failed_turns = split_prompt(fail)
            _, passed_turns = split_prompt(win)
            feedback = {"role": "user", "content": error_summary(fail) + "\nTry again."}
            out.append({"messages": prompt + failed_turns + [feedback] + passed_turns, "task_id": task,
                        "domain": fail.domain, "failed_episode_id": fail.episode_id,
                        "passed_episode_id": win.episode_id, "error": signature(fail).key})
    return out


def contrastive_pairs(episodes: Iterable[Episode]) -> list[dict[str, Any]]:
    """Passed vs failed attempts of the same group as preference pairs (prompt, chosen, rejected)."""
    groups: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        groups[ep.group_id or f"{ep.task_id}@{ep.step}"].append(ep)
    out = []
    for gid, eps in sorted(groups.items()):
        good = sorted((e for e in eps if _good(e)), key=lambda e: (-e.reward, e.sample_index))
        bad = sorted((e for e in eps if _bad(e)), key=lambda e: (e.reward, e.sample_index))
        for win, lose in list(zip(good, bad))[:MAX_PAIRS_PER_GROUP]:
            prompt, chosen = split_prompt(win)
            _, rejected = split_prompt(lose)
            out.append({"prompt": prompt, "chosen": chosen, "rejected": rejected, "task_id": win.task_id,
                        "domain": win.domain, "group_id": gid, "chosen_episode_id": win.episode_id,
                        "rejected_episode_id": lose.episode_id, "chosen_reward": win.reward,
                        "rejected_reward": lose.reward})
    return out


EXPORTS: dict[str, Callable[[Iterable[Episode]], list[dict[str, Any]]]] = {
    "recovery": recovery_samples,
    "contrastive": contrastive_pairs,
}
"""Every export, by the name `rlvr failures --export NAME` takes."""


def write_jsonl(records: list[dict[str, Any]], path: str | Path) -> Path:
    """Write records one JSON object a line, atomically (a temp file renamed into place)."""
    return atomic_write(path, "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in records))
