"""Cabling checks: real ports at both ends, one cable per port, hosts on leaves, dual-homed GPUs."""

from __future__ import annotations

import pytest

from rackform.checks.cabling import (
    cable_ends_exist,
    gpu_nodes_dual_homed,
    host_fabric_links,
    host_ports_land_on_switches,
    leaf_links,
    port_speeds_match,
    ports_cabled_once,
    switch_port_count,
)

GPU1_FAB1 = "{a: gpu-1:fab1, b: leaf-2:swp5}"


def add_cable(lab_files, cable: str) -> None:
    lab_files.edit_site("  # leaf-spine uplinks", f"  - {cable}\n  # leaf-spine uplinks")


@pytest.mark.parametrize(
    "cabling_check",
    [cable_ends_exist, ports_cabled_once, host_ports_land_on_switches, switch_port_count, gpu_nodes_dual_homed],
)
def test_lab_cabling_has_no_findings(lab_site, cabling_check):
    assert list(cabling_check(lab_site)) == []


def test_host_fabric_links_cover_every_host_cable(lab_site):
    links = host_fabric_links(lab_site)

    assert len(links) == 12
    assert str(links[8]) == "gpu-1:fab0 - leaf-1:swp5"
    assert links[8].speed_gbps == 400  # 400G host port on a 400G leaf port


def test_host_fabric_links_read_cables_either_way_round(lab_files):
    lab_files.edit_site(GPU1_FAB1, "{a: leaf-2:swp5, b: gpu-1:fab1}")

    assert "gpu-1:fab1 - leaf-2:swp5" in [str(link) for link in leaf_links(lab_files.load())]


def test_cable_to_unknown_device_suggests_a_close_name(lab_files):
    lab_files.edit_site(GPU1_FAB1, "{a: gpu-1:fab1, b: leaf-3:swp5}")
    site = lab_files.load()

    [finding] = cable_ends_exist(site)

    assert finding.key == "cabling[9].b"
    assert finding.loc == site.cables[9].loc
    assert "no host or switch named 'leaf-3' (did you mean 'leaf-" in finding.message


def test_cable_to_a_chassis_names_its_hosts(lab_files):
    lab_files.edit_site("{a: mgmt-1:fab0, b: leaf-1:swp1}", "{a: hci-1:fab0, b: leaf-1:swp1}")

    [finding] = cable_ends_exist(lab_files.load())

    assert "hci-1 is a hci chassis: name one of its hosts (mgmt-1, mgmt-2, mgmt-3)" in finding.message


def test_cable_to_missing_switch_port_lists_the_ports(lab_files):
    lab_files.edit_site(GPU1_FAB1, "{a: gpu-1:fab1, b: leaf-2:swp40}")

    [finding] = cable_ends_exist(lab_files.load())

    assert "leaf-2 has no port 'swp40'" in finding.message and "swp1..swp32 (fabric)" in finding.message


def test_cable_to_mistyped_host_port_suggests_the_port(lab_files):
    lab_files.edit_site(GPU1_FAB1, "{a: gpu-1:fab-1, b: leaf-2:swp5}")

    [finding] = cable_ends_exist(lab_files.load())

    assert finding.key == "cabling[9].a"
    assert "gpu-1 has no port 'fab-1' (did you mean 'fab1'?)" in finding.message


def test_switch_port_used_twice_names_the_first_cable(lab_files):
    lab_files.edit_site("{a: gpu-2:fab0, b: leaf-1:swp6}", "{a: gpu-2:fab0, b: leaf-1:swp5}")
    site = lab_files.load()

    [finding] = ports_cabled_once(site)

    assert finding.key == "cabling[10].b"
    assert finding.loc == site.cables[10].loc
    assert f"port leaf-1:swp5 is already cabled by cabling[8] at line {site.cables[8].loc.line}" in finding.message


def test_host_port_used_twice_is_an_error(lab_files):
    lab_files.edit_site("{a: gpu-2:fab0, b: leaf-1:swp6}", "{a: gpu-1:fab0, b: leaf-1:swp6}")

    [finding] = ports_cabled_once(lab_files.load())

    assert finding.key == "cabling[10].a" and "port gpu-1:fab0 is already cabled" in finding.message


def test_cable_looped_onto_one_port_is_an_error(lab_files):
    add_cable(lab_files, "{a: leaf-1:swp7, b: leaf-1:swp7}")

    [finding] = ports_cabled_once(lab_files.load())

    assert "both ends are leaf-1:swp7" in finding.message


def test_host_to_host_cable_is_an_error(lab_files):
    add_cable(lab_files, "{a: gpu-1:fab2, b: gpu-2:fab2}")

    [finding] = host_ports_land_on_switches(lab_files.load())

    assert finding.severity == "error" and finding.key == "cabling[12]"
    assert "gpu-1:fab2 - gpu-2:fab2 joins two hosts" in finding.message


def test_host_fabric_port_on_a_spine_warns(lab_files):
    add_cable(lab_files, "{a: gpu-1:fab2, b: spine-1:swp3}")

    [finding] = host_ports_land_on_switches(lab_files.load())

    assert finding.severity == "warning"
    assert "gpu-1:fab2 lands on spine-1, a spine switch" in finding.message


def test_switch_with_more_cabled_ports_than_it_has_is_reported_once(lab_files):
    lab_files.edit("topologies/blocks/sn4700.yaml", "ports: 32", "ports: 4")
    site = lab_files.load()

    findings = list(switch_port_count(site))

    assert [f.key for f in findings] == ["racks[r1].devices[leaf-1]", "racks[r1].devices[leaf-2]"]
    assert "leaf-1 has 7 cabled ports but a sn4700 has 4" in findings[0].message
    assert findings[0].loc == site.switches["leaf-1"].loc


def test_host_port_faster_than_switch_port_warns_once_per_host(lab_files):
    lab_files.edit("topologies/blocks/sn4700.yaml", "speed_gbps: 400", "speed_gbps: 100")
    findings = list(port_speeds_match(lab_files.load()))

    assert [f.severity for f in findings] == ["warning", "warning"]
    assert "gpu-1: 2 fabric port(s)" in findings[0].message
    assert "fab0 (400G) -> leaf-1:swp5 (100G)" in findings[0].message


def test_matching_port_speeds_are_quiet(lab_site):
    assert list(port_speeds_match(lab_site)) == []


def test_gpu_node_on_one_leaf_is_an_error(lab_files):
    lab_files.edit_site(GPU1_FAB1, "{a: gpu-1:fab1, b: leaf-1:swp7}")
    site = lab_files.load()

    [finding] = gpu_nodes_dual_homed(site)

    assert finding.key == "cabling[8]"
    assert "GPU node gpu-1 reaches leaf-1 (1 leaf switch(es))" in finding.message


def test_gpu_node_without_fabric_cables_points_at_its_device(lab_files):
    lab_files.edit_site("  - {a: gpu-1:fab0, b: leaf-1:swp5}\n  - " + GPU1_FAB1 + "\n", "")
    site = lab_files.load()

    [finding] = gpu_nodes_dual_homed(site)

    assert finding.key == "racks[r1].devices[gpu-1]" and finding.loc == site.hosts["gpu-1"].loc
    assert "reaches no leaf" in finding.message


def test_single_homing_is_allowed_without_no_single_point_of_failure(lab_files):
    lab_files.edit_site(GPU1_FAB1, "{a: gpu-1:fab1, b: leaf-1:swp7}")
    lab_files.edit("topologies/defaults.yaml", "no_single_point_of_failure: true", "no_single_point_of_failure: false")

    assert list(gpu_nodes_dual_homed(lab_files.load())) == []
