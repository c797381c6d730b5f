"""The Verdict: a verifier's judgement of a final state, with its checks and integrity flags."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

VERDICT_SCHEMA_VERSION = 1


class Check(BaseModel):
    """One weighted check (a hidden test, a rule, a field): partial score in [0, 1]."""

    model_config = ConfigDict(frozen=True)

    name: str
    """What was checked, e.g. `hidden/test_a.py::test_x` or `rule:unique_ports`."""
    score: float = Field(ge=0.0, le=1.0)
    """Partial score of this check."""
    weight: float = Field(1.0, ge=0.0)
    """Weight in the verdict's score."""
    passed: bool = False
    detail: str = ""
    """Short human-readable reason (an assertion message, the expected vs seen value)."""


class Evidence(BaseModel):
    """Where an integrity flag was seen."""

    model_config = ConfigDict(frozen=True)

    file: str | None = None
    line: int | None = None
    seen: str = ""
    """What was seen (a code excerpt, a diff line, a value)."""
    inert: bool = False
    """The judge made this act change nothing the tests see (it refused it, or the tests ran on their own copy
    of what it changed), so the work was judged as if it had not happened. False where that is not certain:
    every static finding, and any act the judge only watched."""


class Flag(BaseModel):
    """A suspected reward hack, with evidence. A flagged verdict does not pass."""

    model_config = ConfigDict(frozen=True)

    kind: str
    """One of: tampering, exit_trick, report_forgery, special_casing, always_equal, no_change, parroting,
    ..."""
    evidence: list[Evidence] = Field(default_factory=list)
    message: str = ""

    @property
    def neutralised(self) -> bool:
        """Whether every act seen was made inert (see `Evidence.inert`)."""
        return bool(self.evidence) and all(e.inert for e in self.evidence)


class Verdict(BaseModel):
    """The judgement of one final state."""

    model_config = ConfigDict(frozen=True)

    score: float = Field(0.0, ge=0.0, le=1.0)
    """Weighted fraction of checks passed (0 when infra_error). Never a trick's reward: with a flag it is what
    the work earns with the trick neutralised (every flag's acts inert, `Flag.neutralised`: the checks ran as
    if the trick had not happened), else 0; a verdict built with flags that are not all neutralised has score
    0, whatever was given (docs/SECURITY.md, "The score of a flagged verdict")."""
    passed: bool = False
    """Every required check passed and no integrity flag was raised."""
    checks: list[Check] = Field(default_factory=list)
    flags: list[Flag] = Field(default_factory=list)
    infra_error: str | None = None
    """Set when the verifier could not judge: such an episode is masked from training, never scored 0."""
    seed: int | None = None
    """The verification seed (`VerifyContext.seed`) when the verifier drew randomness from it (randomised
    hidden cases), else None: verifying again with it (`rlvr verify --seed N`) draws the same."""
    timings: dict[str, float] = Field(default_factory=dict)
    """Seconds per phase of the verification (e.g. `sandbox`, `total`)."""
    details: dict[str, Any] = Field(default_factory=dict)
    """Verifier-specific extras (parsed answer, tool output excerpts)."""
    schema_version: int = VERDICT_SCHEMA_VERSION

    @model_validator(mode="before")
    @classmethod
    def _no_trick_reward(cls, data: Any) -> Any:
        """A flag whose trick may have worked leaves nothing of the score: anything that reads `score` (an
        adapter, an export, a dashboard) sees 0, never what the trick earned."""
        if isinstance(data, dict) and data.get("flags"):
            flags = [f if isinstance(f, Flag) else Flag.model_validate(f) for f in data["flags"]]
            if not all(f.neutralised for f in flags):
                data = {**data, "score": 0.0}
        return data

    @classmethod
    def from_checks(cls, checks: list[Check], flags: list[Flag] | None = None, **kw: Any) -> Verdict:
        """Score = weighted mean of check scores; passed = every check passed and no flag."""
        flags = flags or []
        total = sum(c.weight for c in checks)
        score = sum(c.score * c.weight for c in checks) / total if total > 0 else 0.0
        passed = bool(checks) and all(c.passed for c in checks) and not flags
        return cls(score=min(1.0, max(0.0, score)), passed=passed, checks=checks, flags=flags, **kw)

    @classmethod
    def infra(cls, message: str, **kw: Any) -> Verdict:
        """A verdict that could not be reached (masked from training)."""
        return cls(score=0.0, passed=False, infra_error=message, **kw)

    def reward(self, flag_penalty: float = 0.0) -> float:
        """Reward for training: the score, or `flag_penalty` (default 0) when flagged."""
        return flag_penalty if self.flags else self.score
