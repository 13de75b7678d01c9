"""The Pulumi project `rackform init` writes: what the engine reads from its Pulumi.yaml, and that
`pulumi install` (pip, in the program folder `main` names, with that folder's requirements.txt)
can install it where rackform is installed: from a wheel there is no source tree or lock to name.

No Pulumi CLI here: pip is run as the python language host runs it (in `main`, with the
virtualenv's python), in --dry-run without an index, so only what is already installed counts.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import InvalidRequirement, Requirement

from rackform.cli import main

REPO = Path(__file__).resolve().parents[2]


def pulumi_project(repo: Path) -> dict:
    return yaml.safe_load((repo / "Pulumi.yaml").read_text())


def requirement_lines(program: Path) -> list[str]:
    lines = [line.split("#", 1)[0].strip() for line in (program / "requirements.txt").read_text().splitlines()]
    return [line for line in lines if line]


def check_project(repo: Path) -> tuple[Path, Path]:
    """(virtualenv, program folder) of the repo's Pulumi.yaml, checked as the engine reads them."""
    project = pulumi_project(repo)
    assert project["runtime"]["name"] == "python"
    options = project["runtime"]["options"]
    assert options["toolchain"] == "pip"
    venv, program = Path(options["virtualenv"]), Path(project["main"])
    # The language host resolves both against the folder of Pulumi.yaml; absolute, they hold anywhere.
    assert venv.is_absolute() and (venv / "bin" / "python").exists()
    assert program.is_absolute() and program.is_dir()
    for wanted in ("__main__.py", "requirements.txt", "components/site.py", "providers/playbook.py"):
        assert (program / wanted).is_file(), wanted
    return venv, program


def pip_dry_run(python: Path, program: Path) -> subprocess.CompletedProcess:
    """`pulumi install`'s pip, in the program folder, offline: only what is installed may satisfy it."""
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run", "--no-index",
                           "--disable-pip-version-check", "-r", "requirements.txt"],
                          cwd=program, capture_output=True, text=True, timeout=300)


def test_the_init_repos_program_names_requirements_pip_can_install_without_a_source_tree(tmp_path: Path):
    assert main(["init", str(tmp_path / "sites")]) == 0
    venv, program = check_project(tmp_path / "sites")
    lines = requirement_lines(program)
    for line in lines:  # no -e, -c, -r or path: the wheel ships neither the repo nor its lock
        try:
            Requirement(line)
        except InvalidRequirement:
            pytest.fail(f"{program / 'requirements.txt'}: {line!r} is not a plain requirement")
    done = pip_dry_run(venv / "bin" / "python", program)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_packaged_program_requires_rackform_with_its_pulumi_extra_at_this_version():
    (line,) = requirement_lines(REPO / "rackform" / "_assets" / "stacks")
    wanted = Requirement(line)
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert (wanted.name, wanted.extras, str(wanted.specifier)) == ("rackform", {"pulumi"}, f"=={version}")
    assert importlib.metadata.version("rackform") == version
    assert "pulumi" in (importlib.metadata.metadata("rackform").get_all("Provides-Extra") or [])


def test_the_checkouts_program_is_the_packaged_one():
    """One program: the packaged folder's code is the checkout's stacks/ (links), only its
    requirements.txt differs."""
    packaged = REPO / "rackform" / "_assets" / "stacks"
    for name in ("__main__.py", "components", "providers"):
        assert (packaged / name).resolve() == (REPO / "stacks" / name).resolve()
    assert not (packaged / "requirements.txt").is_symlink()


@pytest.mark.slow
def test_pulumi_install_of_an_init_repo_from_the_wheel(installed_rackform, tmp_path: Path):
    """rackform from its wheel: the program folder is inside site-packages, and its requirements
    are satisfied by the installed distribution."""
    done = installed_rackform.run("init", "sites", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    venv, program = check_project(tmp_path / "sites")
    assert "site-packages" in str(program) and not str(program).startswith(str(REPO))
    done = pip_dry_run(venv / "bin" / "python", program)
    assert done.returncode == 0, done.stdout + done.stderr
