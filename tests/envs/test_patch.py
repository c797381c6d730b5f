"""Unified diffs: clean hunks, shifted context, new and deleted files, and clear errors for bad patches."""
from __future__ import annotations

import pytest

from rlvr.envs.patch import PatchError, apply_patch, parse_patch

SRC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


def test_simple_hunk() -> None:
    patch = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    assert apply_patch({"m.py": SRC}, patch)["m.py"] == SRC.replace("a - b", "a + b", 1)


def test_shifted_context_still_applies() -> None:
    patch = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def sub(a, b):\n-    return a - b\n+    return b - a\n"
    out = apply_patch({"m.py": SRC}, patch)["m.py"]
    assert out.endswith("def sub(a, b):\n    return b - a\n") and out.startswith("def add(a, b):\n    "
                                                                                 "return a - b\n")


def test_new_and_deleted_files() -> None:
    patch = ("--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n"
             "--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n")
    assert apply_patch({"old.py": "gone\n"}, patch) == {"new.py": "x = 1\ny = 2\n", "old.py": None}


def test_creating_an_existing_file_is_refused() -> None:
    with pytest.raises(PatchError, match="already exists"):
        apply_patch({"new.py": "x\n"}, "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+x = 1\n")


def test_context_mismatch_names_hunk_and_file() -> None:
    patch = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def mul(a, b):\n-    return a * b\n+    return 0\n"
    files = {"m.py": SRC}
    with pytest.raises(PatchError, match=r"hunk 1 of m.py does not apply.*'def mul\(a, b\):'"):
        apply_patch(files, patch)
    assert files == {"m.py": SRC}  # nothing changed


@pytest.mark.parametrize("patch, message", [
    ("just some text", "no file headers"),
    ("--- a/m.py\n@@ -1 +1 @@\n-a\n+b\n", "without a following"),
    ("--- a/m.py\n+++ b/m.py\n@@ bogus @@\n-a\n+b\n", "malformed hunk header"),
    ("--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n-a\n+b\n", "counts in the header"),
    ("--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n-a\n*junk\n", "hunk ended early"),
    ("--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n", "does not exist"),
    ("--- /dev/null\n+++ /dev/null\n", "both sides"),
])
def test_bad_patches_say_why(patch: str, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        apply_patch({"m.py": "a\n"}, patch)


def test_parse_keeps_every_file_and_hunk() -> None:
    patch = ("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n@@ -5 +5 @@\n-c\n+d\n"
             "--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-e\n\\ No newline at end of file\n+f\n")
    parsed = parse_patch(patch)
    assert [(p.old, p.new, len(p.hunks)) for p in parsed] == [("x.py", "x.py", 2), ("y.py", "y.py", 1)]
