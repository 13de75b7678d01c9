"""Kubespray's variable and group names: rendered, read by the roles, and the former names refused
at their file:line (rackform/model/kubespray_names.py, docs/kubernetes.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rackform.checks.runner import run_checks
from rackform.cli import main
from rackform.model.kubespray_names import RENAMED_VARIABLES
from rackform.model.loader import load_site
from rackform.render.project import render_files
from rackform.model.source import BadInput
from collection_support import ROLES_IN_PROJECT

ROOT = Path(__file__).resolve().parents[2]
GPU_1 = "inventories/lab/host_vars/gpu-1.yml"


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return render_files(load_site("lab", ROOT))


def load_errors(lab_files) -> list[str]:
    with pytest.raises(BadInput) as caught:
        lab_files.load()
    return [str(error) for error in caught.value.errors]


def test_kubernetes_group_vars_use_kubespray_names(files):
    kube = yaml.safe_load(files["inventory/group_vars/k8s_cluster/kubernetes.yml"])
    cni = yaml.safe_load(files["inventory/group_vars/k8s_cluster/cni.yml"])

    assert {key: kube[key] for key in ("kube_version", "kube_pods_subnet", "kube_service_addresses",
                                        "kube_network_plugin", "kube_vip_address")} == {
        "kube_version": "1.36.1", "kube_pods_subnet": "10.244.0.0/16", "kube_service_addresses": "10.96.0.0/12",
        "kube_network_plugin": "kube-router", "kube_vip_address": "10.10.0.5"}
    assert (cni["calico_version"], cni["multus_version"]) == ("v3.30.0", "v4.2.0")


def test_etcd_group_is_the_control_plane(files):
    groups = yaml.safe_load(files["inventory/hosts.yml"])["all"]["children"]
    control_plane = groups["k8s_cluster"]["children"]["kube_control_plane"]["hosts"]

    assert list(groups["etcd"]["hosts"]) == list(control_plane) == ["mgmt-1", "mgmt-2", "mgmt-3"]


def test_no_former_name_is_left_in_the_emitted_project(files):
    """Only validate_inventory, which refuses them, still names them."""
    former = re.compile(r"\b(" + "|".join(RENAMED_VARIABLES) + r")\b")
    found = sorted(path for path, text in files.items()
                   if not path.startswith(f"{ROLES_IN_PROJECT}validate_inventory/") and former.search(text.decode(errors="replace")))

    assert found == []


def test_validate_inventory_role_refuses_the_same_names():
    defaults = yaml.safe_load((ROOT / "roles/validate_inventory/defaults/main.yml").read_text())

    assert defaults["validate_inventory_renamed_variables"] == {old: new for old, (new, _) in RENAMED_VARIABLES.items()}


def test_former_name_in_group_vars_is_refused_at_its_line(lab_files):
    lab_files.write("inventories/lab/group_vars/k8s_cluster.yml", "x: 1\nkube_pod_prefix: 10.32.0.0/16\n")

    (error,) = load_errors(lab_files)

    assert error == ("inventories/lab/group_vars/k8s_cluster.yml:2: kube_pod_prefix: renamed: use kube_pods_subnet "
                     "(Kubespray's name); rackform writes it from kubernetes.pod_prefix, so set that instead")


def test_former_name_in_host_vars_is_refused_at_its_line(lab_files):
    lines = lab_files.read(GPU_1).count("\n")
    lab_files.write(GPU_1, lab_files.read(GPU_1) + "kube_api_vip: 10.10.0.9\n")

    (error,) = load_errors(lab_files)

    assert error.startswith(f"{GPU_1}:{lines + 1}: kube_api_vip: renamed: use kube_vip_address (Kubespray's name)")


def test_former_name_makes_validate_exit_2(lab_files, capsys):
    lab_files.write("inventories/lab/group_vars/all.yml", lab_files.read("inventories/lab/group_vars/all.yml") + "kube_cni: cilium\n")

    assert main(["validate", "lab", "--root", str(lab_files.root)]) == 2
    assert "kube_cni: renamed: use kube_network_plugin" in capsys.readouterr().err


def test_kubespray_name_set_in_the_inventory_is_refused_as_rendered(lab_files):
    """The new names are rackform's to write (from the design), like kube_version."""
    lab_files.write("inventories/lab/group_vars/k8s_cluster.yml", "kube_pods_subnet: 10.32.0.0/16\n")

    lines = [str(finding) for finding in run_checks(lab_files.load()) if finding.check == "inventory_variables"]

    assert len(lines) == 1 and "rackform writes 'kube_pods_subnet' itself" in lines[0], lines
