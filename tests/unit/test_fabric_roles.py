"""The fabric stage's playbook and roles as rendered into a project: which play runs which
role where, role conventions, and (slow) ansible-lint's production profile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hang_limit import SUBPROCESS_HANG_S
from rackform.model.loader import load_site
from rackform.render.project import render_files
from rackform.render.writer import write_project
from rackform.collection import short_name
from collection_support import ROLES_IN_PROJECT

ROOT = Path(__file__).resolve().parents[2]
FABRIC_ROLES = ("switch_baseline", "onyx_switch", "roce_host")


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return render_files(load_site("lab", ROOT))


def test_fabric_stage_configures_cumulus_and_onyx_switches_then_servers(files):
    plays = yaml.safe_load(files["fabric.yml"])
    assert [(play["hosts"], [short_name(role["role"]) for role in play["roles"]]) for play in plays] == [
        ("cumulus", ["switch_baseline"]), ("onyx", ["onyx_switch"]), ("servers", ["roce_host"])]


@pytest.mark.parametrize("group", ["cumulus", "onyx"])
def test_a_failing_switch_stops_every_switch(files, group):
    play = next(play for play in yaml.safe_load(files["fabric.yml"]) if play["hosts"] == group)
    assert play["any_errors_fatal"] is True


def test_onyx_play_runs_its_module_on_the_controller_with_ansibles_python(files):
    play = next(play for play in yaml.safe_load(files["fabric.yml"]) if play["hosts"] == "onyx")
    assert play["vars"] == {"ansible_connection": "ansible.builtin.local",
                            "ansible_python_interpreter": "{{ ansible_playbook_python }}", "ansible_become": False}


@pytest.mark.parametrize("role", FABRIC_ROLES)
def test_role_defaults_are_prefixed_with_the_role_name(files, role):
    defaults = yaml.safe_load(files[f"{ROLES_IN_PROJECT}{role}/defaults/main.yml"])
    assert [name for name in defaults if not name.startswith(f"{role}_")] == []


def test_roce_host_internal_vars_are_prefixed(files):
    internal = yaml.safe_load(files[f"{ROLES_IN_PROJECT}roce_host/vars/main.yml"])
    assert [name for name in internal if not name.startswith("roce_host_")] == []


@pytest.mark.parametrize("role", FABRIC_ROLES)
def test_every_task_is_named(files, role):
    unnamed = []
    for path in (p for p in files if p.startswith(f"{ROLES_IN_PROJECT}{role}/tasks/")):
        unnamed += [f"{path}: {task}" for task in yaml.safe_load(files[path]) if "name" not in task]
    assert unnamed == []


@pytest.mark.slow
def test_fabric_roles_pass_ansible_lint_production_profile(tmp_path, files):
    project = tmp_path / "lab"
    write_project(files, project)
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1"}
    result = subprocess.run(
        ["ansible-lint", "--offline", "--profile", "production", "--nocolor", "fabric.yml",
         *(f"{ROLES_IN_PROJECT}{role}" for role in FABRIC_ROLES)],
        cwd=project, env=environment, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def ansible_template(project: Path, host: str, template: str, deployed: Path) -> None:
    """Render a role template for `host` with Ansible's own templating (the template module)."""
    role = template.split("/")[0]
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   "ANSIBLE_LOCAL_TEMP": str(deployed.parent / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1"}
    result = subprocess.run(
        ["ansible", host, "-m", "ansible.builtin.template", "-a", f"src={ROLES_IN_PROJECT}{template} dest={deployed}",
         "-e", f"@{ROLES_IN_PROJECT}{role}/defaults/main.yml", "-e", "ansible_connection=local",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=project, env=environment, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("template", ["servers.intf.j2", "qos_features.conf.j2", "port-settings.sh.j2"])
def test_ansible_renders_the_cumulus_template_as_the_review_file_shows_it(tmp_path, files, template):
    """The same template through Ansible's templating and through rackform's review renderer (plain Jinja)."""
    from rackform.render.groups import host_groups
    from rackform.render.project import build_inventory
    from rackform.render.switch_configs import CUMULUS_FILES, cumulus_file_text, switch_context

    project = tmp_path / "lab"
    write_project(files, project)
    deployed = tmp_path / "deployed"
    ansible_template(project, "leaf-1", f"switch_baseline/templates/{template}", deployed)
    inventory = build_inventory(load_site("lab", ROOT))
    context = switch_context("leaf-1", host_groups(inventory.tree)["leaf-1"], inventory.group_vars,
                             inventory.switch_vars["leaf-1"], inventory.server_vars)
    part = next(part for part in CUMULUS_FILES if part.template == template)
    assert deployed.read_text() == cumulus_file_text(part, context)


@pytest.mark.slow
def test_ansible_renders_the_onyx_template_as_the_review_file_shows_it(tmp_path):
    """What the onyx_switch role pushes (its template, through Ansible) is switch_configs/<switch>.onyx.conf."""
    files = render_files(load_site("reference", ROOT))
    project = tmp_path / "reference"
    write_project(files, project)
    deployed = tmp_path / "deployed"
    ansible_template(project, "leaf-1", "onyx_switch/templates/onyx.conf.j2", deployed)
    assert deployed.read_text() == files["switch_configs/leaf-1.onyx.conf"].decode()
