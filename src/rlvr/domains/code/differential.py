"""The code verifier's differential check: candidate and reference on fresh inputs, compared on the host.

`prepare` picks the entry function and its example inputs (the `io` cases, or the literal calls the visible
and hidden tests make), draws a pool of `POOL_FACTOR * n` fresh inputs like them from the task's key
(`rlvr.domains.code.integrity.probes.draw_like`; a task with its own generator, `[verifier.cases]`, draws
there instead), takes the verification's `n` from the pool by the verdict's seed, and collects the candidate's
literal keys as probes. `run_reference` computes the reference's outputs in a sandbox of their own, before the
candidate's run (the reference never shares one with the candidate); the candidate's harness run gets the
inputs only. The reference's outputs are kept per input (`ReferenceCache`, keyed by the reference's files), so
a task's reference runs once for its pool, not once per verification: the eight samples of a GRPO group, and
every later visit of the task, cost the candidate's run alone.
`Differential.check` scores the fresh inputs (the verifier scales the score by it: fresh inputs never add
credit); `Differential.findings` raises `hardcoding` (see `rlvr.domains.code.integrity.probes`).
"""
from __future__ import annotations

import hashlib
import json
import random
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from rlvr.domains.code.harness import CASES, VALUES, harness_files
from rlvr.domains.code.harness.report import RunReport
from rlvr.domains.code.integrity import probes as probes_mod
from rlvr.domains.code.settings import CodeSettings
from rlvr.sandbox.base import SandboxPool
from rlvr.sandbox.result import ExecLimits
from rlvr.tasks.spec import Files, Task
from rlvr.verify.findings import Findings, role_of
from rlvr.verify.values import NotPlain, decode, encode, same
from rlvr.verify.verdict import Check

REF_DIR = "judge/ref"
POOL_FACTOR = 4
"""A task's pool of fresh inputs is this many times a verification's `n`: each verification takes `n` of
them."""


@dataclass
class Differential:
    """The fresh inputs and probes of one verification, and the reference's outputs for them."""

    entry: str
    fresh: list[list[Any]]
    """Type-derived fresh inputs (empty when the task's own generator draws the cases)."""
    probes: list[list[Any]]
    ref_fresh: list[Any] = field(default_factory=list)
    """Reference outputs for `fresh` (None where the reference raised: not judged)."""
    ref_probes: list[Any] = field(default_factory=list)
    keyed_share: float = 0.0
    """Keyed constants among the entry function's ways to return (see `integrity.probes.probes`)."""
    pool: list[list[Any]] = field(default_factory=list)
    """The task's pool of fresh inputs, of which `fresh` is this verification's share."""
    roots: list[str] = field(default_factory=list)
    """The task's import roots (`CodeSettings.import_roots`): where the reference's modules are imported
    from."""

    def harness_config(self) -> dict[str, Any] | None:
        inputs = [encode(a)["v"] for a in [*self.fresh, *self.probes]]  # type: ignore[index]
        return {"entry": self.entry, "inputs": inputs} if inputs else None

    def _results(self, rep: RunReport, offset: int, refs: list[Any],
                 strict: bool = False) -> list[tuple[bool, Any, Any] | None]:
        """(ok, got, want) per input, None where the reference gave no output; `strict`: the same types."""
        out: list[tuple[bool, Any, Any] | None] = []
        for i, want in enumerate(refs):
            if want is None:
                out.append(None)
                continue
            msg = rep.fresh.get(offset + i) or {}
            got: Any = None
            ok = False
            if msg.get("out") is not None:
                try:
                    got = decode(msg["out"]["v"])
                    ok = same(got, decode(want), strict=strict)
                except (NotPlain, TypeError, KeyError, ValueError):
                    ok = False
            out.append((ok, got, decode(want)))
        return out

    def check(self, rep: RunReport, weight: float, strict: bool = False) -> Check | None:
        judged = [r for r in self._results(rep, 0, self.ref_fresh, strict) if r is not None]
        if not judged:
            return None
        good = sum(ok for ok, _, _ in judged)
        bad = next((f"input {json.dumps(encode(self.fresh[i]) or {}).__str__()[:160]}: "
                    + ((rep.fresh.get(i) or {}).get("error") or "differs from the reference")
                    for i,
                    r in enumerate(self._results(rep, 0, self.ref_fresh, strict)) if r is not None
                    and not r[0]), "")
        return Check(name=f"fresh:{self.entry}", score=good / len(judged), weight=weight,
                     passed=good == len(judged),
                     detail=rep.fresh_error or bad)

    def judged(self, rep: RunReport) -> list[tuple[bool, Any, Any]]:
        """(ok, got, want) of every fresh input the reference answered."""
        return [r for r in self._results(rep, 0, self.ref_fresh) if r is not None]

    def judged_inputs(self) -> list[list[Any]]:
        """The arguments of each of `judged`'s results, in its order."""
        return [args for args, want in zip(self.fresh, self.ref_fresh) if want is not None]

    def findings(self, rep: RunReport, general: list[tuple[bool, Any, Any]]) -> Findings:
        """hardcoding (probes right, general path wrong) and protocol checks of the fresh results; `general`:
        (ok, got, want) of the other judged inputs (cases, io) beside the fresh ones."""
        found = Findings()
        probed = [r for r in self._results(rep, len(self.fresh), self.ref_probes) if r is not None]
        general = self.judged(rep) + general
        found.merge(probes_mod.hardcoding([ok for ok, _, _ in probed], [ok for ok, _, _ in general],
                                          self.entry,
                                           self.keyed_share))
        if rep.duplicate_fresh or any(not 0 <= i < len(self.fresh) + len(self.probes) for i in rep.fresh):
            found.add("report_forgery", None, None, "fresh-input results out of range or reported twice")
        return found


