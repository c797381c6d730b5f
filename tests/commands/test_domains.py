"""`rlvr domains new`: a scaffolded domain installs as a package of its own, is found through its entry point,
proves itself, and a broken plugin costs only its own domains."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

RLVR = Path(sys.executable).with_name("rlvr")


def _installed(project: Path, site: Path) -> None:
    """Install `project` the way pip does, into `site` (a directory put on PYTHONPATH): its wheel, unpacked,
    with the entry points pip would record, so the test venv itself is left as it was."""
    wheels = site.parent / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(project),
                    "-w", str(wheels)], check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob("*.whl")
    zipfile.ZipFile(wheel).extractall(site)


def _env(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}


def test_a_new_domain_installs_lists_validates_and_passes_its_own_tests(cli, tmp_path: Path) -> None:
    project, site = tmp_path / "rlvr-invoice-audit", tmp_path / "site"
    res = cli(["domains", "new", "invoice-audit", "-o", str(project)])
    assert res.code == 0, res.stderr
    assert {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()} == {
        "pyproject.toml", "README.md", "src/rlvr_invoice_audit/__init__.py",
        "src/rlvr_invoice_audit/source.py",
        "src/rlvr_invoice_audit/verifier.py", "tests/test_invoice_audit.py"}
    _installed(project, site)
    listed = subprocess.run([str(RLVR), "tasks", "list"], env=_env(site), check=False, capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0 and "invoice-audit" in listed.stdout, listed.stderr
    valid = subprocess.run([str(RLVR), "tasks", "validate", "--domain", "invoice-audit", "-n", "6"],
                           env=_env(site), check=False,
                           capture_output=True, text=True, timeout=300)
    assert valid.returncode == 0 and "6/6 tasks valid" in valid.stdout, valid.stdout + valid.stderr
    own = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(project / "tests")],
                         env={**_env(site), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, check=False,
                         capture_output=True,
                         text=True,
                         timeout=300, cwd=tmp_path)
    assert own.returncode == 0 and "3 passed" in own.stdout, own.stdout + own.stderr


def test_a_scaffolded_verifier_that_accepts_anything_fails_validation(cli, tmp_path: Path) -> None:
    """The scaffold's proof is real: break its verifier and `tasks validate` refuses the domain."""
    project, site = tmp_path / "rlvr-lax", tmp_path / "site"
    assert cli(["domains", "new", "lax", "-o", str(project)]).code == 0
    verifier = project / "src" / "rlvr_lax" / "verifier.py"
    verifier.write_text(verifier.read_text().replace("ok = found.text is not None and", "ok = True or"))
    _installed(project, site)
    valid = subprocess.run([str(RLVR), "tasks", "validate", "--domain", "lax", "-n", "2"], env=_env(site),
                           check=False,
                           capture_output=True, text=True, timeout=300)
    assert valid.returncode == 2 and "0/2 tasks valid" in valid.stdout, valid.stdout + valid.stderr


@pytest.mark.parametrize("args, message", [
    (["domains", "new", "Bad_Name"], "invalid domain name 'Bad_Name'"),
    (["domains", "new", "code"], "domain 'code' already exists"),
    (["domains", "new", "class"], "invalid domain name 'class'"),
])
def test_bad_names_are_one_line(cli, args, message, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli(args)
    assert res.code == 2 and message in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def test_an_existing_directory_is_refused_and_left_alone(cli, tmp_path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    res = cli(["domains", "new", "fresh", "-o", str(tmp_path)])
    assert res.code == 2 and "is not an empty directory" in res.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_a_broken_plugin_is_one_line_and_the_other_domains_still_load(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "broken_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[rlvr.domains]\nbroken = broken_plugin:DOMAIN\n")
    (site / "broken_plugin.py").write_text("import fancylib_that_is_not_installed\n")
    res = subprocess.run([str(RLVR), "tasks", "list", "--json"], env=_env(site), check=False,
                         capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.strip().splitlines()
    want = ("domain plugin 'broken' not loaded: broken-plugin (broken_plugin:DOMAIN): "
            "ModuleNotFoundError: No module named 'fancylib_that_is_not_installed'")
    assert lines == [want], res.stderr
    assert "code" in res.stdout and "rg-basic_arithmetic" in res.stdout
