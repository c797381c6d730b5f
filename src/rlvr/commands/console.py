"""The CLI's consoles and output helpers: results on stdout, progress and messages on stderr."""
from __future__ import annotations

import json
import sys

from rich.console import Console

from rlvr.errors import NotYetAvailable

out = Console()
err = Console(stderr=True)


def print_json(obj: object) -> None:
    """One JSON document on stdout (never through rich, so it stays machine-readable)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def not_yet(what: str) -> None:
    raise NotYetAvailable(f"{what} is not available in this version of rlvr yet", fix="see the open issues")


def cell(value: object, limit: int = 80) -> str:
    """A value as a table cell, cut to `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
