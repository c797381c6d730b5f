"""The project environment: test requirements read from the project, one venv per hash of what was installed
(made once, reused, never half-made), and an sdist fetched from the registry."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rlvr.domains.repo.build import venv as project_venv
from rlvr.domains.repo.build.source import resolve
from rlvr.sandbox import venvs


def test_requirements_come_from_the_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["attrs>=20"]\n'
        '[project.optional-dependencies]\ntest = ["hypothesis", "pytest-cov"]\ndocs = ["sphinx"]\n')
    (tmp_path / "requirements-test.txt").write_text("# comment\nfreezegun==1.5  # pinned\n-e .\n")
    assert project_venv.requirements(tmp_path) == ["attrs>=20", "freezegun==1.5", "hypothesis", "pytest"]
    assert project_venv.requirements(tmp_path / "nothing-here") == ["pytest"]


def test_setup_cfg_extras_and_tox_deps_are_test_requirements(tmp_path: Path) -> None:
    (tmp_path / "setup.cfg").write_text(
        "[options]\ninstall_requires =\n    six>=1.10\n[options.extras_require]\n"
        "testing =\n    freezegun\n    pytest-cov\ndocs =\n    sphinx\n")
    (tmp_path / "tox.ini").write_text(
        "[tox]\nenvlist = py3\n[testenv]\ndeps =\n    -rrequirements.txt\n    {env:EXTRA:}\n"
        "    hypothesis; python_version >= '3.8'  # markers stay\n    mock\ncommands = pytest\n")
    assert project_venv.requirements(tmp_path) == ["freezegun", "hypothesis; python_version >= '3.8'", "mock",
                                                   "pytest",
                                          "six>=1.10"]
    (tmp_path / "tox.ini").write_text("[testenv\nbroken")  # an unreadable file is not a requirement
    assert "mock" not in project_venv.requirements(tmp_path)


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
    """The venv's prefix is mounted read-only in the sandbox: where it is under the checkout, or at the
    relocated prefix when the checkout sits where the sandbox has its own fresh directory (a CI clone under
    /tmp)."""
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


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_requirement_files_tox_names_with_r_are_followed(tmp_path: Path) -> None:
    """The issue's project: its test requirements live in a file tox.ini's deps names with
    `-r{toxinidir}/...`, which includes the next (relative to itself), which includes the first again (a cycle
    ends)."""
    write(tmp_path, {
        "tox.ini": "[tox]\nenvlist = py3\n[testenv]\ndeps =\n    -r{toxinidir}/requirements/test.txt\n"
                   "    py38: mock-py38-only\ncommands = pytest\n",
        "requirements/test.txt": "# tests\n-r base.txt\n--requirement=../extra/more.txt\n"
                                 "hypothesis==6.0 --hash=sha256:abc  # pinned\n-r missing.txt\n"
                                 "-c constraints.txt\n-e .\n./vendored\nhttps://example.invalid/x.whl\n"
                                 "foo @ https://example.invalid/foo.whl\n--index-url "
                                 "https://example.invalid\n"
                                 "pytest-cov\n",
        "requirements/base.txt": "attrs>=19 \\\n    ; python_version >= '3.6'\n-r test.txt\n",
        "requirements/constraints.txt": "not-a-requirement==1\n",
        "requirements/docs.txt": "sphinx\n",
        "extra/more.txt": "six\n-r ../../outside.txt\n",
    })
    (tmp_path.parent / "outside.txt").write_text("outside-the-project\n")
    assert project_venv.requirements(tmp_path) == ["attrs>=19 ; python_version >= '3.6'", "hypothesis==6.0",
                                                   "pytest",
                                          "six"]


def test_requirements_files_by_name_and_test_extras(tmp_path: Path) -> None:
    """`requirements.txt` (runtime dependencies, which the tests import), `requirements*.txt` and
    `requirements/*.txt` named for tests or development, `tests/requirements.txt`, and the extras tox
    installs; never docs or lint files."""
    write(tmp_path, {
        "requirements.txt": "requests>=2\n",
        "requirements-dev.txt": "black\n",
        "requirements_docs.txt": "sphinx\n",
        "dev-requirements.txt": "-r requirements.txt\nfreezegun\n",
        "notes.txt": "not-a-requirement\n",
        "requirements/testing.txt": "pytest-mock\n",
        "requirements/lint.txt": "flake8\n",
        "tests/requirements.txt": "responses\n",
        "tox.ini": "[testenv]\nextras = fancy, testing\n",
        "setup.cfg": "[options.extras_require]\nfancy =\n    rich\ntesting =\n    mock\ndocs =\n    furo\n",
        "pyproject.toml": '[project]\nname = "x"\n[project.optional-dependencies]\ntests = ["trustme"]\n'
                          '[dependency-groups]\ntest = ["pyyaml", {include-group = "other"}]\n',
    })
    assert project_venv.requirements(tmp_path) == ["black", "freezegun", "mock", "pytest", "pytest-mock",
                                                   "pyyaml",
                                          "requests>=2", "responses", "rich", "trustme"]


def test_a_pin_pip_names_is_relaxed(tmp_path: Path, monkeypatch) -> None:
    calls: list[list[str]] = []

    def fake(reqs, cache):
        calls.append(list(reqs))
        if "oldlib==1.0" in reqs:
            raise venvs.EnvError("the environment does not build: ERROR: No matching distribution found for "
                                 "oldlib==1.0")
        return tmp_path / "python"
    monkeypatch.setattr(venvs, "ensure_env", fake)
    made = project_venv.make_venv(["attrs==23.1", "oldlib==1.0", "pytest"], tmp_path)
    assert made.python == tmp_path / "python" and made.relaxed == ["oldlib==1.0 -> oldlib"]
    assert made.requirements == ["attrs==23.1", "oldlib", "pytest"] and len(calls) == 2
    assert project_venv.make_venv(["pytest"], tmp_path).relaxed == []  # what builds is never touched


def test_pins_pip_does_not_name_are_found_by_halving_within_the_budget(tmp_path: Path, monkeypatch) -> None:
    """pip's last line often names nothing (a conflict, a build that fails): every pin is relaxed, then pins
    are restored a half at a time, so only the two that stop the build stay relaxed, extras and markers
    kept."""
    calls: list[list[str]] = []
    bad = {"b[x]==2.0; python_version < '4'", "e<=1.0"}

    def fake(reqs, cache):
        calls.append(list(reqs))
        if bad & set(reqs):
            raise venvs.EnvError("the environment does not build: ERROR: ResolutionImpossible: for "
                                 "help visit ...")
        return tmp_path / "python"
    monkeypatch.setattr(venvs, "ensure_env", fake)
    pins = ["a==1.0", "b[x]==2.0; python_version < '4'", "c~=3.0", "d<4", "e<=1.0", "f==6.0", "g>=1"]
    made = project_venv.make_venv(["pytest", *pins], tmp_path, max_attempts=12)
    assert made.relaxed == ["b[x]==2.0; python_version < '4' -> b[x]; python_version < '4'", "e<=1.0 -> e"]
    assert "g>=1" in made.requirements and "a==1.0" in made.requirements and len(calls) <= 12
    calls.clear()
    # a smaller budget: still a set that builds, more relaxed
    made = project_venv.make_venv(["pytest", *pins], tmp_path)
    assert len(calls) <= project_venv.MAX_PIP and not bad & set(made.requirements)
    assert {n.split(" -> ")[0] for n in made.relaxed} >= bad


def test_an_env_that_fails_for_another_reason_is_an_env_error_after_two_builds(tmp_path: Path,
                                                                               monkeypatch) -> None:
    calls: list[list[str]] = []

    def fake(reqs, cache):
        calls.append(list(reqs))
        raise venvs.EnvError(f"the environment does not build: attempt {len(calls)}")
    monkeypatch.setattr(venvs, "ensure_env", fake)
    with pytest.raises(venvs.EnvError, match="attempt 1$"):  # the first error, not the relaxed set's
        project_venv.make_venv(["pytest", "a==1.0", "b==2.0"], tmp_path)
    assert calls == [["a==1.0", "b==2.0", "pytest"], ["a", "b", "pytest"]]
    calls.clear()
    with pytest.raises(venvs.EnvError):
        project_venv.make_venv(["pytest", "a>=1"], tmp_path)  # nothing pinned: nothing to relax
    assert len(calls) == 1


def test_a_pin_that_does_not_exist_is_relaxed_by_pip_itself(tmp_path: Path) -> None:
    made = project_venv.make_venv(["iniconfig==0.0.1.dev999", "pytest"], tmp_path)
    assert made.relaxed == ["iniconfig==0.0.1.dev999 -> iniconfig"]
    assert made.requirements == ["iniconfig", "pytest"] and made.python.is_file()
