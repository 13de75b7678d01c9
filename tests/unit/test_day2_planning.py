"""Naming, address allocation, rack placement and block identification for a new node."""

from __future__ import annotations

import ipaddress

import pytest

from rackform.day2 import allocate, blocks, naming, placement
from rackform.day2.allocate import FabricLink
from rackform.model.source import BadInput


def message(error: BadInput) -> str:
    return "\n".join(str(problem) for problem in error.errors)


# ---------------------------------------------------------------- naming


def test_pattern_of_takes_the_common_prefix_and_highest_number():
    assert naming.pattern_of(["gpu-1", "gpu-7", "gpu-3", "odd"]) == ("gpu-", 7)
    assert naming.pattern_of(["alpha", "beta"]) is None


def test_new_node_follows_its_blocks_names(lab_site):
    assert naming.host_name(lab_site, "dgx-h100") == "gpu-3"
    assert naming.host_name(lab_site, "stor-xl") == "stor-2"
    # HCI hosts are mgmt-N inside chassis hci-N: both patterns continue.
    assert naming.host_name(lab_site, "hci") == "mgmt-4"
    assert naming.device_name(lab_site, "hci", "mgmt-4") == "hci-2"
    assert naming.device_name(lab_site, "dgx-h100", "gpu-3") == "gpu-3"


def test_a_block_the_site_lacks_takes_its_category_prefix(lab_site):
    assert naming.host_name(lab_site, "dgx2") == "gpu-3"  # category gpu: gpu-1 and gpu-2 are taken
    assert naming.host_name(lab_site, "flash-hybrid") == "stor-2"
    assert naming.host_name(lab_site, "compute") == "cpu-1"


def test_a_taken_name_is_skipped(lab_site):
    assert naming.host_name(lab_site, "dgx-h100", naming.taken_names(lab_site) | {"gpu-3"}) == "gpu-4"


# ---------------------------------------------------------------- allocation


def test_management_address_keeps_the_bmc_host_number(lab_site):
    assert allocate.management_address(lab_site, "10.10.1.23") == ipaddress.IPv4Address("10.10.0.23")


def test_management_address_falls_back_to_the_lowest_free(lab_site):
    # 10.10.1.15 is gpu-1's BMC number: 10.10.0.15 is taken, .1 is the gateway, .5 the API VIP.
    got = allocate.management_address(lab_site, "10.10.1.15")
    taken = allocate.taken_management(lab_site)
    assert got not in taken and got == min(a for a in ipaddress.IPv4Network("10.10.0.0/24").hosts() if a not in taken)
    assert allocate.management_address(lab_site, "10.10.1.15") == got  # deterministic


def test_management_address_exhausted_is_refused_at_the_prefix(lab_files):
    lab_files.edit_site("prefix: 10.10.0.0/24, gateway: 10.10.0.1", "prefix: 10.10.0.0/28, gateway: 10.10.0.1")
    for host, last in (("mgmt-1", 11), ("mgmt-2", 12), ("mgmt-3", 13), ("stor-1", 14)):
        lab_files.edit_host_vars(host, f"management_address: 10.10.0.{last}",
                                 f"management_address: 10.10.0.{last - 8}")
    site = lab_files.load()
    site.hosts["gpu-1"].management_address = ipaddress.IPv4Address("10.10.0.7")
    site.hosts["gpu-2"].management_address = ipaddress.IPv4Address("10.10.0.8")
    for n, switch in enumerate(site.switches.values()):
        switch.management_address = ipaddress.IPv4Address(f"10.10.0.{9 + n}")
    taken = {ipaddress.IPv4Address(f"10.10.0.{n}") for n in (2, 12, 13, 14)}
    with pytest.raises(BadInput) as error:
        allocate.management_address(site, "10.10.1.40", taken)
    assert "topologies/sites/lab.yaml:" in message(error.value)
    assert "networks[mgmt].prefix: address exhausted: every address of 10.10.0.0/28 is taken" in message(error.value)


def test_fabric_address_joins_the_leaf_port_subnet_at_the_host_number(lab_site):
    link = FabricLink("fab1", "leaf-2", "swp7")
    assert allocate.fabric_address(lab_site, link, 23) == ipaddress.IPv4Interface("10.20.2.23/24")
    # The host number taken (gpu-1 is .15): the lowest free, never the leaf's .1.
    got = allocate.fabric_address(lab_site, FabricLink("fab0", "leaf-1", "swp7"), 15)
    assert got.network == ipaddress.IPv4Network("10.20.1.0/24") and got.ip != ipaddress.IPv4Address("10.20.1.1")
    assert got.ip not in {i.ip for h in lab_site.hosts.values() for i in h.fabric_addresses.values()}


