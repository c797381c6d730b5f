"""The procedural code domain: determinism by index, tiny-tier shape, gold 1.0 and negative controls 0 under
real pytest, partial credit, and bad input."""
from __future__ import annotations

import ast
import os
import re
import string
import subprocess
import sys

import pytest

from rlvr.domains.code.source import CodeSource, reference
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState
from tests.domains.code.codecheck import scores

TIERS = ("tiny", "easy", "medium", "hard")


@pytest.mark.parametrize("tier", TIERS)
def test_rebuilt_exactly_from_seed_and_index(tier: str) -> None:
    a, b = registry.make("code", tier=tier, seed=7), registry.make("code", tier=tier, seed=7)
    for i in (0, 1, 13, 999_999):
        assert a.get(i).model_dump() == b.get(i).model_dump()
        assert a.get(i).id == a.id_at(i) and a.get(i).source == f"code:7:{i}"
    other = registry.make("code", tier=tier, seed=8)
    assert [other.get(i).hidden for i in range(5)] != [a.get(i).hidden for i in range(5)]
    assert len({a.get(i).prompt for i in range(20)}) >= 10


def test_same_tasks_in_another_process_with_another_hash_seed() -> None:
    code = ("import hashlib\nfrom rlvr.tasks import registry\nh = hashlib.sha256()\n"
            "for tier in ('tiny', 'easy', 'medium', 'hard'):\n    src = registry.make('code', tier=tier)\n"
            "    for i in range(10):\n        t = src.get(i)\n        "
            "h.update(t.model_dump_json().encode())\n"
            "        h.update(str(src.negatives(t)).encode())\nprint(h.hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              timeout=120,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(digests) == 1 and len(digests.pop().strip()) == 64


def test_tiny_tier_is_short_ascii_and_single_turn() -> None:
    src = registry.make("code", tier="tiny")
    tasks = src.sample(300)
    printable = set(string.printable) - set("\t\r\x0b\x0c")
    families = {t.metadata["family"] for t in tasks}
    assert families == {"linear", "number", "string", "list"}
    for t in tasks:
        assert not t.multi_turn and len(t.prompt) <= 160 and set(t.prompt) <= printable
        answer = t.metadata["reference_answer"]
        assert answer == reference(t) == t.answer and len(answer) <= 24 and set(answer) <= printable
        assert t.prompt.endswith("    return ") and src.gold(t) == FinalState(answer=answer)
        laid = t.verifier["answer_template"].replace("{answer}", answer)
        ast.parse(laid)
        shown = {repr(a[0]) for a, _ in t.metadata["visible"]}
        assert t.verifier["io"] == {"file": "io_cases.txt", "entry": "solution:f", "partial": False}
        assert set(t.hidden) == {"io_cases.txt"}
        hidden_args = {repr(args[0]) for args,
                       _ in (ast.literal_eval(x) for x in t.hidden["io_cases.txt"].splitlines())}
        assert len(hidden_args) == 5 and not shown & hidden_args  # hidden inputs are fresh


def test_default_modes_and_limits() -> None:
    assert registry.make("code", tier="tiny").get(0).limits.max_turns == 1
    multi = registry.make("code", tier="medium").get(0)
    assert multi.multi_turn and set(multi.workspace) == {"solution.py", "test_solution.py"}
    assert "test_solution.py" in multi.workspace and any(p == "test_*.py" for p in multi.protected)
    assert not set(multi.workspace) & set(multi.hidden)
    assert registry.make("code", tier="hard", mode="single").get(0).limits.max_turns == 1
    assert registry.verifier_kind("code") == "code"


def _controls(src: CodeSource, n: int) -> tuple[list, list[str]]:
    cases, labels = [], []
    for i in range(n):
        t = src.get(i)
        cases.append((t, src.gold(t)))
        labels.append("gold")
        for name, final in src.negatives(t).items():
            cases.append((t, final))
            labels.append(name)
    return cases, labels


def test_gold_scores_one_and_every_negative_control_zero_under_pytest() -> None:
    cases, labels = [], []
    for tier in TIERS:
        for mode in ("single", "multi"):
            c, lab = _controls(registry.make("code", tier=tier, mode=mode, seed=3), 1)
            cases += c
            labels += [f"{tier}/{mode}/{x}" for x in lab]
    names = {lab.rsplit("/", 1)[1] for lab in labels}
    assert {"wrong_answer", "buried_answer", "visible_only", "empty_answer", "echoed_prompt",
            "untouched_workspace", "tampered_tests"} <= names
    got = scores(cases)
    wrong = [(lab, s) for lab, s in zip(labels, got) if s != (1.0 if lab.endswith("/gold") else 0.0)]
    assert not wrong


def test_partial_credit_for_a_solution_right_on_some_hidden_inputs() -> None:
    src = registry.make("code", tier="easy", mode="multi", seed=1)
    t = src.get(4)
    name = t.metadata["function"]
    hidden_args = re.findall(rf"_same\({name}\((.*)\), ", t.hidden["test_hidden.py"])
    keep = {f"({a},)" for a in hidden_args[:2]}  # one-argument families: repr of the args tuple
    partial = (reference(t).replace(f"def {name}(", "def _ref(", 1)
               + f"\n\ndef {name}(*args):\n    return _ref(*args) if repr(args) in {keep!r} else None\n")
    [score] = scores([(t, FinalState(files={**t.workspace, "solution.py": partial}))])
    assert score == pytest.approx(2 / len(hidden_args))


@pytest.mark.parametrize("config, field", [
    ({"tier": "giant"}, "code.tier"), ({"mode": "both"}, "code.mode"), ({"seed": "x"}, "code.seed"),
    ({"colour": 1}, "code.colour"),
])
def test_bad_config_is_a_one_line_user_error(config: dict, field: str) -> None:
    with pytest.raises(UserError) as exc:
        registry.make("code", **config)
    assert field in str(exc.value) and "\n" not in str(exc.value)


def test_negative_index_is_a_user_error() -> None:
    with pytest.raises(UserError, match="index"):
        registry.make("code").get(-1)


def test_cli_samples_tasks(cli) -> None:
    res = cli(["tasks", "sample", "code", "-n", "3"])
    assert res.code == 0 and res.stdout.count("Write a Python function") == 3
