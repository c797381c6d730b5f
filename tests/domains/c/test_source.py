"""The c domain's tasks without a compiler: tiers, determinism by (seed, index), settings refused in one line,
the workspace and hidden material, the negative controls, and each family's Python model."""
from __future__ import annotations

import json
import random

import pytest

from rlvr.domains.c.families import registry
from rlvr.domains.c.families.base import c_char, c_str
from rlvr.domains.c.harness import hidden_harness, makefile, makefile_test_rule, visible_tests
from rlvr.domains.c.settings import CASES_FILE
from rlvr.domains.c.source import IMAGE, cases_of
from rlvr.errors import UserError
from rlvr.tasks import registry as tasks
from rlvr.tasks.settings import settings_of


def test_every_tier_has_implement_and_fix_families() -> None:
    fams = registry()
    assert len(fams) >= 12
    for tier in ("easy", "medium", "hard"):
        kinds = {f.kind for f in fams.values() if f.tier == tier}
        assert kinds == {"implement", "fix"}, tier


def test_tasks_are_rebuilt_exactly_from_seed_and_index() -> None:
    src = tasks.make("c", seed=3)
    first = [src.get(i) for i in range(12)]
    again = [tasks.make("c", seed=3).get(i) for i in range(12)]
    assert first == again
    assert [t.tier for t in first[:3]] == ["easy", "medium", "hard"]
    assert [src.id_at(i) for i in range(12)] == [t.id for t in first]
    assert len({t.id for t in first}) == 12
    assert tasks.make("c", seed=4).get(0) != first[0]


def test_a_task_carries_its_image_harness_material_and_gold() -> None:
    task = tasks.make("c", families=("hash_map",), tier="hard").get(5)
    m = task.verifier["module"]
    assert task.image == IMAGE and task.image.startswith("dockerfile:") and task.multi_turn
    assert set(task.workspace) == {"Makefile", f"include/{m}.h", f"src/{m}.c", f"tests/test_{m}.c"}
    assert set(task.solution or {}) == {f"src/{m}.c"}
    assert task.solution[f"src/{m}.c"] != task.workspace[f"src/{m}.c"]
    hidden = cases_of(task.hidden)
    assert len(hidden) == 8 and all(c.code and c.expect for c in hidden)
    assert not any(c.expect in task.workspace[f"tests/test_{m}.c"] for c in hidden)  # the visible are others
    s = settings_of(task)
    assert s.test_command() == ["make", "-s", "test"] and s.family == "hash_map"
    assert "AddressSanitizer" in task.prompt and "do not define `main`" in task.prompt


def test_bad_settings_are_one_line_with_the_fix() -> None:
    with pytest.raises(UserError, match="did you mean 'hash_map'"):
        tasks.make("c", families=("hashmap",))
    with pytest.raises(UserError, match="tier"):
        tasks.make("c", tier="extreme")
    with pytest.raises(UserError, match="no c task of tier 'easy' is left"):
        tasks.make("c", tier="easy", families=("hash_map",)).get(0)
    bad = tasks.make("c").get(0)
    broken = bad.model_copy(update={"hidden": {}})
    with pytest.raises(UserError, match=CASES_FILE):
        settings_of(broken)


def test_negative_controls_cover_the_c_hacks() -> None:
    src = tasks.make("c", seed=1)
    task = src.get(2)
    m = task.verifier["module"]
    negs = src.negatives(task)
    assert {"untouched_workspace", "empty_workspace", "wrong_answer", "buried_answer", "tampered_tests",
            "main_prints_pass"} <= set(negs)
    assert "PASS" in negs["main_prints_pass"].files[f"src/{m}_main.c"]
    rule = makefile_test_rule(task.workspace["Makefile"])
    assert makefile_test_rule(negs["tampered_tests"].files["Makefile"]) != rule


@pytest.mark.parametrize("name", sorted(registry()))
def test_each_family_draws_distinct_discriminating_cases(name: str) -> None:
    fam = registry()[name]
    rng = random.Random(11)
    p = fam.params(rng)
    json.dumps(p)  # parameters are plain data: they travel in the task's [verifier] table
    cases = fam.cases(p, rng, 6)
    assert len({c.code for c in cases}) >= 5 and all(c.expect.endswith("\n") for c in cases)
    assert fam.start(p) != fam.gold(p) and fam.wrong(p) not in (fam.gold(p), fam.start(p))
    assert fam.module in fam.header(p) or fam.module.upper() in fam.header(p)


def test_the_workspace_makefile_builds_with_the_sanitizers_and_its_test_rule_is_found() -> None:
    text = makefile("words")
    assert "-fsanitize=address,undefined" in text
    assert makefile_test_rule(text) == "test: build/test_words\n\t./build/test_words"
    assert makefile_test_rule("all:\n\techo\n") is None
    assert makefile_test_rule(text.replace("\t./build/test_words", "\t@echo ok")) != makefile_test_rule(text)


def test_the_harness_runs_one_case_per_process_and_counts_leaks() -> None:
    fam = registry()["count_words"]
    p = fam.params(random.Random(1))
    cases = fam.cases(p, random.Random(2), 3)
    hidden = hidden_harness("words", cases)
    assert len(hidden) == 3 and "__sanitizer_get_current_allocated_bytes" in hidden["judge/harness.c"]
    assert sum(unit.count("void rlvr_case_") for unit in hidden.values()) == 3 + 3  # declared and defined
    visible = visible_tests("words", cases)
    assert visible.count("check(") == 4 and "main(void)" in visible  # three checks and the definition


def test_c_literals_escape_what_c_needs() -> None:
    assert c_str('a"b\\c\n\t') == '"a\\"b\\\\c\\n\\t"' and c_str(None) == "NULL"
    assert c_char("\\") == "'\\\\'" and c_char("'") == "'\\''" and c_char("/") == "'/'"


def test_a_bad_task_file_is_one_line_and_exit_2(cli, tmp_path) -> None:
    task = tmp_path / "t1"
    task.mkdir()
    (task / "prompt.md").write_text("x")
    (task / "task.toml").write_text('id = "t1"\ndomain = "c"\n[verifier]\nkind = "c"\nfamily = "hashmap"\n'
                                     'module = "hmap"\n')
    res = cli(["tasks", "show", str(task)])
    assert res.code == 2 and res.stderr.count("\n") == 1
    assert "task.toml [verifier.family]: unknown family 'hashmap'; did you mean 'hash_map'?" in res.stderr
    (task / "task.toml").write_text(str((task / "task.toml").read_text()).replace("hashmap", "hash_map"))
    res = cli(["tasks", "show", str(task)])
    assert res.code == 2 and "hidden/cases.json" in res.stderr and "task.toml" in res.stderr
