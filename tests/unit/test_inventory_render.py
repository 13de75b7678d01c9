"""The rendered inventory carries every variable and group of the site's inventory: checked with the
real `ansible-inventory --list` (from .venv/bin) on the rendered project."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rackform.checks.runner import run_checks
from rackform.model.loader import load_site
from rackform.render.project import render_files
from rackform.render.writer import write_project
from rackform.render import yamltext

ROOT = Path(__file__).resolve().parents[2]
HOSTS_YML = """\
all:
  vars:
    http_proxy: http://proxy.lab:3128
  hosts:
    mgmt-1:
    mgmt-2:
    mgmt-3:
    stor-1:
    gpu-1:
      ansible_port: 2222
    gpu-2:
    leaf-1:
    leaf-2:
    spine-1:
  children:
    canary:
      hosts:
        gpu-1:
      vars:
        rollout_wave: 1
      children:
        storage:
    gpu:
      vars:
        nccl_debug: INFO
    nightly:
      children:
        canary:
"""


@pytest.fixture(scope="module")
def user_site(tmp_path_factory):
    """The lab with an inventory that uses what Ansible offers: inline, file and folder variables, groups."""
    root = tmp_path_factory.mktemp("inputs")
    for folder in ("topologies", "inventories"):
        shutil.copytree(ROOT / folder, root / folder)
    inventory = root / "inventories" / "lab"

    def write(relative: str, text: str, append: bool = False) -> None:
        path = inventory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((path.read_text() if append else "") + text)

    write("hosts.yml", HOSTS_YML)
    write("host_vars/gpu-1.yml", "ansible_user: admin\nmaintenance_window: 2026-01-31\n", append=True)
    write("host_vars/gpu-2/tuning.yml", "gpu_clock_ratio: 0.85\nlimits: {nofile: 65536}\n")
    write("group_vars/gpu.yml", 'cuda_version: "12.4"\n')
    write("group_vars/gpu/nccl.yml", "nccl_socket_ifname: [fab0, fab1]\n")
    write("group_vars/cumulus.yml", "ansible_connection: paramiko\n")
    write("group_vars/all.yml", "no_proxy: localhost\n", append=True)
    return load_site("lab", root)


@pytest.fixture(scope="module")
def rendered(user_site):
    return render_files(user_site)


@pytest.fixture(scope="module")
def listed(rendered, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("project") / "lab"
    write_project(rendered, out)
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible-inventory"), "-i", str(out / "inventory"), "--list"],
        capture_output=True, text=True, cwd=out, check=True,
        env={**os.environ, "ANSIBLE_LOCAL_TEMP": str(out / ".tmp"), "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"},
    )
    return json.loads(result.stdout)


def members(listed: dict, group: str) -> set[str]:
    entry = listed.get(group, {})
    found = set(entry.get("hosts", ()))
    for child in entry.get("children", ()):
        found |= members(listed, child)
    return found


def test_the_inventory_passes_the_checks(user_site):
    assert [str(f) for f in run_checks(user_site) if f.severity == "error"] == []


def test_host_variables_reach_ansible(listed):
    gpu_1 = listed["_meta"]["hostvars"]["gpu-1"]
    assert gpu_1["ansible_port"] == 2222 and gpu_1["ansible_user"] == "admin"
    assert str(gpu_1["maintenance_window"]) == "2026-01-31"
    gpu_2 = listed["_meta"]["hostvars"]["gpu-2"]
    assert gpu_2["gpu_clock_ratio"] == 0.85 and gpu_2["limits"] == {"nofile": 65536}


def test_group_variables_of_every_form_reach_ansible(listed):
    for host in ("gpu-1", "gpu-2"):
        values = listed["_meta"]["hostvars"][host]
        assert values["cuda_version"] == "12.4" and values["nccl_socket_ifname"] == ["fab0", "fab1"]
        assert values["nccl_debug"] == "INFO"
    for host in ("mgmt-1", "leaf-1"):
        assert listed["_meta"]["hostvars"][host]["http_proxy"] == "http://proxy.lab:3128"
        assert listed["_meta"]["hostvars"][host]["no_proxy"] == "localhost"
    assert "cuda_version" not in listed["_meta"]["hostvars"]["mgmt-1"]


def test_user_groups_with_children_and_vars_reach_ansible(listed):
    assert members(listed, "canary") == {"gpu-1", "stor-1"}
    assert members(listed, "nightly") == {"gpu-1", "stor-1"}
    assert listed["_meta"]["hostvars"]["stor-1"]["rollout_wave"] == 1
    assert "rollout_wave" not in listed["_meta"]["hostvars"]["gpu-2"]


def test_generated_groups_and_variables_are_unchanged(listed):
    assert members(listed, "gpu") == {"gpu-1", "gpu-2"}
    gpu_1 = listed["_meta"]["hostvars"]["gpu-1"]
    assert gpu_1["ansible_host"] == "10.10.0.15" and gpu_1["host_role"] == "gpu"


def test_a_connection_default_set_for_the_same_group_replaces_rackforms(listed, rendered):
    assert listed["_meta"]["hostvars"]["leaf-1"]["ansible_connection"] == "paramiko"
    assert "inventory/group_vars/cumulus/connection.yml" not in rendered


def test_group_variables_are_written_once_per_group(rendered):
    gpu = yaml.safe_load(rendered["inventory/group_vars/gpu/inventory.yml"])
    assert gpu == {"nccl_debug": "INFO", "cuda_version": "12.4", "nccl_socket_ifname": ["fab0", "fab1"]}


def test_floats_and_dates_load_back_unchanged():
    data = {"ratio": 0.85, "big": 1e20, "small": -2e-7, "day": datetime.date(2026, 1, 31), "flat": [1.5, 2]}
    assert yaml.safe_load(yamltext.dump(data)) == data
