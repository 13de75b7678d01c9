"""The fabric stage's playbook and roles as rendered into a project: which play runs which
role where, role conventions, and (slow) ansible-lint's production profile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rackform.model.loader import load_site
from rackform.render import render_files, write_project

ROOT = Path(__file__).resolve().parents[2]
FABRIC_ROLES = ("switch_baseline", "roce_host")


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return render_files(load_site("lab", ROOT))


def test_fabric_stage_configures_cumulus_switches_then_servers(files):
    plays = yaml.safe_load(files["fabric.yml"])
    assert [(play["hosts"], [role["role"] for role in play["roles"]]) for play in plays] == [
        ("cumulus", ["switch_baseline"]), ("servers", ["roce_host"])]


def test_a_failing_switch_stops_every_switch(files):
    assert yaml.safe_load(files["fabric.yml"])[0]["any_errors_fatal"] is True


@pytest.mark.parametrize("role", FABRIC_ROLES)
def test_role_defaults_are_prefixed_with_the_role_name(files, role):
    defaults = yaml.safe_load(files[f"roles/{role}/defaults/main.yml"])
    assert [name for name in defaults if not name.startswith(f"{role}_")] == []


def test_roce_host_internal_vars_are_prefixed(files):
    internal = yaml.safe_load(files["roles/roce_host/vars/main.yml"])
    assert [name for name in internal if not name.startswith("roce_host_")] == []


@pytest.mark.parametrize("role", FABRIC_ROLES)
def test_every_task_is_named(files, role):
    unnamed = []
    for path in (p for p in files if p.startswith(f"roles/{role}/tasks/")):
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
         *(f"roles/{role}" for role in FABRIC_ROLES)],
        cwd=project, env=environment, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("template", ["servers.intf.j2", "qos_features.conf.j2", "port-settings.sh.j2"])
def test_ansible_renders_the_template_as_the_cumulus_driver_does(tmp_path, files, template):
    """The same template through Ansible's templating and through the driver's (plain Jinja)."""
    from rackform.fabric.context import Credentials, connection_for, switch_targets
    from rackform.fabric.cumulus import CumulusDriver
    from rackform.render.switch_configs import CUMULUS_FILES, cumulus_path

    project = tmp_path / "lab"
    write_project(files, project)
    deployed = tmp_path / "deployed"
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1"}
    result = subprocess.run(
        ["ansible", "leaf-1", "-m", "ansible.builtin.template",
         "-a", f"src=roles/switch_baseline/templates/{template} dest={deployed}",
         "-e", "@roles/switch_baseline/defaults/main.yml", "-e", "ansible_connection=local",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=project, env=environment, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    target = switch_targets(load_site("lab", ROOT), ["leaf-1"])["leaf-1"]
    part = next(part for part in CUMULUS_FILES if part.template == template)
    pushed = CumulusDriver(connection_for(target, Credentials()), "leaf-1").render(target.context)
    assert deployed.read_text() == pushed[cumulus_path(part, target.context)]
