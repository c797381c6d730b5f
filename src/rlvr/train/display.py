"""What a training run shows while it runs: rich progress bars per phase (plain lines at least every 30 s when
stderr is a log file, `rlvr.progress`), and the final pass@1 lines."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from rlvr.config import RunConfig
from rlvr.progress import Progress


class TrainDisplay:
    """Progress bars for SFT, held-out evaluation and RL steps (on stderr, so stdout stays clean)."""

    def __init__(self, cfg: RunConfig, console: Console | None = None) -> None:
        self.cfg = cfg
        self.console = console or Console(stderr=True)
        self.bars = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=self.console,
                             transient=False)
        self._rl: Any = None

    def __enter__(self) -> Self:
        self.bars.start()
        self.console.print(f"rlvr train: run [bold]{self.cfg.name}[/bold] in {self.cfg.run_dir} "
                           f"({self.cfg.train.steps} RL steps of {self.cfg.train.batch_size} tasks x "
                           f"{self.cfg.rollout.group_size} samples)", highlight=False, soft_wrap=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.stop()

    @contextmanager
    def phase(self, name: str, total: int) -> Iterator[Callable[..., None]]:
        """A bar for one phase; yields `advance(completed, **shown_values)`."""
        task = self.bars.add_task(name, total=total, info="")

        def advance(completed: int, **shown: float) -> None:
            info = "  ".join(f"{k} {v:.3f}" for k, v in shown.items())
            self.bars.update(task, completed=completed, info=info)

        try:
            yield advance
        finally:
            self.bars.update(task, completed=total)

    def rl_step(self, step: int, metrics: dict[str, float]) -> None:
        if self._rl is None:
            self._rl = self.bars.add_task("RL (GRPO)", total=self.cfg.train.steps, info="")
        info = (f"reward {metrics.get('reward/mean', 0.0):.3f}  pass "
                f"{metrics.get('reward/pass_rate', 0.0):.3f}  "
                f"{metrics.get('time/rollout_s', 0.0) + metrics.get('time/update_s', 0.0):.1f}s/step")
        self.bars.update(self._rl, completed=step, info=info)

    def note(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def final(self, summary: dict[str, Any]) -> None:
        """The closing lines: held-out pass@1 before and after RL, and where the run and its report are."""
        out = Console(soft_wrap=True)  # a line a figure, also in a narrow terminal or a log
        before, after = summary.get("pass1_before"), summary.get("pass1_after")
        if before is not None and after is not None:
            n, k = summary["heldout_tasks"], summary.get("heldout_samples_per_task", 1)
            out.print(f"held-out pass@1 ({n} tasks, {k} samples each): before RL {before:.1%}  after RL "
                      f"{after:.1%}  ({after - before:+.1%})", highlight=False)
            gb, ga = summary.get("greedy_pass1_before"), summary.get("greedy_pass1_after")
            if gb is not None and ga is not None:
                out.print(f"held-out greedy pass@1: before RL {gb:.1%}  after RL {ga:.1%}  ({ga - gb:+.1%})",
                          highlight=False)
            lb, la = summary.get("loop_before"), summary.get("loop_after")
            for name, label in (("first_attempt_pass", "first-attempt pass"),
                                ("recovery_rate", "recovery rate"), ("attempts", "attempts used")):
                if lb and la and name in lb and name in la:
                    fmt = ".2f" if name == "attempts" else ".1%"
                    out.print(f"held-out {label}: before RL {lb[name]:{fmt}}  after RL {la[name]:{fmt}}  "
                              f"({la[name] - lb[name]:+{fmt}})", highlight=False)
        out.print(f"run: {summary['run_dir']}  ({summary['wall_s']:.0f} s)", highlight=False)
        if summary.get("report"):
            out.print(f"report: {summary['report']}", highlight=False)
        out.print(f"summary: {summary.get('summary')}", highlight=False)


@contextmanager
def phase(display: TrainDisplay | None, name: str, total: int) -> Iterator[Callable[..., None]]:
    """A bar for one phase when the run shows one (`display`), else a no-op; yields `advance`."""
    if display is None:
        yield lambda *_a, **_k: None
        return
    with display.phase(name, total) as advance:
        yield advance
