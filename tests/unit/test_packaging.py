"""rackform as an installed tool: a wheel built from this repo, installed into a fresh
virtualenv outside the checkout, starts a site repo of its own and renders it.

The fresh venv gets its dependencies from this repo's .venv through a plain path entry
(no network, and the checkout's editable rackform stays invisible: its import hook is
only activated from a site directory, which that entry is not); rackform itself comes
from the wheel. What is checked runs in a folder outside the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from rackform.collection import PROJECT_DIR

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # A copy of the checkout without build/ and .venv/: what a clone holds.
    source = tmp_path_factory.mktemp("source") / "rackform"
    shutil.copytree(REPO, source, symlinks=True,
                    ignore=shutil.ignore_patterns(".venv", "build", ".git", "__pycache__", ".pytest_cache", "state"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
                   check=True, capture_output=True, text=True, timeout=600)
    (built,) = out.glob("rackform-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> Path:
    """A fresh venv with the wheel in it; its bin folder."""
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    venv.create(env_dir, with_pip=False)
    purelib = Path(subprocess.run([env_dir / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    (purelib / "dependencies-from-the-dev-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(purelib)
    script = env_dir / "bin" / "rackform"
    script.write_text(f"#!{env_dir / 'bin' / 'python'}\nimport sys\nfrom rackform.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return env_dir / "bin"


def run(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(bin_dir / "rackform"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_wheel_carries_roles_templates_catalog_and_host_checks(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    for wanted in ("rackform/_assets/roles/base_os/tasks/main.yml", "rackform/_assets/templates/playbooks/os.yml.j2",
                   "rackform/_assets/plugins/modules/ipmi.py", "rackform/_assets/plugins/module_utils/rackform_ipmi_lan.py",
                   "rackform/_assets/templates/collection/galaxy.yml.j2", "rackform/_assets/CHANGELOG.md",
                   "rackform/_assets/topologies/blocks/dgx-h100.yaml", "rackform/_assets/topologies/versions.yaml",
                   "rackform/_assets/infra/conftest.py", "rackform/_assets/stacks/__main__.py"):
        assert wanted in names
    assert not [name for name in names if "/.venv/" in name or "__pycache__" in name]


@pytest.fixture(scope="module")
def site_repo(installed: Path, tmp_path_factory) -> Path:
    outside = tmp_path_factory.mktemp("elsewhere")
    done = run(installed, "init", "sites", cwd=outside)
    assert done.returncode == 0, done.stderr
    return outside / "sites"


def test_the_installed_tool_is_the_wheel_not_the_checkout(installed: Path, site_repo: Path):
    done = subprocess.run([installed / "python", "-c", "import rackform; print(rackform.__file__)"],
                          capture_output=True, text=True, cwd=site_repo)
    assert not done.stdout.startswith(str(REPO)) and "site-packages" in done.stdout


def test_init_makes_a_repo_that_validates_and_renders(installed: Path, site_repo: Path):
    assert run(installed, "validate", "edge", cwd=site_repo).returncode == 0
    rendered = run(installed, "render", "edge", cwd=site_repo)
    assert rendered.returncode == 0, rendered.stderr
    assert (site_repo / "build/edge" / PROJECT_DIR / "roles/base_os/tasks/main.yml").is_file()
    assert (site_repo / "build/edge" / PROJECT_DIR / "plugins/modules/ipmi.py").is_file()
    assert (site_repo / "build/edge/os.yml").is_file()


def test_the_rendered_project_passes_ansible_lint(installed: Path, site_repo: Path):
    run(installed, "render", "edge", cwd=site_repo)
    lint = subprocess.run([Path(sys.executable).parent / "ansible-lint", "--offline", "--profile", "production",
                           "--nocolor"], cwd=site_repo / "build/edge", capture_output=True, text=True, timeout=600)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_a_block_of_the_repo_adds_to_the_built_in_catalog(installed: Path, site_repo: Path):
    builtin = site_repo / "topologies/blocks/hci-mini.yaml"
    source = (REPO / "topologies/blocks/hci.yaml").read_text()
    builtin.write_text(source.replace("name: hci", "name: hci-mini", 1))
    design = site_repo / "topologies/sites/edge.yaml"
    design.write_text(design.read_text().replace("block: hci,", "block: hci-mini,"))
    done = run(installed, "validate", "edge", cwd=site_repo)
    assert done.returncode == 0, done.stderr


def test_init_refuses_a_folder_that_holds_a_repo(installed: Path, site_repo: Path):
    done = run(installed, "init", str(site_repo), cwd=site_repo.parent)
    assert done.returncode == 2 and "already holds topologies" in done.stderr
