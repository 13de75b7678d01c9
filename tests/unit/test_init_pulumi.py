"""The Pulumi project `rackform init` writes: what the engine reads from its Pulumi.yaml, that it
names no path of the machine (the repo is committed and cloned elsewhere), that its program
folder `stacks/` reaches the installed rackform's program by the names the engine imports, and
that `pulumi install` (pip, in that folder, on its requirements.txt) is satisfied by the
installed rackform.

pip is run as the python language host runs it (in the program folder, with the python on PATH),
in --dry-run without an index, so only what is already installed counts. The real engine runs a
preview of an init repo, cloned to another folder, when `make pulumi` has built it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from engine_stack import PASSPHRASE, PULUMI, engine_missing
from packaging.requirements import InvalidRequirement, Requirement

from rackform.cli import main
from rackform.paths import ASSETS_DIR, PACKAGE_DIR

REPO = Path(__file__).resolve().parents[2]
PROGRAM_MODULES = ("components.site", "components.stages", "providers.playbook", "providers.baremetal",
                   "providers.switch_config")
"""Modules of the program the engine imports by name: the program's, and the provider host's
(the state names each dynamic provider's class by its module)."""


def pulumi_project(repo: Path) -> dict:
    return yaml.safe_load((repo / "Pulumi.yaml").read_text())


def requirement_lines(program: Path) -> list[str]:
    lines = [line.split("#", 1)[0].strip() for line in (program / "requirements.txt").read_text().splitlines()]
    return [line for line in lines if line]


def check_project(repo: Path) -> Path:
    """The program folder of the repo's Pulumi.yaml, checked as the engine reads it."""
    project = pulumi_project(repo)
    assert project["runtime"]["name"] == "python"
    options = project["runtime"]["options"]
    assert options["toolchain"] == "pip"
    # No virtualenv: the python on PATH runs the program, wherever the repo is cloned.
    assert "virtualenv" not in options
    main_folder = Path(project["main"])
    assert not main_folder.is_absolute(), project["main"]
    program = repo / main_folder
    assert program.resolve().is_relative_to(repo.resolve()) and program.is_dir()
    for wanted in ("__main__.py", "requirements.txt", "components/__init__.py", "providers/__init__.py"):
        assert (program / wanted).is_file(), wanted
    return program


def machine_paths(*more: Path) -> list[str]:
    """Paths of this machine an init repo must not name: the python, its environment, the
    installed package, this checkout, the folder the repo was made in."""
    found = {sys.prefix, sys.base_prefix, sys.executable, str(Path(sys.executable).resolve().parent), str(PACKAGE_DIR),
             str(PACKAGE_DIR.parent), str(REPO), *map(str, more)}
    return sorted(found, key=len, reverse=True)


def pip_dry_run(python: Path, program: Path) -> subprocess.CompletedProcess:
    """`pulumi install`'s pip, in the program folder, offline: only what is installed may satisfy it."""
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run", "--no-index",
                           "--disable-pip-version-check", "-r", "requirements.txt"],
                          cwd=program, capture_output=True, text=True, timeout=300)


