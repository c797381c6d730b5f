"""The project environment: test requirements read from the project, one venv per hash of what was installed
(made once, reused, never half-made), and an sdist fetched from the registry."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rlvr.domains.repo.build import env
from rlvr.domains.repo.build.source import resolve
from rlvr.sandbox import venvs


def test_requirements_come_from_the_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["attrs>=20"]\n'
        '[project.optional-dependencies]\ntest = ["hypothesis", "pytest-cov"]\ndocs = ["sphinx"]\n')
    (tmp_path / "requirements-test.txt").write_text("# comment\nfreezegun==1.5  # pinned\n-e .\n")
    assert env.requirements(tmp_path) == ["attrs>=20", "freezegun==1.5", "hypothesis", "pytest"]
    assert env.requirements(tmp_path / "nothing-here") == ["pytest"]


def test_setup_cfg_extras_and_tox_deps_are_test_requirements(tmp_path: Path) -> None:
    (tmp_path / "setup.cfg").write_text(
        "[options]\ninstall_requires =\n    six>=1.10\n[options.extras_require]\n"
        "testing =\n    freezegun\n    pytest-cov\ndocs =\n    sphinx\n")
    (tmp_path / "tox.ini").write_text(
        "[tox]\nenvlist = py3\n[testenv]\ndeps =\n    -rrequirements.txt\n    {env:EXTRA:}\n"
        "    hypothesis; python_version >= '3.8'  # markers stay\n    mock\ncommands = pytest\n")
    assert env.requirements(tmp_path) == ["freezegun", "hypothesis; python_version >= '3.8'", "mock", "pytest",
                                          "six>=1.10"]
    (tmp_path / "tox.ini").write_text("[testenv\nbroken")  # an unreadable file is not a requirement
    assert "mock" not in env.requirements(tmp_path)


def test_the_key_is_a_hash_of_what_is_installed() -> None:
    assert venvs.env_key(["pytest", "a"]) == venvs.env_key(["a", "pytest"]) != venvs.env_key(["pytest"])


def test_a_venv_is_made_once_and_reused(tmp_path: Path) -> None:
    python = venvs.ensure_env(["pytest"], tmp_path)
    assert python.is_file() and (python.parent.parent / ".done").is_file()
    out = subprocess.run([str(python), "-c", "import sys, pytest; print(sys.prefix)"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert Path(out) == python.parent.parent  # its own site-packages, not the host's environment
    stamp = (python.parent.parent / ".done").stat().st_mtime_ns
    assert venvs.ensure_env(["pytest"], tmp_path) == python
    assert (python.parent.parent / ".done").stat().st_mtime_ns == stamp


def test_a_dependency_that_does_not_install_is_an_env_error(tmp_path: Path) -> None:
    with pytest.raises(venvs.EnvError, match="does not build"):
        venvs.ensure_env(["pytest==0.0.1.dev999"], tmp_path)
    assert not any((tmp_path / "envs").iterdir())  # nothing half-made is left


def test_an_sdist_from_the_registry_holds_its_tests(tmp_path: Path) -> None:
    project = resolve("pypi:inflection==0.5.1", tmp_path)
    assert (project.name, project.version, project.git) == ("inflection", "0.5.1", False)
    assert (project.root / "test_inflection.py").is_file() and (project.root / "inflection").is_dir()
    assert resolve("pypi:inflection==0.5.1", tmp_path).root == project.root  # cached, not fetched again


def test_the_sandbox_runs_the_venv_with_its_own_site_packages() -> None:
    """The venv's prefix is mounted read-only in the sandbox: where it is under the checkout, or at the relocated
    prefix when the checkout sits where the sandbox has its own fresh directory (a CI clone under /tmp)."""
    from rlvr.sandbox.container import inner_interpreter
    from rlvr.sandbox.pool import BwrapPool

    python = venvs.ensure_env(["pytest"], Path(".rlvr-cache") / "build")  # the builder's own cache
    prefix = python.parent.parent.resolve()
    _, moved = inner_interpreter(str(python))
    inside = Path(moved[1]) if moved else prefix
    with BwrapPool(python=str(python), workers=1, spares=0) as pool:
        res = pool.run(["python", "-c", "import sys, pytest; print(sys.prefix); print(pytest.__file__)"])
        assert res.ok, res.stderr
        got_prefix, got_pytest = res.stdout.split()
        assert Path(got_prefix) == inside and got_pytest.startswith(str(inside))  # its own site-packages
        res = pool.run(["bash", "-c", "touch \"$(python -c 'import sys; print(sys.prefix)')/x\""])
        assert not res.ok and not (prefix / "x").exists()  # read-only
