"""Failure mining: failed episodes clustered by error signature (exception and normalised message, failing
check or test, integrity flag, budget), with counts per domain and example episodes."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow.compute as pc

from rlvr.rollout.episode import Episode
from rlvr.store.episodes import EpisodeStore
from rlvr.store.schema import SCHEMA, row_to_episode

EXAMPLES_PER_CLUSTER = 5
"""Example episode ids kept per cluster."""

_EXC = re.compile(r"^\s*(?:[A-Za-z_][\w]*\.)*"  # a dotted module path, then the exception class and message
                  r"([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Timeout))\b:?[ \t]*(.*)$",
                  re.MULTILINE)
# Order matters: quoted text first (it may hold numbers or paths), then addresses, paths, numbers.
_NORMALISERS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"'[^'\n]*'|\"[^\"\n]*\""), "<str>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.\-]+){2,}/?"), "<path>"),
    (re.compile(r"\b[0-9a-f]{16,}\b"), "<id>"),
    (re.compile(r"(?<![A-Za-z_\d])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"), "<n>"),
]
MAX_MESSAGE = 120


@dataclass(frozen=True)
class Signature:
    """What a failure looks like, stripped of the particulars that differ between instances of it."""

    kind: str
    """infra, flag, check, exception, truncated, unverified or wrong."""
    error_type: str = ""
    """Exception type (AssertionError), flag kind, or the budget that ran out."""
    message: str = ""
    """Normalised first line of the error: numbers, strings, paths and addresses replaced by placeholders."""
    check: str = ""
    """The first failing verifier check or test (normalised likewise)."""

    @property
    def key(self) -> str:
        detail = " ".join(p for p in (f"{self.error_type}:" if self.error_type and self.message
                                      else self.error_type, self.message) if p)
        text = f"{self.kind}: {detail}" if detail else self.kind
        return f"{text} @ {self.check}" if self.check else text


@dataclass
class Cluster:
    """Failed episodes that share one signature."""

    signature: Signature
    count: int = 0
    domains: Counter[str] = field(default_factory=Counter)
    tasks: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    """Example episode ids (the first seen)."""

    def to_json(self) -> dict:
        return {"signature": self.signature.key, "kind": self.signature.kind,
                "error_type": self.signature.error_type, "message": self.signature.message,
                "check": self.signature.check, "count": self.count,
                "domains": dict(self.domains.most_common()),
                "tasks": len(self.tasks), "top_tasks": dict(self.tasks.most_common(5)),
                "examples": self.examples}


def normalise(text: str) -> str:
    """First non-empty line of an error, with its particulars replaced by placeholders."""
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    for pattern, repl in _NORMALISERS:
        line = pattern.sub(repl, line)
    line = " ".join(line.split())
    return line[:MAX_MESSAGE]


def find_exception(text: str) -> tuple[str, str] | None:
    """The last exception line in a text (a traceback's final line): (type, normalised message)."""
    matches = list(_EXC.finditer(text or ""))
    if not matches:
        return None
    m = matches[-1]
    return m.group(1), normalise(m.group(2))


def _tool_errors(ep: Episode) -> list[str]:
    return [m.content for m in ep.messages if m.role == "tool" and m.exec_status not in (None, "ok")]


def signature(ep: Episode) -> Signature:
    """The error signature of one failed episode."""
    v = ep.verdict
    if ep.masked:
        return Signature("infra", message=normalise((v.infra_error if v else None) or ep.status))
    if v is not None and v.flags:
        return Signature("flag", error_type="+".join(sorted({f.kind for f in v.flags})))
    failing = sorted((c for c in (v.checks if v else []) if not c.passed), key=lambda c: (c.score, c.name))
    if failing:
        first = failing[0]
        exc = find_exception(first.detail) or next(filter(None, map(find_exception, _tool_errors(ep))), None)
        etype, msg = exc if exc else ("", normalise(first.detail))
        return Signature("check", etype, msg, normalise(first.name))
    if ep.status == "truncated":
        return Signature("truncated", error_type=ep.truncated_by or "budget")
    exc = next(filter(None, map(find_exception, reversed(_tool_errors(ep)))), None)
    if exc:
        return Signature("exception", *exc)
    if v is None:
        return Signature("unverified")
    return Signature("wrong", message="score <n>" if v.score > 0 else "score 0")


def is_failure(ep: Episode) -> bool:
    return not ep.passed


def cluster(episodes: Iterable[Episode]) -> list[Cluster]:
    """Failed episodes grouped by signature, largest cluster first."""
    clusters: dict[Signature, Cluster] = {}
    for ep in episodes:
        if not is_failure(ep):
            continue
        sig = signature(ep)
        c = clusters.setdefault(sig, Cluster(sig))
        c.count += 1
        c.domains[ep.domain] += 1
        c.tasks[ep.task_id] += 1
        if len(c.examples) < EXAMPLES_PER_CLUSTER:
            c.examples.append(ep.episode_id)
    return sorted(clusters.values(), key=lambda c: (-c.count, c.signature.key))


TOKEN_COLUMNS = ("token_ids", "loss_mask", "logprobs")
"""Left out when mining failures: they are the bulk of a run and say nothing about how an attempt failed."""


def load_episodes(store: EpisodeStore, *, failed_only: bool = False,
                  with_tokens: bool = False) -> list[Episode]:
    """A store's episodes for analysis: tokens left empty unless asked for, failures filtered in Arrow."""
    columns = None if with_tokens else [c for c in SCHEMA.names if c not in TOKEN_COLUMNS]
    table = store.read(columns=columns)
    if failed_only:
        table = table.filter(pc.invert(pc.fill_null(table.column("passed"), False)))
    return [row_to_episode(r) for r in table.to_pylist()]


def failed_episodes(store: EpisodeStore, with_tokens: bool = False) -> list[Episode]:
    """The failed episodes of a store (tokens left empty unless asked for)."""
    return load_episodes(store, failed_only=True, with_tokens=with_tokens)
