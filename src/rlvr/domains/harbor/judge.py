"""rlvr's verifier inside an exported Harbor task: the program its tests/test.sh runs.

    python -m rlvr.domains.harbor.judge /tests/task.json /app /logs/verifier

It reads the rlvr Task the export wrote (hidden material included: it lives under tests/, which the agent
never sees), takes the agent's final working directory as the final state (its `answer.txt`, when there is
one, as the answer of a single-turn task; a tree task's packed with its modes, links and git history, as
rlvr's lease packs one), and verifies it with the task's own verifier. The container is the
sandbox here: candidate programs run as plain processes in it (`isolation = "none"`), in the image that is the
task's environment, so the task's own image reference is dropped. It writes Harbor's reward file,
`reward.json` as `{"reward": R}` with R the verdict's reward (its score, 0 when flagged), and the whole
verdict beside it as `verdict.json`. A verdict that could not be reached (an infra error) writes no reward:
Harbor then records a verifier error, not a 0. Exit code 0 when a reward was written, 1 otherwise."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from rlvr.errors import InfraError

if TYPE_CHECKING:
    from rlvr.tasks.spec import Task

ANSWER_FILE = "answer.txt"
"""Where an exported single-turn task's instruction asks for the final answer (in the working directory)."""


def tree_state(task: Task, workdir: Path, files: dict[str, str]) -> dict[str, str]:
    """A tree task's final state (`rlvr.sandbox.tree`) as rlvr's lease leaves one: WORKDIR packed with its
    modes, links and git history; an archive already there is the state as rlvr carries it as text files
    (solve.sh keeps one), judged as it is, as rlvr judges a final state's archive. Other tasks: `files`."""
    from rlvr.sandbox.tree import CAPTURE, has_tree, packed
    from rlvr.tasks.loaders import read_workspace

    if not has_tree(task.workspace) or has_tree(files) or not workdir.is_dir():
        return files
    done = subprocess.run(["sh", "-c", CAPTURE], cwd=workdir, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise InfraError(f"the final workspace could not be packed: {done.stderr.strip()[-300:]}")
    return packed(read_workspace(workdir))


def judge(task_json: Path, workdir: Path, logs: Path) -> int:
    from rlvr.sandbox.unsafe import UnsafePool
    from rlvr.tasks.loaders import read_workspace
    from rlvr.tasks.settings import checked
    from rlvr.tasks.spec import FinalState, Task
    from rlvr.verify.base import VerifyContext, verify
    from rlvr.verify.verdict import Verdict

    task = checked(Task.model_validate_json(task_json.read_text(encoding="utf-8")))
    files = read_workspace(workdir) if workdir.is_dir() else {}
    with warnings.catch_warnings():  # the container is the sandbox: the unisolated pool is meant here
        warnings.simplefilter("ignore")
        pool = UnsafePool(warn=False)
    try:
        files = tree_state(task, workdir, files)
        final = FinalState(files=files, answer=files.get(ANSWER_FILE))
        verdict = verify(task, final, VerifyContext(pool=pool))
    except InfraError as exc:
        verdict = Verdict.infra(str(exc))
    finally:
        pool.close()
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "verdict.json").write_text(verdict.model_dump_json(indent=1), encoding="utf-8")
    if verdict.infra_error is not None:
        print(f"rlvr: the verifier could not judge: {verdict.infra_error}", file=sys.stderr)
        return 1
    (logs / "reward.json").write_text(json.dumps({"reward": verdict.reward()}), encoding="utf-8")
    print(f"rlvr: score {verdict.score:.3f}, reward {verdict.reward():.3f}, passed {verdict.passed}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m rlvr.domains.harbor.judge TASK_JSON WORKDIR LOG_DIR", file=sys.stderr)
        return 2
    return judge(*(Path(a) for a in argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