def prepare(task: Task, s: CodeSettings, files: Files, reference: Files | None, io_inputs: list[Any] | None,
            seed: int) -> Differential | None:
    """The differential plan of a verification, or None when the task has no reference or no examples."""
    if s.fresh.n == 0 or (reference is None and s.cases is None):
        return None
    if s.cases is not None:
        entry = s.cases.entry
        examples = _examples(task, s, reference or files).get(entry, [])
        probes, share = probes_mod.probes(files, entry, examples)
        return Differential(entry, [], probes, keyed_share=share, roots=s.import_roots) if probes else None
    calls = _examples(task, s, reference or {})
    if s.io is not None:
        entry = s.io.entry
        examples = [decode(a) for a in io_inputs or []] + calls.get(entry, [])
    elif calls:
        entry, examples = max(calls.items(), key=lambda kv: len(kv[1]))
    else:
        return None
    examples = [e for e in examples if isinstance(e, list)]
    if not examples:
        return None
    # the pool is the task's (the same for every verification, so the reference's outputs for it are computed
    # once); which `n` of it a verification judges is its seed's
    pool = probes_mod.draw_like(examples, random.Random(pool_seed(task.key)), POOL_FACTOR * s.fresh.n)
    fresh = random.Random(seed).sample(pool, min(s.fresh.n, len(pool)))
    probes, share = probes_mod.probes(files, entry, examples)
    return Differential(entry, fresh, probes, keyed_share=share, pool=pool, roots=s.import_roots)


def pool_seed(task_key: str) -> int:
    """The seed of a task's pool of fresh inputs: a function of the task alone."""
    return int.from_bytes(hashlib.blake2b(f"fresh-pool:{task_key}".encode(), digest_size=4).digest(), "big")


def _examples(task: Task, s: CodeSettings, reference: Files) -> dict[str, list[list[Any]]]:
    modules = {s.importable(p).removesuffix(".py").replace("/", ".") for p in reference
               if p.endswith(".py") and role_of(p) == "code"}
    tests = {p: t for p, t in task.workspace.items() if p.endswith(".py") and role_of(p) == "test"}
    tests.update({p: task.hidden[p] for p in s.tests if p in task.hidden})
    return probes_mod.example_calls(tests, modules)


