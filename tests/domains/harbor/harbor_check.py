"""Harbor's own package judges rlvr's Harbor tasks (`make harbor-check`: Python >= 3.12, harbor installed).

    python tests/domains/harbor/harbor_check.py TASK_DIR...

Each directory is loaded by `harbor.models.task.task.Task` (task.toml through TaskConfig, instruction.md,
the tests the verifier needs, the verifier's environment resolved as Harbor resolves it) and linted by
`harbor lint`'s default rules. A task rlvr exported (`[metadata.rlvr]`) must load with no finding; the others
report theirs. Exit 0 when every directory loads and every export is clean.
"""
from __future__ import annotations

import sys
from pathlib import Path

from harbor.lint.models import DEFAULT_RULES
from harbor.lint.task import lint_task
from harbor.models.task.task import Task
from harbor.models.task.verifier_mode import resolve_verifier_environment_definition


def main(dirs: list[str]) -> int:
    bad = 0
    for d in map(Path, dirs):
        try:
            task = Task(d)
        except Exception as exc:  # noqa: BLE001  (Harbor's own refusal is the finding)
            print(f"FAIL {d}: Harbor cannot load it: {type(exc).__name__}: {exc}")
            bad += 1
            continue
        exported = "rlvr" in task.config.metadata
        verifier = resolve_verifier_environment_definition(task.config, task.paths)
        findings = [f"{f.rule.value}: {f.message}" for f in lint_task(d, selected_rules=set(DEFAULT_RULES))]
        where = f"separate verifier from {verifier.directory.name}/" if verifier else "shared verifier"
        clean = not findings
        print(f"{'ok  ' if clean or not exported else 'FAIL'} {d.name}: {task.name}, {where}"
              + "".join(f"\n       {f}" for f in findings))
        bad += exported and not clean
    print(f"{len(dirs) - bad}/{len(dirs)} task directories as Harbor wants them")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
