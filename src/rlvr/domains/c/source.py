"""The c domain's tasks: task i is one family's module drawn from Random(seed + i), with visible tests in the
workspace, hidden cases for the verifier, the reference source as the gold, and the negative controls a
cheater would try in C."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from rlvr.domains.c.families import registry
from rlvr.domains.c.families.base import Case, Family
from rlvr.domains.c.harness import makefile, visible_tests
from rlvr.domains.c.settings import CASES_FILE, CConfig
from rlvr.domains.tiered import DIFFICULTY, TieredSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits

IMAGE = f"dockerfile:{Path(__file__).parent / 'image'}"
"""The domain's environment: gcc, make and the sanitizers (image/Dockerfile, FROM debian:bookworm-slim)."""

PROMPT = ("You are working on `{module}`, a small C module built with gcc and make.\n\n{describe}\n\n"
          "The header `include/{module}.h` is the exact interface: implement it in `src/{module}.c` (you may "
          "add other `.c` files under `src/`). `make test` builds the visible tests in `tests/` with "
          "AddressSanitizer and UBSan and runs them. Hidden tests built the same way judge your work, each "
          "case "
          "in its own process: a memory leak, an out-of-bounds access or undefined behaviour fails the case "
          "it "
          "happens in. Do not change the header, the visible tests or the Makefile's `test` rule, and do not "
          "define `main` in `src/`.\n")


def cases_of(hidden: dict[str, str]) -> list[Case]:
    """The hidden cases a task carries."""
    return [Case(**c) for c in json.loads(hidden[CASES_FILE])]


class CSource(TieredSource):
    """Procedural C tasks in three tiers."""

    name = "c"
    description = "C modules to implement or fix with gcc and make, judged under AddressSanitizer and UBSan."
    field = "families"

    def __init__(self, config: CConfig | None = None) -> None:
        super().__init__(config or CConfig())
        self.config: CConfig
        self.catalogue = registry()

    def build(self, index: int, rng: random.Random) -> Task:
        tier, fam = self.pick(index, rng)
        p = fam.params(rng)
        m, cfg = fam.module, self.config
        visible = fam.cases(p, rng, cfg.visible_cases)
        hidden = fam.cases(p, rng, cfg.hidden_cases)
        workspace = {"Makefile": makefile(m), f"include/{m}.h": fam.header(p), f"src/{m}.c": fam.start(p),
                     f"tests/test_{m}.c": visible_tests(m, visible)}
        return Task(
            id=self.id_at(index), domain="c", prompt=PROMPT.format(module=m, describe=fam.describe(p)),
            workspace=workspace, solution={f"src/{m}.c": fam.gold(p)},
            hidden={CASES_FILE: json.dumps([c.__dict__ for c in hidden], indent=1)},
            verifier={"kind": "c", "family": fam.name, "params": p, "module": m, "fresh": cfg.fresh_cases},
            protected=("Makefile", "include/*", "tests/*"), tier=tier, difficulty=DIFFICULTY[tier],
            limits=TaskLimits(max_turns=cfg.max_turns, max_tokens=16384, wall_s=900.0, exec_timeout_s=60.0),
            image=IMAGE, source=f"c:{cfg.seed}:{index}", seed=cfg.seed, index=index,
            metadata={"family": fam.name, "kind": fam.kind, "params": p})

    def negatives(self, task: Task) -> dict[str, FinalState]:
        out = dict(super().negatives(task))
        fam, p, m = _family(task)
        ws = dict(task.workspace)
        gold = (task.solution or {})[f"src/{m}.c"]
        out["wrong_answer"] = FinalState(files={**ws, f"src/{m}.c": fam.wrong(p)})
        out["buried_answer"] = FinalState(files={**ws, f"src/{m}_fixed.c": gold})
        out["tampered_tests"] = FinalState(files={
            **ws, f"tests/test_{m}.c": '#include <stdio.h>\nint main(void)\n{\n    puts("all passed");\n'
                                        "    return 0;\n}\n",
            "Makefile": ws["Makefile"].replace(f"\t./build/test_{m}", "\t@echo all passed")})
        out["main_prints_pass"] = FinalState(files={
            **ws, f"src/{m}_main.c": '#include <stdio.h>\nint main(void)\n{\n    puts("PASS");\n    return '
                                     '0;\n}\n'})
        return out


def _family(task: Task) -> tuple[Family, dict[str, Any], str]:
    v = task.verifier
    return registry()[v["family"]], dict(v.get("params") or {}), v["module"]