class ReferenceCache:
    """The reference's output per input, keyed by the reference's files, roots and entry: a pure function's
    answers, kept in this process (least recently used references go first) so that a task's reference runs in
    a sandbox only for inputs it has not answered yet. A run that fails is not kept."""

    def __init__(self, max_references: int = 1024) -> None:
        self.max_references = max_references
        self._outputs: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(reference: Files, roots: list[str], entry: str) -> str:
        h = hashlib.blake2b(json.dumps([roots, entry]).encode(), digest_size=16)
        for path in sorted(reference):
            text = reference[path]
            h.update(path.encode() + b"\0" + (text if isinstance(text, bytes) else text.encode()) + b"\0")
        return h.hexdigest()

    def known(self, key: str, inputs: list[str]) -> dict[str, Any]:
        with self._lock:
            known = self._outputs.get(key)
            if known is None:
                return {}
            self._outputs.move_to_end(key)
            return {i: known[i] for i in inputs if i in known}

    def put(self, key: str, outputs: dict[str, Any]) -> None:
        with self._lock:
            self._outputs.setdefault(key, {}).update(outputs)
            self._outputs.move_to_end(key)
            while len(self._outputs) > self.max_references:
                self._outputs.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._outputs.clear()


REFERENCE_OUTPUTS = ReferenceCache()
"""This process's reference outputs (see `ReferenceCache`)."""


def run_reference(pool: SandboxPool, diff: Differential, reference: Files,
                  limits: ExecLimits) -> tuple[str | None, bool]:
    """Fill in the reference's outputs (known ones from `REFERENCE_OUTPUTS`, the rest in a sandbox without the
    candidate): (error message or None, whether the error is the sandbox's own, an infra fault)."""
    key = ReferenceCache.key(reference, diff.roots, diff.entry)
    fresh = [json.dumps(encode(a)["v"]) for a in diff.fresh]  # type: ignore[index]
    probes = [json.dumps(encode(a)["v"]) for a in diff.probes]  # type: ignore[index]
    pool_inputs = [json.dumps(encode(a)["v"]) for a in diff.pool]  # type: ignore[index]
    known = REFERENCE_OUTPUTS.known(key, fresh + probes + pool_inputs)
    missing = list(dict.fromkeys(i for i in fresh + probes if i not in known))
    if missing:  # with the rest of the pool: the task's later verifications find theirs known
        missing = list(dict.fromkeys([*missing, *(i for i in pool_inputs if i not in known)]))
        h = harness_files()
        files: dict[str, str | bytes] = {f"judge/{CASES}": h[CASES], f"judge/{VALUES}": h[VALUES]}
        files.update({f"{REF_DIR}/{p}": t for p, t in reference.items()})
        cfg = {"ref_dir": REF_DIR, "roots": diff.roots, "entry": diff.entry, "inputs": [],
               "extra": [json.loads(i) for i in missing]}
        res = pool.run(["python", f"judge/{CASES}"], files=files, stdin=json.dumps(cfg) + "\n", limits=limits)
        if not res.ok:
            return (f"the task's reference solution failed on fresh inputs ({res.status.value}): "
                    f"{(res.error or res.stderr)[-300:]}"), res.infra_error
        try:
            out = json.loads(res.stdout.strip().splitlines()[-1])["extra"]
        except (ValueError, IndexError, KeyError, TypeError):
            return "the task's reference solution printed no outputs", False
        if not isinstance(out, list) or len(out) != len(missing):
            return "the task's reference solution printed no outputs", False
        answered = dict(zip(missing, out))
        REFERENCE_OUTPUTS.put(key, answered)
        known.update(answered)
    diff.ref_fresh, diff.ref_probes = [known[i] for i in fresh], [known[i] for i in probes]
    return None, False
