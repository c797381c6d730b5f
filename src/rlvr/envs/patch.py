"""Apply unified diffs to an in-memory file map, with messages a model can act on when a hunk does not fit."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
FUZZ_LINES = 50
"""A hunk whose context is not at its stated line is searched for this many lines either side."""


class PatchError(ValueError):
    """The patch is malformed or does not apply; the message says where and why."""


@dataclass
class FilePatch:
    old: str | None
    """Path before (None: a new file)."""
    new: str | None
    """Path after (None: the file is deleted)."""
    hunks: list[tuple[int, list[str]]] = field(default_factory=list)
    """(old start line, lines with their ' ', '-', '+' prefix)."""


def _strip_prefix(name: str) -> str | None:
    name = name.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    return name


def parse_patch(text: str) -> list[FilePatch]:
    """Parse a unified diff (`--- a/x` / `+++ b/x` headers, `@@` hunks); raises PatchError."""
    lines = text.splitlines()
    patches: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            i += 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise PatchError(f"line {i + 1}: '---' header without a following '+++' header")
        fp = FilePatch(_strip_prefix(lines[i][4:]), _strip_prefix(lines[i + 1][4:]))
        if fp.old is None and fp.new is None:
            raise PatchError(f"line {i + 1}: both sides are /dev/null")
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            m = HUNK_RE.match(lines[i])
            if not m:
                raise PatchError(f"line {i + 1}: malformed hunk header {lines[i]!r} (expected '@@ "
                                 f"-L,N +L,N @@')")
            old_n = int(m.group(2)) if m.group(2) is not None else 1
            new_n = int(m.group(4)) if m.group(4) is not None else 1
            start, body, i = int(m.group(1)), [], i + 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_n or seen_new < new_n):
                line = lines[i]
                if line.startswith("\\"):  # "\ No newline at end of file"
                    i += 1
                    continue
                tag = line[:1] if line else " "
                if tag not in " -+":
                    raise PatchError(f"line {i + 1}: hunk ended early (expected {old_n} old and "
                                     f"{new_n} new lines)")
                body.append(tag + line[1:])
                seen_old += tag in " -"
                seen_new += tag in " +"
                i += 1
            if seen_old != old_n or seen_new != new_n:
                raise PatchError(f"hunk at old line {start}: counts in the header do not match its lines")
            fp.hunks.append((start, body))
        if not fp.hunks and fp.new is not None:
            raise PatchError(f"patch for {fp.new or fp.old} has no hunks")
        patches.append(fp)
    if not patches:
        raise PatchError("no file headers found (expected '--- a/PATH' then '+++ b/PATH' then '@@' hunks)")
    return patches


def _find(lines: list[str], want: list[str], guess: int) -> int | None:
    for delta in range(FUZZ_LINES + 1):
        for pos in (guess - delta, guess + delta):
            if 0 <= pos <= len(lines) - len(want) and lines[pos:pos + len(want)] == want:
                return pos
    return None


def _apply_file(path: str, text: str, fp: FilePatch) -> str:
    lines = text.splitlines()
    offset = 0
    for n, (start, body) in enumerate(fp.hunks, 1):
        old = [b[1:] for b in body if b[0] in " -"]
        new = [b[1:] for b in body if b[0] in " +"]
        guess = max(start - 1, 0) + offset
        pos = _find(lines, old, guess) if old else min(guess, len(lines))
        if pos is None:
            first = old[0] if old else ""
            raise PatchError(f"hunk {n} of {path} does not apply: its context starting {first!r} "
                             f"was not found near line {start}; read the file again and rebuild the patch")
        lines[pos:pos + len(old)] = new
        offset += len(new) - len(old)
    return "\n".join(lines) + ("\n" if lines else "")


def apply_patch(files: dict[str, str], text: str) -> dict[str, str | None]:
    """The changed files after applying `text` to `files` (None: deleted). Nothing is changed on error."""
    changes: dict[str, str | None] = {}
    for fp in parse_patch(text):
        if fp.old is None:
            assert fp.new is not None
            if fp.new in files and changes.get(fp.new, "") is not None:
                raise PatchError(f"{fp.new} already exists; the patch creates it from /dev/null")
            changes[fp.new] = _apply_file(fp.new, "", fp)
            continue
        current = changes.get(fp.old, files.get(fp.old))
        if current is None:
            raise PatchError(f"{fp.old} does not exist (see list_files)")
        if fp.new is None:
            changes[fp.old] = None
            continue
        result = _apply_file(fp.old, current, fp)
        if fp.new != fp.old:
            changes[fp.old] = None
        changes[fp.new] = result
    return changes
