"""Progress in log files: a bar whose console is not a terminal prints a plain line per task on a schedule."""
from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from rlvr.progress import MAX_INTERVAL_S, Progress, interval_s


def test_a_log_gets_a_line_per_task_on_a_schedule_and_at_the_end(monkeypatch) -> None:
    monkeypatch.setenv("RLVR_PROGRESS_INTERVAL_S", "0.05")
    sink = io.StringIO()
    with Progress(console=Console(file=sink, force_terminal=False), unit="episodes") as bar:
        job = bar.add_task("eval", total=10, passed=0)
        for i in range(1, 4):
            bar.update(job, completed=i, passed=i - 1)
            time.sleep(0.12)
    lines = [ln for ln in sink.getvalue().splitlines() if ln.startswith("eval: ")]
    assert len(lines) >= 3, sink.getvalue()  # while it ran, not only at the end
    assert lines[-1].startswith("eval: 3/10 episodes, passed 2, 0:00:0")


def test_a_terminal_gets_the_bar_only() -> None:
    sink = io.StringIO()
    with Progress(console=Console(file=sink, force_terminal=True)) as bar:
        bar.add_task("eval", total=2)
    assert "eval: " not in sink.getvalue()


@pytest.mark.parametrize("value, expected", [("600", MAX_INTERVAL_S), ("2", 2.0), ("nonsense", 15.0)])
def test_the_interval_is_never_above_thirty_seconds(monkeypatch, value, expected) -> None:
    monkeypatch.setenv("RLVR_PROGRESS_INTERVAL_S", value)
    assert interval_s() == expected


def test_a_finished_task_is_logged_once_more_then_no_longer(monkeypatch) -> None:
    sink = io.StringIO()
    bar = Progress(console=Console(file=sink, force_terminal=False))
    done = bar.add_task("sft", total=2)
    running = bar.add_task("rl", total=5)
    bar.update(done, completed=2)
    bar.update(running, completed=1)
    for _ in range(3):
        bar.log_lines()
    lines = sink.getvalue().splitlines()
    assert sum(ln.startswith("sft: 2/2") for ln in lines) == 1 and sum(ln.startswith("rl: 1/5")
                                                                       for ln in lines) == 3
