"""A role used from a plain playbook, outside rackform's render: a temp dir holding only the
role (and the roles it depends on) and a five-line playbook, run by ansible-playbook against
localhost. Also: every role names its inputs in defaults/main.yml, and the emitted project's
requirements.yml pins the collections the roles use at the releases the installed `ansible`
package bundles.

Slow (each test starts ansible-playbook): `pytest -m slow`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import ansible_collections
import pytest
import yaml

from rackform.paths import ROLES_DIR, TEMPLATES_DIR

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(path.name for path in ROLES_DIR.iterdir() if (path / "meta" / "main.yml").exists())
PLAYBOOK = """\
---
- name: Use one rackform role
  hosts: localhost
  gather_facts: false
  roles: [{role}]
"""


def plain_project(tmp_path: Path, role: str, *dependencies: str) -> Path:
    """The role and its dependencies under roles/, and site.yml naming only the role: nothing of rackform's render."""
    project = tmp_path / "plain"
    for name in (role, *dependencies):
        shutil.copytree(ROLES_DIR / name, project / "roles" / name)
    (project / "site.yml").write_text(PLAYBOOK.format(role=role))
    return project


def playbook(project: Path, *arguments: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "ANSIBLE_LOCAL_TEMP": str(project / ".ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    })
    command = ["ansible-playbook", "-i", "localhost,", "-c", "local",
               "-e", f"ansible_python_interpreter={sys.executable}", "site.yml", *arguments]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_k8s_prereqs_from_a_plain_playbook_checks_without_changing(tmp_path):
    project = plain_project(tmp_path, "k8s_prereqs", "host_state")
    defaults = yaml.safe_load((ROLES_DIR / "k8s_prereqs" / "defaults" / "main.yml").read_text())
    written = [Path(defaults["k8s_prereqs_modules_file"]), Path(defaults["k8s_prereqs_sysctl_file"])]
    before = {path: path.exists() for path in written}

    syntax = playbook(project, "--syntax-check")
    checked = playbook(project, "--check")

    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert re.search(r"localhost\s*: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", checked.stdout), checked.stdout
    assert {path: path.exists() for path in written} == before


@pytest.mark.slow
def test_base_os_from_a_plain_playbook_passes_the_syntax_check(tmp_path):
    """Syntax only: its handlers restart systemd units, which a container without systemd
    (this test's machine) cannot answer for, even in check mode."""
    project = plain_project(tmp_path, "base_os", "host_state")
    (project / "files").mkdir()
    (project / "files" / "etc_hosts").write_text("127.0.0.1 localhost\n")

    syntax = playbook(project, "--syntax-check")

    assert syntax.returncode == 0, syntax.stdout + syntax.stderr


@pytest.mark.slow
def test_gpu_node_from_a_plain_playbook_runs_for_real(tmp_path):
    project = plain_project(tmp_path, "gpu_node")
    absent = f"gpu_node_nvidia_smi={tmp_path / 'no-nvidia-smi'}"

    skipped = playbook(project, "-e", absent)
    required = playbook(project, "-e", absent, "-e", "gpu_node_require_gpus=true")

    assert skipped.returncode == 0 and "GPU checks SKIPPED on localhost" in skipped.stdout, skipped.stdout + skipped.stderr
    assert required.returncode == 2 and "gpu_node_require_gpus is set" in required.stdout, required.stdout


@pytest.mark.slow
def test_validate_inventory_from_a_plain_playbook_refuses_a_former_kube_name(tmp_path):
    project = plain_project(tmp_path, "validate_inventory")
    machine = {"ansible_host": "127.0.0.1", "management_address": "127.0.0.1", "rack_name": "r1", "rack_position_u": 1,
               "site_name": "plain", "site_domain": "plain.test", "site_timezone": "Etc/UTC",
               "site_etc_hosts_block": "", "fabric_roce_priority": 3, "fabric_roce_dscp": 26}
    (project / "machine.yml").write_text(yaml.safe_dump(machine))

    valid = playbook(project, "-e", "@machine.yml")
    renamed = playbook(project, "-e", "@machine.yml", "-e", "kube_cni=calico")

    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert renamed.returncode == 2 and "renamed: kube_cni: use kube_network_plugin" in renamed.stdout, renamed.stdout


@pytest.mark.parametrize("role", ROLES)
def test_every_role_names_its_settings_in_defaults(role):
    text = (ROLES_DIR / role / "defaults" / "main.yml").read_text()

    assert text.startswith("---\n# "), f"roles/{role}/defaults/main.yml must open with a comment saying what the role does"
    assert isinstance(yaml.safe_load(text), dict)


def _requirements() -> dict[str, str]:
    data = yaml.safe_load((TEMPLATES_DIR / "project" / "requirements.yml.j2").read_text())
    return {entry["name"]: entry["version"] for entry in data["collections"]}


def test_requirements_pin_the_collections_the_installed_ansible_bundles():
    bundled = Path(next(iter(ansible_collections.__path__)))
    installed = {}
    for name in _requirements():
        manifest = json.loads((bundled / name.replace(".", "/") / "MANIFEST.json").read_text())
        installed[name] = manifest["collection_info"]["version"]

    assert _requirements() == installed


def test_requirements_name_every_collection_the_roles_use():
    used = set()
    for path in ROLES_DIR.rglob("*"):
        if path.suffix in (".yml", ".j2") and path.is_file():
            used |= set(re.findall(r"\b(community\.[a-z_]+|ansible\.(?!builtin\b|module_utils\b)[a-z_]+)\.[a-z_]+", path.read_text()))

    assert used and used <= set(_requirements()), sorted(used - set(_requirements()))