def program_module_files(python: Path, program: Path) -> dict[str, str]:
    """Module -> its file, as `python` imports them started in the program folder, as the engine
    starts the program and the dynamic-provider host (`python -m pulumi.dynamic`): the folder is
    the first entry of sys.path, nothing else is set."""
    probe = ("import importlib, json, sys\n"
             f"print(json.dumps({{name: importlib.import_module(name).__file__ for name in {PROGRAM_MODULES!r}}}))\n")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "RACKFORM_ROOT")}
    done = subprocess.run([str(python), "-c", probe], cwd=program, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def init_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("made-here") / "sites"
    assert main(["init", str(repo)]) == 0
    return repo


def test_the_init_repo_names_no_path_of_this_machine(init_repo: Path):
    unwanted = machine_paths(init_repo)
    for path in sorted(init_repo.rglob("*")):
        if ".git" in path.relative_to(init_repo).parts or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        named = [machine_path for machine_path in unwanted if machine_path in text]
        assert not named, f"{path.relative_to(init_repo)} names {named[0]}"


def test_the_init_repos_program_is_the_installed_one_under_the_names_the_engine_imports(init_repo: Path):
    program = check_project(init_repo)
    files = program_module_files(Path(sys.executable), program)
    for name, file in files.items():
        assert Path(file).resolve() == (ASSETS_DIR / "stacks" / (name.replace(".", "/") + ".py")).resolve(), name
    runs = (program / "__main__.py").read_text()
    assert 'runpy.run_path(str(ASSETS_DIR / "stacks" / "__main__.py"), run_name="__main__")' in runs


def test_the_init_repos_program_names_requirements_pip_can_install_without_a_source_tree(init_repo: Path):
    program = check_project(init_repo)
    lines = requirement_lines(program)
    for line in lines:  # no -e, -c, -r or path: the wheel ships neither the repo nor its lock
        try:
            wanted = Requirement(line)
        except InvalidRequirement:
            pytest.fail(f"{program / 'requirements.txt'}: {line!r} is not a plain requirement")
        assert (wanted.name, wanted.extras) == ("rackform", {"pulumi"})
    done = pip_dry_run(Path(sys.executable), program)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))
def test_a_clone_of_an_init_repo_previews_under_the_engine(tmp_path: Path):
    """Made, committed, cloned to another folder and the original removed, then previewed with
    the engine's own launcher on a bare PATH (it puts its environment's bin first): the program
    runs on the clone's sites, and every dynamic resource is checked by the provider host the
    engine starts in the clone's stacks/."""
    made, clone = tmp_path / "made" / "sites", tmp_path / "elsewhere" / "sites"
    assert main(["init", str(made)]) == 0
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "-C", str(made), "add", "-A"], check=True, timeout=60)
    subprocess.run([*git, "-C", str(made), "commit", "-q", "-m", "init"], check=True, timeout=60)
    subprocess.run([*git, "clone", "-q", str(made), str(clone)], check=True, timeout=60)
    shutil.rmtree(made)
    (tmp_path / "backend").mkdir()
    (tmp_path / "home").mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "RACKFORM_ROOT")}
    env.update(PATH="/usr/bin:/bin", PULUMI_HOME=str(tmp_path / "home"), PULUMI_SKIP_UPDATE_CHECK="true",
               PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)

    def pulumi(*args: str) -> str:
        done = subprocess.run([str(PULUMI), *args, "--non-interactive"], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, f"pulumi {' '.join(args)}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        return done.stdout

    pulumi("login", f"file://{tmp_path / 'backend'}")
    pulumi("stack", "init", "edge")
    preview = pulumi("preview", "-s", "edge")
    assert 'site      : "edge"' in preview
    assert "pulumi-python:dynamic/rackform:Playbook edge-provision" in preview


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
def test_an_init_repo_from_the_wheel_reaches_the_installed_program(installed_rackform, tmp_path: Path):
    """rackform from its wheel: the repo's stacks/ reaches the program inside site-packages,
    names no path of the machine, and pip is satisfied by the installed distribution."""
    done = installed_rackform.run("init", "sites", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    program = check_project(tmp_path / "sites")
    python = installed_rackform.bin_dir / "python"
    for name, file in program_module_files(python, program).items():
        assert "site-packages" in file and not Path(file).resolve().is_relative_to(REPO), (name, file)
    unwanted = [str(installed_rackform.bin_dir.parent), str(tmp_path)]
    for path in sorted((tmp_path / "sites").rglob("*")):
        if path.is_file() and ".git" not in path.relative_to(tmp_path / "sites").parts:
            assert not [named for named in unwanted if named in path.read_text()], path
    done = pip_dry_run(python, program)
    assert done.returncode == 0, done.stdout + done.stderr