def test_fabric_address_without_a_known_subnet_is_refused(lab_site):
    with pytest.raises(BadInput, match="no host has a fab3 address on leaf-1"):
        allocate.fabric_address(lab_site, FabricLink("fab3", "leaf-1", "swp9"), 23)


# ---------------------------------------------------------------- placement


def test_first_free_position_that_fits(lab_site):
    # r1: hci U1-2, stor U3-6, gpu-1 U7-14, gpu-2 U15-22, switches U38-41: the first gap is U23.
    assert placement.place(lab_site, lab_site.catalog["vgpu"]) == placement.Placement("r1", 23)
    lab_site.racks[0].power_budget_w = 40000  # room for a third DGX H100 (10.2 kW max)
    assert placement.place(lab_site, lab_site.catalog["dgx-h100"]) == placement.Placement("r1", 23)


def test_given_position_is_checked(lab_site):
    dgx = lab_site.catalog["dgx-h100"]
    with pytest.raises(BadInput, match="U25: power: 26700 W \\+ 10200 W \\(max\\) exceeds the budget of 35000 W"):
        placement.place(lab_site, dgx, "r1", 25)
    lab_site.racks[0].power_budget_w = 40000
    assert placement.place(lab_site, dgx, "r1", 25) == placement.Placement("r1", 25)
    with pytest.raises(BadInput, match="U10-U17 overlaps gpu-1, gpu-2"):
        placement.place(lab_site, dgx, "r1", 10)
    with pytest.raises(BadInput, match="U36-U43 is outside the rack's U1-U42"):
        placement.place(lab_site, dgx, "r1", 36)
    with pytest.raises(BadInput, match="no rack 'r9'"):
        placement.place(lab_site, dgx, "r9")


def test_rack_full_on_power(lab_site):
    # 35 kW budget with 26.7 kW in use: a third DGX H100 (10.2 kW at max) does not fit anywhere.
    with pytest.raises(BadInput) as error:
        placement.place(lab_site, lab_site.catalog["dgx-h100"])
    assert "rack full: no place for a dgx-h100" in message(error.value)
    assert "exceeds the budget" in message(error.value)


def test_rack_full_on_space(lab_site):
    rack = lab_site.racks[0]
    rack.height_u = 22
    rack.devices = [d for d in rack.devices if d.position_u < 23]
    with pytest.raises(BadInput, match="r1: no 1 free U in a row"):
        placement.place(lab_site, lab_site.catalog["vgpu"])


# ---------------------------------------------------------------- block identification


def test_fru_names_one_block(lab_site):
    assert blocks.identify(lab_site.catalog, "NVIDIA", "NVIDIA DGX H100", "10.10.1.23").name == "dgx-h100"
    assert blocks.identify(lab_site.catalog, "NVIDIA", "DGXH100", "10.10.1.23").name == "dgx-h100"


def test_ambiguous_fru_is_refused_with_the_candidates(lab_site):
    with pytest.raises(BadInput) as error:
        blocks.identify(lab_site.catalog, "vScaler", "vScaler", "10.10.1.23")
    text = message(error.value)
    assert "ambiguous block type" in text and "hci (vScaler HCI (4 nodes, 2U))" in text and "--block" in text
    # An interactive person settles it; --block does too.
    assert blocks.identify(lab_site.catalog, "vScaler", "vScaler", "x", ask=lambda found: "vgpu").name == "vgpu"
    assert blocks.identify(lab_site.catalog, "vScaler", "vScaler", "x", chosen="stor-xl").name == "stor-xl"


def test_unknown_fru_and_unknown_block_choice_are_refused(lab_site):
    with pytest.raises(BadInput, match="matches no block of the catalog"):
        blocks.identify(lab_site.catalog, "Acme", "Rocket 9000", "10.10.1.23")
    with pytest.raises(BadInput, match="'sn4700' is not a server block"):
        blocks.identify(lab_site.catalog, "NVIDIA", "x", "10.10.1.23", chosen="sn4700")
