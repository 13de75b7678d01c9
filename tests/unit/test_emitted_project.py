"""The emitted project as Ansible itself sees it: syntax, lint, a real run of validate.yml.

Slow (each test starts ansible-playbook or ansible-lint): `pytest -m slow`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hang_limit import SUBPROCESS_HANG_S
from rackform.model.loader import load_site
from rackform.pipeline import STAGES
from rackform.render.project import render_files
from rackform.render.writer import write_project
from rackform.render.writer import existing_files
from rackform.collection import PROJECT_DIR

ROOT = Path(__file__).parents[2]
PLAYBOOKS = ["site.yml", "validate.yml"] + [stage.playbook for stage in STAGES if stage.playbook]


def playbooks_of(project: Path) -> list[str]:
    """PLAYBOOKS the project has: a stage the site gives nothing to do has none (the reference site
    serves no data sets: no storage.yml)."""
    return [name for name in PLAYBOOKS if (project / name).exists()]

pytestmark = pytest.mark.slow


def ansible_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }


def run(command: list[str], project: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=project, env=ansible_env(tmp_path), capture_output=True, text=True,
                          timeout=SUBPROCESS_HANG_S)


def emit(site_name: str, out: Path) -> Path:
    write_project(render_files(load_site(site_name, ROOT)), out)
    return out


@pytest.fixture(scope="module")
def lab_project(tmp_path_factory) -> Path:
    return emit("lab", tmp_path_factory.mktemp("emitted") / "lab")


def test_every_playbook_passes_syntax_check(lab_project, tmp_path):
    assert playbooks_of(lab_project) == PLAYBOOKS
    result = run(["ansible-playbook", "--syntax-check", *PLAYBOOKS], lab_project, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_project_passes_ansible_lint_production_profile(lab_project, tmp_path):
    result = run(["ansible-lint", "--offline", "--profile", "production", "--nocolor"], lab_project, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(not (ROOT / "topologies" / "sites" / "reference.yaml").exists(), reason="no reference site yet")
def test_reference_site_playbooks_pass_syntax_check(tmp_path):
    project = emit("reference", tmp_path / "reference")
    assert "storage.yml" not in playbooks_of(project)
    result = run(["ansible-playbook", "--syntax-check", *playbooks_of(project)], project, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_validate_playbook_accepts_the_rendered_inventory(lab_project, tmp_path):
    result = run(["ansible-playbook", "validate.yml"], lab_project, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_validate_playbook_connects_to_no_onyx_switch(tmp_path):
    """Onyx switches are reached by rackform's modules only: validate must not connect to them."""
    root = tmp_path / "inputs"
    for folder in ("topologies", "inventories"):
        shutil.copytree(ROOT / folder, root / folder)
    design = root / "topologies" / "sites" / "lab.yaml"
    source = design.read_text().replace(
        "os: cumulus, fabric: compute, asn: 65102", "os: onyx, fabric: compute, asn: 65102"
    )
    design.write_text(source.replace("leaf-2:swp", "leaf-2:Eth1/"))
    project = tmp_path / "lab"
    write_project(render_files(load_site("lab", root)), project)
    result = run(["ansible-playbook", "validate.yml"], project, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_validate_playbook_rejects_a_host_without_management_address(lab_project, tmp_path):
    files = {relative: path.read_bytes() for relative, path in existing_files(lab_project).items()}
    host_vars = files["inventory/host_vars/gpu-2.yml"].decode().splitlines(keepends=True)
    files["inventory/host_vars/gpu-2.yml"] = "".join(
        line for line in host_vars if not line.startswith("management_address:")
    ).encode()
    project = tmp_path / "broken"
    write_project(files, project)
    result = run(["ansible-playbook", "validate.yml"], project, tmp_path)
    assert result.returncode != 0 and "gpu-2 lacks management_address" in result.stdout + result.stderr


def _switch_config_part(config: str, template: str) -> str:
    """The text the review file shows for one role template."""
    marker = f"(role rackform.site.switch_baseline, templates/{template})\n"
    part = config.split(marker, 1)[1]
    return part.split("\n## ---- ", 1)[0]


@pytest.mark.parametrize("template", ["interfaces.j2", "frr.conf.j2"])
def test_switch_config_shows_what_ansible_deploys(lab_project, tmp_path, template):
    deployed = tmp_path / "deployed"
    result = run(
        [
            "ansible",
            "leaf-1",
            "-m",
            "ansible.builtin.template",
            "-a",
            f"src={PROJECT_DIR}/roles/switch_baseline/templates/{template} dest={deployed}",
            "-e",
            "ansible_connection=local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
        ],
        lab_project,
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    config = (lab_project / "switch_configs" / "leaf-1.cumulus.conf").read_text()
    assert _switch_config_part(config, template) == deployed.read_text()
