"""The shipped sites: each loads, passes preflight, and is what it claims to be
(the seed's reference rack, a 4-rack campus)."""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from rackform.checks.runner import run_checks
from rackform.model.loader import load_site
from rackform.model.site import Site
from rackform.pipeline import rendered_findings

REPO = Path(__file__).resolve().parents[2]
SITES = sorted(path.stem for path in (REPO / "topologies" / "sites").glob("*.yaml"))

SEED_RACK_BLOCKS = {
    "hci": 1, "vgpu": 1, "dgx2": 2, "stor-xl": 3, "sn2700": 2, "mgmt-switch": 2, "oob-switch": 1,
}
"""Seed 000, "VSCALER DGX BUILDING BLOCK": the suggested rack, block by block."""
HEADROOM_SHARE = 0.8


@cache
def site(name: str) -> Site:
    return load_site(name, REPO)


def _leaves_reached(site_: Site) -> dict[str, set[str]]:
    """Leaf switches each host's fabric ports are cabled to."""
    reached: dict[str, set[str]] = {}
    for cable in site_.cables:
        for host_end, other_end in ((cable.a, cable.b), (cable.b, cable.a)):
            host = site_.hosts.get(host_end.device)
            switch = site_.switches.get(other_end.device)
            if host and switch and switch.role == "leaf" and host.ports[host_end.port].role == "fabric":
                reached.setdefault(host.name, set()).add(switch.name)
    return reached


def test_the_seed_reference_and_campus_sites_ship():
    assert {"reference", "campus"} <= set(SITES)


# ---------------------------------------------------------------- every site


@pytest.mark.parametrize("name", SITES)
def test_site_loads(name: str):
    assert site(name).name == name


@pytest.mark.parametrize("name", SITES)
def test_site_passes_preflight_without_errors(name: str):
    errors = [str(finding) for finding in run_checks(site(name)) if finding.severity == "error"]
    assert errors == []


@pytest.mark.parametrize("name", SITES)
def test_site_renders_to_a_project_its_mirror_policy_accepts(name: str):
    """An air-gapped site's rendered project names no upstream address (rackform.checks.airgap)."""
    assert [str(finding) for finding in rendered_findings(site(name))] == []


@pytest.mark.parametrize("name", SITES)
def test_site_has_a_mirror_on_its_first_management_node(name: str):
    assert site(name).mirror is not None and site(name).mirror.host == "mgmt-1"


@pytest.mark.parametrize("name", SITES)
def test_every_host_has_an_inventory_entry(name: str):
    missing = [host.name for host in site(name).hosts.values() if host.vars_loc is None]
    assert missing == []


@pytest.mark.parametrize("name", SITES)
def test_every_managed_switch_has_an_inventory_entry(name: str):
    switches = site(name).switches.values()
    missing = [s.name for s in switches if s.os != "unmanaged" and s.vars_loc is None]
    assert missing == []


@pytest.mark.parametrize("name", ["reference", "campus"])
def test_racks_keep_power_headroom(name: str):
    s = site(name)
    over = {
        rack.name: sum(device.power_w(s.power_basis) for device in rack.devices) / rack.power_budget_w
        for rack in s.racks
    }
    assert {rack: share for rack, share in over.items() if share > HEADROOM_SHARE} == {}


@pytest.mark.parametrize("name", ["reference", "campus"])
def test_control_plane_is_three_hci_hosts(name: str):
    s = site(name)
    blocks = [s.hosts[host].block.name for host in s.kubernetes.control_plane]
    assert blocks == ["hci"] * 3


# ---------------------------------------------------------------- reference: the seed's rack


def test_reference_is_one_42u_rack_of_30_kw():
    (rack,) = site("reference").racks
    assert (rack.height_u, rack.power_budget_w) == (42, 30000)


def test_reference_uses_exactly_40u():
    (rack,) = site("reference").racks
    assert sum(device.block.rack_units for device in rack.devices) == 40


def test_reference_holds_the_seeds_blocks_in_the_seeds_counts():
    counts = Counter(device.block.name for device in site("reference").devices())
    assert dict(counts) == SEED_RACK_BLOCKS


@pytest.mark.parametrize("host", ["dgx2-1", "dgx2-2", "stor-1", "stor-2", "stor-3"])
def test_reference_dgx2_and_storage_are_dual_homed(host: str):
    assert _leaves_reached(site("reference"))[host] == {"leaf-1", "leaf-2"}


def test_reference_uses_all_four_network_purposes():
    purposes = {network.purpose for network in site("reference").networks.values()}
    assert purposes == {"management", "oob", "compute_fabric", "storage_fabric"}


# ---------------------------------------------------------------- campus: multi-rack leaf-spine


def test_campus_has_4_racks_and_16_gpu_nodes():
    s = site("campus")
    assert (len(s.racks), len(s.hosts_in_role("gpu"))) == (4, 16)


def test_campus_gpu_nodes_are_dual_homed_to_their_own_racks_leaf_pair():
    s = site("campus")
    reached = _leaves_reached(s)
    leaves_of_rack: dict[str, set[str]] = {rack.name: set() for rack in s.racks}
    for name, switch in s.switches.items():
        if switch.role == "leaf":
            leaves_of_rack[switch.device.rack].add(name)
    wrong = {
        host.name: reached.get(host.name)
        for host in s.hosts_in_role("gpu")
        if reached.get(host.name) != leaves_of_rack[host.device.rack]
    }
    assert wrong == {}


def test_campus_has_a_leaf_pair_per_rack():
    leaves = Counter(sw.device.rack for sw in site("campus").switches.values() if sw.role == "leaf")
    assert leaves == {"r1": 2, "r2": 2, "r3": 2, "r4": 2}


def test_campus_leaves_uplink_to_both_spines():
    s = site("campus")
    spines = {name for name, sw in s.switches.items() if sw.role == "spine"}
    uplinks: dict[str, set[str]] = {name: set() for name, sw in s.switches.items() if sw.role == "leaf"}
    for cable in s.cables:
        for leaf_end, other_end in ((cable.a, cable.b), (cable.b, cable.a)):
            if leaf_end.device in uplinks and other_end.device in spines:
                uplinks[leaf_end.device].add(other_end.device)
    assert (len(spines), {leaf for leaf, reached in uplinks.items() if reached != spines}) == (2, set())


def test_campus_fabric_switches_run_cumulus_with_an_asn():
    fabric = [sw for sw in site("campus").switches.values() if sw.role in ("leaf", "spine")]
    assert {(sw.os, sw.asn is not None) for sw in fabric} == {("cumulus", True)}
