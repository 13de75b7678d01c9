"""rackform as an installed tool: a wheel built from this repo, installed into a fresh
virtualenv outside the checkout with only the dependencies its metadata names (as pip
installs them from PyPI), starts a site repo of its own, renders it, and verifies a large
site with parallel workers.

The wheel and the venv are tests/conftest.py's `rackform_wheel` and `installed_rackform`
(tests/wheel_venv.py; the lab suite deploys and verifies with the same install:
tests/lab/test_verify_lab.py). What is checked runs in a folder outside the checkout.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hang_limit import SUBPROCESS_HANG_S
from rackform.collection import PROJECT_DIR
from rackform.run.verify import auto_workers
from rackform.run.verify_inventory import EmittedInventory

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def run(tool, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return tool.run(*args, cwd=cwd, timeout_s=SUBPROCESS_HANG_S)


def test_the_wheel_carries_roles_templates_catalog_and_host_checks(rackform_wheel: Path):
    names = zipfile.ZipFile(rackform_wheel).namelist()
    for wanted in ("rackform/_assets/roles/base_os/tasks/main.yml", "rackform/_assets/templates/playbooks/os.yml.j2",
                   "rackform/_assets/plugins/modules/ipmi.py", "rackform/_assets/plugins/module_utils/rackform_ipmi_lan.py",
                   "rackform/_assets/templates/collection/galaxy.yml.j2", "rackform/_assets/CHANGELOG.md",
                   "rackform/_assets/LICENSE",
                   "rackform/_assets/topologies/blocks/dgx-h100.yaml", "rackform/_assets/topologies/versions.yaml",
                   "rackform/_assets/infra/conftest.py", "rackform/_assets/stacks/__main__.py",
                   "rackform/_assets/sources/kubernetes/1.36.3/go.mod",
                   "rackform/_assets/sources/kubernetes/1.36.3/go.sum"):
        assert wanted in names
    assert not [name for name in names if "/.venv/" in name or "__pycache__" in name]


@pytest.fixture(scope="module")
def site_repo(installed_rackform, tmp_path_factory) -> Path:
    outside = tmp_path_factory.mktemp("elsewhere")
    done = run(installed_rackform, "init", "sites", cwd=outside)
    assert done.returncode == 0, done.stderr
    return outside / "sites"


def test_the_installed_tool_is_the_wheel_not_the_checkout(installed_rackform, site_repo: Path):
    done = subprocess.run([installed_rackform.bin_dir / "python", "-c", "import rackform; print(rackform.__file__)"],
                          capture_output=True, text=True, cwd=site_repo)
    assert not done.stdout.startswith(str(REPO)) and "site-packages" in done.stdout


def test_init_makes_a_repo_that_validates_and_renders(installed_rackform, site_repo: Path):
    assert run(installed_rackform, "validate", "edge", cwd=site_repo).returncode == 0
    rendered = run(installed_rackform, "render", "edge", cwd=site_repo)
    assert rendered.returncode == 0, rendered.stderr
    assert (site_repo / "build/edge" / PROJECT_DIR / "roles/base_os/tasks/main.yml").is_file()
    assert (site_repo / "build/edge" / PROJECT_DIR / "plugins/modules/ipmi.py").is_file()
    assert (site_repo / "build/edge/os.yml").is_file()


def test_the_rendered_project_passes_ansible_lint(installed_rackform, site_repo: Path):
    run(installed_rackform, "render", "edge", cwd=site_repo)
    lint = subprocess.run([Path(sys.executable).parent / "ansible-lint", "--offline", "--profile", "production",
                           "--nocolor"], cwd=site_repo / "build/edge", capture_output=True, text=True,
                          timeout=SUBPROCESS_HANG_S)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_a_block_of_the_repo_adds_to_the_built_in_catalog(installed_rackform, site_repo: Path):
    builtin = site_repo / "topologies/blocks/hci-mini.yaml"
    source = (REPO / "topologies/blocks/hci.yaml").read_text()
    builtin.write_text(source.replace("name: hci", "name: hci-mini", 1))
    design = site_repo / "topologies/sites/edge.yaml"
    design.write_text(design.read_text().replace("block: hci,", "block: hci-mini,"))
    done = run(installed_rackform, "validate", "edge", cwd=site_repo)
    assert done.returncode == 0, done.stderr


def test_init_refuses_a_folder_that_holds_a_repo(installed_rackform, site_repo: Path):
    done = run(installed_rackform, "init", str(site_repo), cwd=site_repo.parent)
    assert done.returncode == 2 and "already holds topologies" in done.stderr


def test_the_venv_holds_only_what_the_wheel_asks_for(installed_rackform):
    """No path into the development venv: rackform's dependencies come from its metadata."""
    done = subprocess.run([installed_rackform.bin_dir / "python", "-c", "import sys; print('\\n'.join(sys.path))"],
                          capture_output=True, text=True, check=True)
    assert str(Path(sys.prefix)) not in done.stdout


def test_verify_runs_a_large_site_with_parallel_workers(installed_rackform, tmp_path_factory, monkeypatch):
    """A site of 32 machines or more runs its checks on pytest-xdist workers (`-n`): the wheel
    must bring pytest-xdist. The shipped campus site is rendered and verified by the installed
    tool against machines that cannot answer (ssh's ProxyCommand fails at once: nothing goes
    on the network). Every machine is then reported unreachable, which takes a pytest that
    accepted -n and ran the checks; without pytest-xdist, pytest refuses -n (exit 2)."""
    outside = tmp_path_factory.mktemp("large-site")
    assert run(installed_rackform, "init", "sites", "--example", "campus", cwd=outside).returncode == 0
    repo = outside / "sites"
    rendered = run(installed_rackform, "render", "campus", cwd=repo)
    assert rendered.returncode == 0, rendered.stderr
    machines = len(EmittedInventory(repo / "build/campus/inventory/hosts.yml").hosts)
    assert machines >= 32 and auto_workers(machines) > 1

    monkeypatch.setenv("ANSIBLE_SSH_EXTRA_ARGS", "-o ProxyCommand=false")
    # One quick check per machine is enough to see that the workers ran.
    done = run(installed_rackform, "verify", "campus", "--stage", "os", "-k", "hostname_is_inventory_name", cwd=repo)
    output = done.stdout + done.stderr
    assert "unrecognized arguments" not in output and done.returncode == 1, output
    assert f"verifying {machines} machines of campus" in done.stdout
    summary = re.search(r"^verify campus: (\d+) machines, 0 passed, (\d+) failed", done.stdout, re.MULTILINE)
    assert summary and int(summary[1]) > 1, output
    unreachable = [line for line in done.stdout.splitlines() if " unreachable: " in line and "checks not run" in line]
    assert len(unreachable) == int(summary[1]) and "  FAIL " not in done.stdout, output
