"""Address checks: inside their networks, used once, prefixes disjoint and large enough."""

from __future__ import annotations

import pytest

from rackform.checks.addresses import (
    api_vip_address,
    bmc_addresses_in_prefix,
    fabric_addresses_in_prefix,
    gateway_addresses,
    management_addresses_in_prefix,
    prefix_capacity,
    prefixes_do_not_overlap,
    unique_addresses,
    unique_hostnames,
    unique_macs,
)

ADDRESS_CHECKS = [
    management_addresses_in_prefix, bmc_addresses_in_prefix, fabric_addresses_in_prefix, unique_addresses,
    unique_macs, unique_hostnames, prefixes_do_not_overlap, prefix_capacity, api_vip_address, gateway_addresses,
]
MGMT_NET = "{name: mgmt, purpose: management, prefix: 10.10.0.0/24, gateway: 10.10.0.1}"
OOB_NET = "{name: oob, purpose: oob, prefix: 10.10.1.0/24}"
COMPUTE_NET = "{name: compute, purpose: compute_fabric, prefix: 10.20.0.0/16}"


def var_line(site, host: str, key: str) -> int:
    node = site.hosts.get(host) or site.switches[host]
    return node.var_locs[key].line


@pytest.mark.parametrize("address_check", ADDRESS_CHECKS)
def test_lab_addresses_are_sound(lab_site, address_check):
    assert list(address_check(lab_site)) == []


# ---------------------------------------------------------------- inside their networks


def test_host_management_address_outside_its_network_is_an_error(lab_files):
    lab_files.edit_host_vars("gpu-1", "management_address: 10.10.0.15", "management_address: 10.10.2.15")
    site = lab_files.load()

    [finding] = management_addresses_in_prefix(site)

    assert (finding.loc.path, finding.loc.line) == ("inventories/lab/host_vars/gpu-1.yml", 1)
    assert finding.key == "gpu-1.management_address"
    assert finding.message == "10.10.2.15 is outside the management network mgmt (10.10.0.0/24)"


def test_switch_management_address_outside_its_network_is_an_error(lab_files):
    lab_files.edit_host_vars("leaf-1", "10.10.0.201", "10.11.0.201")

    [finding] = management_addresses_in_prefix(lab_files.load())

    assert finding.key == "leaf-1.management_address"


def test_bmc_address_outside_the_oob_network_is_an_error(lab_files):
    lab_files.edit_host_vars("gpu-1", "bmc_address: 10.10.1.15", "bmc_address: 10.10.0.99")
    site = lab_files.load()

    [finding] = bmc_addresses_in_prefix(site)

    assert finding.loc.line == var_line(site, "gpu-1", "bmc_address")
    assert finding.message == "10.10.0.99 is outside the oob network oob (10.10.1.0/24)"


def test_bmc_addresses_without_an_oob_network_are_one_error(lab_files):
    lab_files.edit_site(f"  - {OOB_NET}\n", "")

    [finding] = bmc_addresses_in_prefix(lab_files.load())

    assert finding.key == "networks" and "6 bmc_address value(s) given but no network has purpose 'oob'" in finding.message


def test_fabric_address_outside_the_fabric_of_its_leaf_is_an_error(lab_files):
    lab_files.edit_host_vars("gpu-1", "address: 10.20.1.15/24", "address: 10.30.1.15/24")
    site = lab_files.load()

    [finding] = fabric_addresses_in_prefix(site)

    assert finding.key == "gpu-1.fabric_ports.fab0.address"
    assert finding.loc.line == var_line(site, "gpu-1", "fabric_ports.fab0")
    assert "10.30.1.15/24 is outside compute (10.20.0.0/16), the fabric network of leaf-1" in finding.message


def test_uncabled_fabric_port_must_be_in_some_fabric_network(lab_files):
    lab_files.edit_host_vars("gpu-1", "fabric_ports:\n", "fabric_ports:\n  fab2: {address: 10.30.3.15/24}\n")

    [finding] = fabric_addresses_in_prefix(lab_files.load())

    assert "10.30.3.15/24 is outside every fabric network: compute (10.20.0.0/16)" in finding.message


def test_fabric_address_for_a_port_the_host_lacks_is_an_error(lab_files):
    lab_files.edit_host_vars("gpu-1", "fabric_ports:\n", "fabric_ports:\n  fab9: {address: 10.20.9.15/24}\n")

    [finding] = fabric_addresses_in_prefix(lab_files.load())

    assert finding.key == "gpu-1.fabric_ports.fab9"
    assert "gpu-1 (dgx-h100) has no fabric port 'fab9'; its fabric ports: fab0, fab1" in finding.message


# ---------------------------------------------------------------- used once


def test_address_shared_by_a_host_and_a_switch_is_an_error(lab_files):
    lab_files.edit_host_vars("leaf-1", "10.10.0.201", "10.10.0.15")
    site = lab_files.load()

    [finding] = unique_addresses(site)

    assert finding.key == "leaf-1.management_address"
    assert "10.10.0.15 is already gpu-1 management_address (inventories/lab/host_vars/gpu-1.yml:1)" in finding.message


def test_bmc_address_used_twice_is_an_error(lab_files):
    lab_files.edit_host_vars("gpu-2", "bmc_address: 10.10.1.16", "bmc_address: 10.10.1.15")

    [finding] = unique_addresses(lab_files.load())

    assert finding.key == "gpu-2.bmc_address" and "already gpu-1 bmc_address" in finding.message


