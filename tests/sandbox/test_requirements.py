"""Tasks that need Python packages: their tools and their verification run on an interpreter that has them
(the sandbox's own when it does, a venv made once for them otherwise), mounted read-only; a pool that cannot
provide them refuses in one line."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlvr.errors import UserError
from rlvr.integrations.session import Runtime
from rlvr.sandbox import venvs as env
from rlvr.sandbox.fake import FakePool
from rlvr.sandbox.pool import BwrapPool
from rlvr.sandbox.requirements import pool_for
from rlvr.sandbox.unsafe import UnsafePool
from rlvr.tasks.loaders import load_task_dir
from tests.conftest import write_task

NEEDS = ("pytest", "pytest-mock==3.14.0")
"""pytest-mock is not in the test venv: a task whose hidden tests use its `mocker` fixture needs the venv."""
WORKSPACE = {"clock.py": "import time\n\n\ndef stamp():\n    raise NotImplementedError\n"}
SOLUTION = {"clock.py": "import time\n\n\ndef stamp():\n    return f'at {time.time():.0f}'\n"}
HIDDEN = {"test_clock.py": "import clock\n\n\ndef test_stamp(mocker):\n"
                           "    mocker.patch('time.time', return_value=42.0)\n    assert clock.stamp() "
                           "== 'at 42'\n"}


@pytest.fixture(scope="module")
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private environment cache for this module (one venv, made by pip once for all its tests)."""
    with pytest.MonkeyPatch.context() as mp:
        root = tmp_path_factory.mktemp("envs")
        mp.setenv("RLVR_ENV_CACHE", str(root))
        yield root


@pytest.fixture(scope="module")
def pool(env_cache: Path) -> Iterator[BwrapPool]:
    with BwrapPool(workers=1, spares=0) as p:
        yield p


def clock_task(root: Path, requirements: tuple[str, ...] | None) -> Path:
    reqs = f"requirements = {list(requirements)!r}\n".replace("'", '"') if requirements is not None else ""
    return write_task(root, "clock", toml=f'id = "clock"\ndomain = "code"\n{reqs}[limits]\nmax_turns = 4\n',
                      prompt="Make stamp() say when it is.", workspace=WORKSPACE, hidden=HIDDEN,
                      solution=SOLUTION)


def test_requirements_the_interpreter_has_are_served_by_the_pool_itself(pool: BwrapPool,
                                                                        env_cache: Path) -> None:
    assert pool_for(pool, ()) is pool
    assert pool_for(pool, ("pytest",)) is pool and pool_for(pool, ("pytest>=7", "rich")) is pool
    assert not (env_cache / "envs").exists()  # nothing was made for them
    assert not env.satisfied(["pytest<1"], pool.python) and not env.satisfied(["no-such-package-x"],
                                                                              pool.python)


def test_a_pool_that_cannot_provide_packages_refuses_in_one_line() -> None:
    with pytest.raises(UserError) as err:
        pool_for(FakePool(), ("pytest-mock",))
    assert (err.value.field == "requirements" and "pytest-mock" in str(err.value)
            and "\n" not in str(err.value))


def test_a_tasks_tools_and_verdict_run_on_an_interpreter_with_its_requirements(pool: BwrapPool,
                                                                               tmp_path: Path,
                                                                                env_cache: Path) -> None:
    task = load_task_dir(clock_task(tmp_path / "with", NEEDS))
    assert task.requirements == NEEDS
    served = pool_for(pool, task.requirements)
    assert served is not pool and pool_for(pool, tuple(reversed(NEEDS))) is served  # one pool per environment
    assert Path(served.python).is_relative_to(env_cache / "envs")  # type: ignore[attr-defined]
    with Runtime([task], pool=pool) as rt:
        ep = rt.session()
        ep.start(task)
        seen, _ = ep.call("run",
                          {"command": "python -c 'import pytest_mock; print(\"has\", pytest_mock.__name__)'"})
        assert "has pytest_mock" in seen, seen  # `python` on PATH is the environment's
        # the environment is mounted read-only: a candidate cannot plant a module in it for the hidden tests
        site = "import site; p = site.getsitepackages()[0]; open(p + '/planted.py', 'w')"
        tried, _ = ep.call("run", {"command": f'python -c "{site}"'})
        assert "Read-only file system" in tried or "Permission denied" in tried, tried
        ep.call("write_file", {"path": "clock.py", "content": SOLUTION["clock.py"]})
        _, done = ep.call("submit", {})
        scored = ep.finish()
        assert done and scored.verdict.passed and scored.verdict.score == 1.0, scored.verdict.checks
        untouched = rt.scorer.score(task, rt_final(task)).verdict
        assert untouched.score == 0.0 and not untouched.passed
    # the same task without its requirements: the hidden test cannot even get its fixture, so gold fails
    bare = load_task_dir(clock_task(tmp_path / "without", None))
    with Runtime([bare], pool=pool) as rt:
        gold = rt.scorer.score(bare, rt_final(bare, SOLUTION)).verdict
        assert not gold.passed and gold.score == 0.0


def rt_final(task, files=None):  # type: ignore[no-untyped-def]
    from rlvr.tasks.spec import FinalState

    return FinalState(files={**task.workspace, **(files or {})})


def test_the_unisolated_pool_serves_requirements_too(env_cache: Path, tmp_path: Path) -> None:
    task = load_task_dir(clock_task(tmp_path, NEEDS))
    with pytest.warns(RuntimeWarning):
        unsafe = UnsafePool()
    with unsafe:
        served = pool_for(unsafe, task.requirements)
        res = served.run(["python", "-c", "import pytest_mock; print('ok')"])
        assert res.ok and res.stdout == "ok\n"
        assert unsafe.run(["python", "-c", "import pytest_mock"]).exit_code == 1


def test_requirements_that_do_not_install_are_one_line(pool: BwrapPool) -> None:
    with pytest.raises(UserError) as err:
        pool_for(pool, ("pytest==0.0.1.dev999",))
    assert err.value.field == "requirements" and "do not install" in str(err.value)
