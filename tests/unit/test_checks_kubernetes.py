"""Kubernetes checks: an odd control plane of management-plane hosts, spread over racks."""

from __future__ import annotations

import pytest

from rackform.checks.kubernetes import control_plane_count, control_plane_hosts, control_plane_spread
from rackform.model.source import Loc

CONTROL_PLANE = "control_plane: [mgmt-1, mgmt-2, mgmt-3]"
SECOND_RACK = """
  - name: r2
    power_budget_w: 10000
    devices:
      - {name: hci-2, block: hci, position_u: 1, hosts: [mgmt-4]}
"""
MGMT_4_VARS = """management_address: 10.10.0.17
bmc_address: 10.10.1.17
"""


def set_control_plane(lab_files, members: str) -> None:
    lab_files.edit_site(CONTROL_PLANE, f"control_plane: [{members}]")


def add_second_rack_with_mgmt_4(lab_files) -> None:
    lab_files.edit_site("\nnetworks:", SECOND_RACK + "\nnetworks:")
    lab_files.edit("inventories/lab/hosts.yml", "    mgmt-3:\n", "    mgmt-3:\n    mgmt-4:\n")
    lab_files.write("inventories/lab/host_vars/mgmt-4.yml", MGMT_4_VARS)


@pytest.mark.parametrize("k8s_check", [control_plane_count, control_plane_hosts, control_plane_spread])
def test_lab_control_plane_is_sound(lab_site, k8s_check):
    assert list(k8s_check(lab_site)) == []


@pytest.mark.parametrize("k8s_check", [control_plane_count, control_plane_hosts, control_plane_spread])
def test_site_without_kubernetes_is_not_checked(lab_files, k8s_check):
    text = lab_files.read("topologies/sites/lab.yaml").replace("extends: [roce, kubernetes]", "extends: [roce]")
    lab_files.write("topologies/sites/lab.yaml", text[: text.index("kubernetes:")])

    assert list(k8s_check(lab_files.load())) == []


def test_even_control_plane_is_an_error(lab_files):
    set_control_plane(lab_files, "mgmt-1, mgmt-2")
    site = lab_files.load()

    [finding] = control_plane_count(site)

    control_plane_line = Loc(site.kubernetes_loc.path, site.kubernetes_loc.line + 1)
    assert (finding.key, finding.loc) == ("kubernetes.control_plane", control_plane_line)
    assert "2 control-plane hosts (mgmt-1, mgmt-2): etcd needs an odd count" in finding.message


def test_host_listed_twice_is_an_error_and_counted_once(lab_files):
    set_control_plane(lab_files, "mgmt-1, mgmt-2, mgmt-2")

    messages = [f.message for f in control_plane_count(lab_files.load())]

    assert messages[0] == "mgmt-2 is listed 2 times; each control-plane host once"
    assert messages[1].startswith("2 control-plane hosts")


def test_more_than_seven_members_warns(lab_files):
    set_control_plane(lab_files, ", ".join(f"cp-{n}" for n in range(1, 10)))

    [finding] = control_plane_count(lab_files.load())

    assert finding.severity == "warning" and "9 control-plane hosts" in finding.message


def test_unknown_control_plane_host_suggests_a_management_host(lab_files):
    set_control_plane(lab_files, "mgmt-1, mgmt-2, mgmt-4")

    [finding] = control_plane_hosts(lab_files.load())

    assert "no host named 'mgmt-4' (did you mean 'mgmt-" in finding.message
    assert "management-plane hosts: mgmt-1, mgmt-2, mgmt-3" in finding.message


def test_control_plane_on_a_gpu_node_is_an_error(lab_files):
    set_control_plane(lab_files, "mgmt-1, mgmt-2, gpu-1")

    [finding] = control_plane_hosts(lab_files.load())

    assert finding.severity == "error"
    assert "gpu-1 is a gpu host (dgx-h100); the control plane runs on management_plane hosts" in finding.message


def test_control_plane_in_one_of_several_racks_warns(lab_files):
    add_second_rack_with_mgmt_4(lab_files)

    [finding] = control_plane_spread(lab_files.load())

    assert finding.severity == "warning"
    assert "all 3 control-plane hosts are in rack r1 of 2 racks" in finding.message


def test_control_plane_spread_over_racks_is_quiet(lab_files):
    add_second_rack_with_mgmt_4(lab_files)
    set_control_plane(lab_files, "mgmt-1, mgmt-2, mgmt-4")

    assert list(control_plane_spread(lab_files.load())) == []
