"""RunState: what a training run knows about itself beyond its weights, saved and restored as one record.

The model, optimizer and scheduler states are saved beside it in the checkpoint; this record holds the rest:
the next step, the SFT figures, the held-out result before RL, the learning curve, the wall time spent
before a resume and the batches sampled ahead but not yet trained. It is versioned: a checkpoint written
with another `RUN_STATE_VERSION` is refused with one line rather than resumed with fields guessed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rlvr.errors import UserError

RUN_STATE_VERSION = 1


@dataclass(frozen=True)
class HeldoutResult:
    """One held-out measurement."""

    pass1: float
    """Mean over tasks of the share of sampled episodes that passed."""
    greedy: float | None
    """Share of tasks whose greedy decode passed (None when not measured)."""
    tasks: int
    """Tasks judged (tasks whose every episode was masked by an infra fault are left out)."""
    samples_per_task: int
    ci: list[float] = field(default_factory=list)
    """95% bootstrap interval of pass1 over tasks."""
    masked: int = 0
    """Episodes masked by infra faults."""
    loop: dict[str, Any] | None = None
    """The loop's figures of the sampled episodes, for tasks of several turns (`rlvr.monitor.evals.
    loop_summary`: first-attempt pass, recovery rate, attempts used, with intervals); None for single-turn
    tasks."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HeldoutResult:
        return cls(**d)


@dataclass(frozen=True)
class CurvePoint:
    """One point of the learning curve: held-out pass@1 after `step` RL steps, `wall_s` into the run."""

    step: int
    wall_s: float
    pass1: float
    greedy_pass1: float | None


@dataclass
class RunState:
    """The run's own progress (see the module docstring)."""

    step: int = 0
    """RL steps done: the loop continues at this step."""
    sft: dict[str, float] = field(default_factory=dict)
    """Figures of the SFT warm start (empty when it did not run)."""
    before: HeldoutResult | None = None
    """Held-out result before RL (None when there is no held-out set)."""
    curve: list[CurvePoint] = field(default_factory=list)
    wall_before: float = 0.0
    """Seconds the run spent before this process started (earlier processes of a resumed run)."""
    pending: dict[int, list[str]] = field(default_factory=dict)
    """Asynchronous mode: batches sampled but not trained, by step, as JSON task records."""
    resumed_from: int | None = None
    """The checkpoint step this process resumed from (not saved: it describes this process)."""

    def to_dict(self) -> dict[str, Any]:
        """The record as saved (`resumed_from` is left out)."""
        out = asdict(self)
        out.pop("resumed_from")
        out["before"] = self.before.to_dict() if self.before else None
        out["pending"] = {str(k): v for k, v in self.pending.items()}
        return {"version": RUN_STATE_VERSION, **out}

    @classmethod
    def from_dict(cls, data: Any, *, source: str, resumed_from: int | None = None) -> RunState:
        """The record saved by `to_dict`; another version (or none) is a UserError naming `source`."""
        version = data.get("version") if isinstance(data, dict) else None
        if version != RUN_STATE_VERSION:
            raise UserError(f"the checkpoint holds run state version {version}, this rlvr reads "
                            f"version {RUN_STATE_VERSION}", file=source, field="run_state.version",
                            fix="resume with the rlvr version that wrote it, or start over with --no-resume")
        return cls(step=int(data["step"]), sft=dict(data["sft"]),
                   before=HeldoutResult.from_dict(data["before"]) if data["before"] else None,
                   curve=[CurvePoint(**p) for p in data["curve"]], wall_before=float(data["wall_before"]),
                   pending={int(k): list(v) for k, v in data["pending"].items()}, resumed_from=resumed_from)

    def add_point(self, result: HeldoutResult | None, step: int, wall_s: float) -> None:
        """One point of the learning curve (nothing when there is no held-out result)."""
        if result is not None:
            self.curve.append(CurvePoint(step=step, wall_s=round(wall_s, 1), pass1=result.pass1,
                                         greedy_pass1=result.greedy))

    def summary(self, after: HeldoutResult | None, wall_s: float, **run: Any) -> dict[str, Any]:
        """The run's summary (summary.json): `run`'s fields (name, directory, steps, ranks), held-out pass@1
        before and after RL with their intervals, the curve and the SFT figures."""
        before = self.before
        out: dict[str, Any] = {
            **run, "pass1_before": before.pass1 if before else None,
            "pass1_after": after.pass1 if after else None,
            "heldout_tasks": after.tasks if after else 0, "wall_s": round(wall_s, 2),
        }
        if before and after:
            out.update({"pass1_gain": after.pass1 - before.pass1, "greedy_pass1_before": before.greedy,
                        "greedy_pass1_after": after.greedy,
                        "heldout_samples_per_task": after.samples_per_task,
                        "pass1_ci_before": before.ci, "pass1_ci_after": after.ci})
            if before.loop and after.loop:
                out.update({"loop_before": before.loop, "loop_after": after.loop})
        if self.resumed_from is not None:
            out["resumed_from_step"] = self.resumed_from
        if self.curve:
            out["curve"] = [asdict(p) for p in self.curve]
        out.update(self.sft)
        return out
