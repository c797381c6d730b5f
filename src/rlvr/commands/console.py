"""The CLI's consoles and output helpers: results on stdout, progress and messages on stderr.

Nothing a command prints is cut. In a terminal, text wraps to the window and a table folds a long cell onto
more lines; piped or redirected, every line is printed whole (no wrapping at 80 columns) and a table becomes
plain tab-separated lines, a header first, so that `grep`, `cut` and `awk` see every key and value as it is.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlvr.errors import NotYetAvailable


class _Console(Console):
    """A rich Console with nothing cut (see the module docstring): lines wrap only in a terminal (rich wraps
    at 80 columns when its file is not one, which breaks a long key or path over two lines of a pipe), and a
    table printed alone goes through `print_table`, so library code that is handed this console prints its
    tables the same way."""

    @property  # type: ignore[override]
    def soft_wrap(self) -> bool:
        return not self.is_terminal

    @soft_wrap.setter
    def soft_wrap(self, value: bool) -> None:  # Console.__init__ sets it; the file decides
        pass

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        if len(objects) == 1 and isinstance(objects[0], Table) and not kwargs:
            print_table(objects[0], self)
            return
        super().print(*objects, **kwargs)


out: Console = _Console()
err: Console = _Console(stderr=True)


def print_json(obj: object) -> None:
    """One JSON document on stdout (never through rich, so it stays machine-readable)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def not_yet(what: str) -> None:
    raise NotYetAvailable(f"{what} is not available in this version of rlvr yet", fix="see the open issues")


def cell(value: object) -> str:
    """A value as a table cell, whole: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _plain(renderable: Any) -> str:
    """A cell's text without markup or styles, on one line."""
    if isinstance(renderable, Text):
        text = renderable.plain
    elif isinstance(renderable, str):
        text = Text.from_markup(renderable).plain
    else:
        text = str(renderable)
    return " ".join(text.splitlines())


def print_table(table: Table, console: Console | None = None) -> None:
    """Print a table with nothing cut: rich's table in a terminal (long cells fold onto more lines), else a
    header line and one line per row, the cells separated by tabs."""
    console = console or out
    if console.is_terminal:
        for column in table.columns:
            column.overflow = "fold"
        Console.print(console, table)
        return
    columns = table.columns
    lines = []
    if table.show_header:
        lines.append("\t".join(_plain(c.header) for c in columns))
    for i in range(table.row_count):
        lines.append("\t".join(_plain(c._cells[i]) for c in columns))
    if table.title:
        lines.insert(0, _plain(table.title))
    console.file.write("\n".join(lines) + "\n")
    console.file.flush()