def test_fabric_address_used_twice_is_an_error(lab_files):
    lab_files.edit_host_vars("gpu-2", "address: 10.20.1.16/24", "address: 10.20.1.15/24")

    [finding] = unique_addresses(lab_files.load())

    assert finding.key == "gpu-2.fabric_ports.fab0.address" and "already gpu-1 fabric_ports.fab0.address" in finding.message


def test_mac_used_twice_is_an_error(lab_files):
    lab_files.edit_host_vars("gpu-2", '"02:0a:0a:00:00:10"', '"02:0a:0a:00:00:0f"')
    site = lab_files.load()

    [finding] = unique_macs(site)

    assert finding.key == "gpu-2.management_mac"
    assert finding.loc.line == var_line(site, "gpu-2", "management_mac")
    assert "02:0a:0a:00:00:0f is already gpu-1 management_mac" in finding.message


def test_switch_named_like_a_host_is_an_error(lab_files):
    lab_files.edit_site("name: spine-1", "name: mgmt-3")
    lab_files.edit("inventories/lab/hosts.yml", "    spine-1:\n", "")
    site = lab_files.load()

    [finding] = unique_hostnames(site)

    assert finding.key == "racks[r1].devices[mgmt-3].name"
    assert finding.loc == site.switches["mgmt-3"].loc
    assert "switch mgmt-3 has the name of host mgmt-3" in finding.message


# ---------------------------------------------------------------- prefixes


def test_overlapping_networks_are_an_error(lab_files):
    lab_files.edit_site(OOB_NET, OOB_NET.replace("10.10.1.0/24", "10.10.0.128/25"))
    site = lab_files.load()

    [finding] = prefixes_do_not_overlap(site)

    assert (finding.key, finding.loc) == ("networks[oob].prefix", site.network_locs["oob"])
    assert "10.10.0.128/25 overlaps networks[mgmt].prefix 10.10.0.0/24" in finding.message


def test_pod_prefix_overlapping_a_network_is_an_error(lab_files):
    lab_files.edit("topologies/profiles/kubernetes.yaml", "pod_prefix: 10.244.0.0/16", "pod_prefix: 10.20.0.0/16")

    [finding] = prefixes_do_not_overlap(lab_files.load())

    assert finding.key == "kubernetes.pod_prefix" and "overlaps networks[compute].prefix" in finding.message


def test_network_inside_the_service_prefix_is_an_error(lab_files):
    lab_files.edit_site(COMPUTE_NET, COMPUTE_NET.replace("10.20.0.0/16", "10.100.0.0/16"))

    [finding] = prefixes_do_not_overlap(lab_files.load())

    assert finding.key == "networks[compute].prefix"
    assert "10.100.0.0/16 overlaps kubernetes.service_prefix 10.96.0.0/12" in finding.message


def test_management_prefix_too_small_is_an_error(lab_files):
    lab_files.edit_site(MGMT_NET, MGMT_NET.replace("/24", "/29"))

    [finding] = prefix_capacity(lab_files.load())

    assert finding.key == "networks[mgmt].prefix"
    assert (
        "10.10.0.0/29 holds 6 usable addresses but mgmt needs 11 "
        "(9 hosts and managed switches, the gateway, the API VIP)" in finding.message
    )


def test_fabric_prefix_too_small_for_its_ports_is_an_error(lab_files):
    lab_files.edit_site(COMPUTE_NET, COMPUTE_NET.replace("10.20.0.0/16", "10.20.0.0/29"))

    [finding] = prefix_capacity(lab_files.load())

    assert "compute needs 12 (12 cabled host fabric ports)" in finding.message


# ---------------------------------------------------------------- API VIP and gateways


@pytest.mark.parametrize(
    ("vip", "expected"),
    [
        ("10.10.5.5", "10.10.5.5 is outside the management network mgmt (10.10.0.0/24)"),
        ("10.10.0.15", "10.10.0.15 is also gpu-1 management_address"),
        ("10.10.0.1", "10.10.0.1 is the gateway of network mgmt"),
    ],
)
def test_api_vip_must_be_a_free_management_address(lab_files, vip, expected):
    lab_files.edit_site("api_vip: 10.10.0.5", f"api_vip: {vip}")
    site = lab_files.load()

    [finding] = api_vip_address(site)

    assert (finding.key, finding.loc) == ("kubernetes.api_vip", site.kubernetes_loc)
    assert expected in finding.message


@pytest.mark.parametrize(
    ("gateway", "expected"),
    [
        ("10.10.9.1", "gateway 10.10.9.1 is outside 10.10.0.0/24"),
        ("10.10.0.255", "gateway 10.10.0.255 is the broadcast address of 10.10.0.0/24"),
        ("10.10.0.15", "gateway 10.10.0.15 is also gpu-1 management_address"),
    ],
)
def test_gateway_must_be_a_free_address_in_its_network(lab_files, gateway, expected):
    lab_files.edit_site("gateway: 10.10.0.1", f"gateway: {gateway}")
    site = lab_files.load()

    [finding] = gateway_addresses(site)

    assert (finding.key, finding.loc) == ("networks[mgmt].gateway", site.network_locs["mgmt"])
    assert expected in finding.message
