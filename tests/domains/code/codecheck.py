"""Score final states of code tasks by running their hidden tests with real pytest, many tasks in one process.

Independent of the sandbox and the code verifier, so the domains' own gold and negative controls are checked
against the tests they generate even where those layers are not built.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from rlvr.domains.code.source import SAME_SOURCE
from rlvr.tasks.spec import FinalState, Task

# Each case lives in its own root `cN/`; before a test module is collected, its root becomes sys.path[0]
# and modules imported from other roots are forgotten, so `from solution import f` finds this case's file.
_CONFTEST = '''
import sys
from pathlib import Path

def _root(path):
    for p in [path, *path.parents]:
        if p.parent == Path(__file__).parent:
            return p
    return None

def pytest_collectstart(collector):
    path = getattr(collector, "path", None)
    if path is None or path.suffix != ".py":
        return
    root = _root(Path(path))
    if root is None:
        return
    base = str(Path(__file__).parent)
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None) or ""
        if f.startswith(base) and not f.startswith(str(root) + "/"):
            del sys.modules[name]
    sys.path[:] = [p for p in sys.path if not p.startswith(base)]
    sys.path.insert(0, str(root))
'''


def final_files(task: Task, final: FinalState) -> dict[str, str]:
    """The workspace a final state stands for: its files, or the answer laid through the task's template."""
    if final.answer is None:
        return dict(final.files)
    template = task.verifier.get("answer_template", "{answer}")
    return {**task.workspace, task.verifier["answer_file"]: template.replace("{answer}", final.answer)}


def hidden_tests(task: Task) -> dict[str, str]:
    """The task's hidden pytest files; a task judged by io cases gets the equivalent module written from them
    (one test per `(args, expected)` line, the same strict equality), so both kinds run under real pytest."""
    if "io" not in task.verifier:
        return {t: task.hidden[t] for t in task.verifier["tests"]}
    io = task.verifier["io"]
    module, fn = io["entry"].split(":")
    cases = [ast.literal_eval(line) for line in task.hidden[io["file"]].splitlines() if line.strip()]
    body = "".join(f"\n\ndef test_io_{i}():\n    assert _same({fn}(*{args!r}), {want!r})\n"
                   for i, (args, want) in enumerate(cases))
    return {"test_io_cases.py": f"from {module} import {fn}\n{SAME_SOURCE}{body}"}


def scores(cases: list[tuple[Task, FinalState]], timeout: float = 120.0) -> list[float]:
    """Fraction of each case's hidden tests that passed (a test that was not collected counts as failed)."""
    with tempfile.TemporaryDirectory(prefix="rlvr-codecheck-") as tmp:
        base = Path(tmp)
        (base / "conftest.py").write_text(_CONFTEST)
        (base / "pytest.ini").write_text("[pytest]\n")
        targets: list[str] = []
        expected: list[int] = []
        for i, (task, final) in enumerate(cases):
            root = base / f"c{i}"
            tests = hidden_tests(task)
            for rel, text in {**final_files(task, final), **task.hidden, **tests}.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text)
            targets += [str(root / t) for t in tests]
            expected.append(sum(len(re.findall(r"^\s*def test_", text, re.MULTILINE))
                                for text in tests.values()))
        xml = base / "report.xml"
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--import-mode=importlib", "--continue-on-collection-errors",
                        "-c", str(base / "pytest.ini"), "--rootdir", tmp, f"--junitxml={xml}", *targets],
                       cwd=tmp, env=env, capture_output=True, timeout=timeout, check=False)
        passed = [0] * len(cases)
        for tc in ET.parse(xml).getroot().iter("testcase"):
            m = re.match(r"c(\d+)\.", tc.get("classname", ""))
            if m and not any(child.tag in ("failure", "error", "skipped") for child in tc):
                passed[int(m.group(1))] += 1
        return [p / max(e, 1) for p, e in zip(passed, expected)]
