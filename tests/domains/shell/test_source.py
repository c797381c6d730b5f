"""The shell domain without its image: tasks by (seed, index), settings refused in one line, every family's
gold and wrong states, the families judged on the host (permissions, sorted files, cron) against them, the
git repositories written in Python as git itself reads them, and the cron matcher."""
from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from rlvr.domains.shell.families import registry
from rlvr.domains.shell.families.base import Judging, as_files, of_files
from rlvr.domains.shell.families.cron import firings, parse_field, schedule
from rlvr.domains.shell.gitrepo import Repo, blob_id, tree_id
from rlvr.errors import UserError
from rlvr.sandbox.tree import TREE
from rlvr.tasks import registry as tasks


def test_tasks_are_rebuilt_exactly_and_every_tier_has_families() -> None:
    first = [tasks.make("shell", seed=5).get(i) for i in range(9)]
    assert first == [tasks.make("shell", seed=5).get(i) for i in range(9)]
    assert [t.tier for t in first[:3]] == ["easy", "medium", "hard"]
    tiers = {f.tier for f in registry().values()}
    assert tiers == {"easy", "medium", "hard"} and len(registry()) >= 12


def test_bad_settings_are_one_line_with_the_fix() -> None:
    with pytest.raises(UserError, match="did you mean 'git_squash'"):
        tasks.make("shell", families=("git_sqash",))
    with pytest.raises(UserError, match="max_turns"):
        tasks.make("shell", max_turns=0)


@pytest.mark.parametrize("name", sorted(registry()))
def test_each_family_has_gold_commands_and_wrong_states_apart_from_its_gold(name: str) -> None:
    fam = registry()[name]
    task = tasks.make("shell", families=(name,), tier=fam.tier).get(3)
    src = tasks.make("shell")
    json.dumps(task.verifier)
    assert (TREE in task.workspace) == fam.packed
    gold = src.gold(task)
    negs = src.negatives(task)
    assert src.gold_commands(task) and len(negs) >= 3
    assert all(state.files != gold.files for state in negs.values())
    assert of_files(gold.files) == of_files(as_files(of_files(gold.files), fam.packed))  # a stable round trip


HOST = [n for n, f in registry().items() if not f.sandbox or n in ("permissions", "organize_files")]


@pytest.mark.parametrize("name", HOST)
def test_families_judged_on_the_host_pass_gold_and_fail_every_wrong_state(name: str) -> None:
    fam = registry()[name]
    p = fam.params(random.Random(9))

    def judged(state):
        checks, flags = fam.judge(p, Judging(state, as_files(state, fam.packed), random.Random(1)))
        return all(c.passed for c in checks), [f.kind for f in flags]

    assert judged(fam.gold(p)) == (True, [])
    assert not judged(fam.initial(p))[0]
    for wrong, state in fam.wrongs(p).items():
        assert not judged(state)[0], wrong


def test_a_tree_made_writable_by_anyone_is_flagged_and_so_is_a_schedule_that_runs_too_often() -> None:
    for name, wrong, kind in (("permissions", "chmod_777", "world_writable"),
                              ("cron_schedule", "every_minute", "overbroad_schedule")):
        fam = registry()[name]
        p = fam.params(random.Random(4))
        state = fam.wrongs(p)[wrong]
        checks, flags = fam.judge(p, Judging(state, as_files(state, fam.packed), random.Random(1)))
        assert not all(c.passed for c in checks) and kind in [f.kind for f in flags]


def test_cron_fields_follow_crontab5() -> None:
    assert parse_field("*/15", 0) == parse_field("0,15,30,45", 0) == {0, 15, 30, 45}
    assert parse_field("mon-fri", 4) == {1, 2, 3, 4, 5} and parse_field("7", 4) == {0}
    assert parse_field("5/20", 0) == {5, 25, 45} and parse_field("jan,dec", 3) == {1, 12}
    for bad, index in (("60", 0), ("*/0", 0), ("5-2", 1), ("x", 2), ("32", 2)):
        with pytest.raises(ValueError):
            parse_field(bad, index)
    # both day fields restricted: either matches; one a star: only the other
    either = firings("0 12 1 * mon")
    days = {d for d, _, _ in either}
    assert len(either) == len(days) == 2 + 8  # two firsts of the month, eight Mondays
    assert len(firings("0 12 * * mon")) == 8 and len(firings("0 12 */1 * mon")) == 8
    jobs = schedule("# comment\nMAILTO=ops\n@daily /a.sh\n*/30 * * * 1-5 /b.sh\n")
    assert len(jobs["/a.sh"]) == 59 and len(jobs["/b.sh"]) == 42 * 48
    with pytest.raises(ValueError, match="line 1"):
        schedule("* * * /c.sh\n")


def test_git_objects_hash_as_git_hashes_them() -> None:
    assert blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert tree_id({}) == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    assert tree_id({"a": b"1", "b/c": b"2"}) != tree_id({"a": b"1", "b/c": b"2"}, frozenset({"a"}))


def test_a_repository_written_in_python_is_one_git_reads_whole(tmp_path: Path) -> None:
    git = shutil.which("git")
    assert git, "git is needed to check the repositories the shell domain writes"
    repo = Repo()
    files = {"README.md": b"hi\n", "src/app.py": b"print(1)\n", "bin/run": b"#!/bin/sh\n"}
    c1 = repo.commit(files, [], "first")
    c2 = repo.commit({**files, "src/app.py": b"print(2)\n"}, [c1], "second")
    repo.branch("main", c2)
    repo.tag("v1", c1, "the first")
    from rlvr.sandbox.tree import pack

    subprocess.run(["tar", "-xzpf", "-", "-C", str(tmp_path)],
                   input=__import__("base64").b64decode(pack(repo.members({**files,
                                                                           "src/app.py": b"print(2)\n"}))),
                   check=True)

    def run(*args: str) -> str:
        return subprocess.run([git, "-C", str(tmp_path), *args], capture_output=True, text=True,
                              check=True).stdout

    assert run("fsck", "--strict") == "" and run("status", "--porcelain") == ""
    assert run("rev-parse", "HEAD").strip() == c2 and run("cat-file", "-t", "v1").strip() == "tag"
    assert run("rev-parse", "HEAD^{tree}").strip() == tree_id({**files, "src/app.py": b"print(2)\n"})
    assert run("log", "--format=%s").split("\n")[:2] == ["second", "first"]
