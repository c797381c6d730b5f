"""Progress bars that also work in a log file.

A rich progress bar on a stderr that is not a terminal (a CI log, `nohup`, a job scheduler's capture) shows
only its final state, so a log says nothing until the job ends. `Progress` is rich's bar, plus, when its
console is not a terminal, one plain line per task every `interval` seconds (at most 30;
`RLVR_PROGRESS_INTERVAL_S` sets it):

    eval: 12/40 episodes, passed 3, 0:01:23 elapsed

Every long job (train, eval, tasks validate, tasks build, gold trajectories) uses it.
"""
from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any

from rich import progress as rich_progress

__all__ = ["MAX_INTERVAL_S", "Progress", "interval_s"]

MAX_INTERVAL_S = 30.0
"""A log shows a progress line at least this often."""


def interval_s() -> float:
    """Seconds between plain progress lines: `RLVR_PROGRESS_INTERVAL_S`, else 15, never above 30."""
    try:
        value = float(os.environ.get("RLVR_PROGRESS_INTERVAL_S", "15"))
    except ValueError:
        value = 15.0
    return min(max(value, 0.05), MAX_INTERVAL_S)


class Progress(rich_progress.Progress):
    """rich's Progress; on a console that is not a terminal, also a plain line per task every
    `interval_s()`."""

    def __init__(self, *columns: Any, unit: str = "", **kwargs: Any) -> None:
        super().__init__(*columns, **kwargs)
        self.unit = unit
        """What the tasks count (`episodes`), shown after the counts of the plain lines."""
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._ended: set[Any] = set()

    @property
    def logging(self) -> bool:
        """True when this bar writes plain lines (enabled, on a console that is not a terminal)."""
        return not self.disable and not self.console.is_terminal

    def start(self) -> None:
        super().start()
        if self.logging and self._thread is None:
            self._done.clear()
            self._thread = threading.Thread(target=self._log_loop, name="rlvr-progress-log", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._done.set()
            self._thread.join(timeout=5)
            self._thread = None
            self.log_lines()  # the closing state, in the same plain form
        super().stop()

    def _log_loop(self) -> None:
        every = interval_s()
        while not self._done.wait(every):
            self.log_lines()

    def log_lines(self) -> None:
        """One plain line per running task (and one last line for a task that finished since): its
        description, done of total, its fields, and the time elapsed."""
        for task in list(self.tasks):
            if task.finished:
                if task.id in self._ended:
                    continue
                self._ended.add(task.id)
            total = f"/{task.total:g}" if task.total is not None else ""
            fields = ", ".join(str(v) if k == "info" else f"{k} {v}"  # `info`: a preformatted field
                               for k, v in task.fields.items() if v not in (None, ""))
            elapsed = timedelta(seconds=int(task.elapsed or 0))
            line = f"{task.description}: {task.completed:g}{total}{' ' + self.unit if self.unit else ''}"
            line += (f", {fields}" if fields else "") + f", {elapsed} elapsed"
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
