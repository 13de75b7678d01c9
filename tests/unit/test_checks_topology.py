"""Topology checks: the eBGP AS plan, one connected fabric, no BGP peer group without members."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.checks.runner import run_checks
from rackform.checks.topology import (
    bgp_peer_groups_have_members,
    fabric_asns_complete,
    fabric_connected,
    leaf_asn_differs_from_spines,
    leaf_asns_unique,
)
from rackform.model.loader import load_site
from rackform.render.project import render_files

REPO = Path(__file__).resolve().parents[2]
SHIPPED_SITES = sorted(path.stem for path in (REPO / "topologies" / "sites").glob("*.yaml"))
TOPOLOGY_CHECKS = [leaf_asns_unique, leaf_asn_differs_from_spines, fabric_asns_complete, fabric_connected,
                   bgp_peer_groups_have_members]

LEAF_2_ASN = "switch: {role: leaf, os: cumulus, fabric: compute, asn: 65102}"
LEAF_2_UPLINK = "  - {a: leaf-2:swp31, b: spine-1:swp2}\n"
LEAF_1_UPLINK = "  - {a: leaf-1:swp31, b: spine-1:swp1}\n"
OOB_SWITCH = "switch: {role: oob, os: unmanaged}"


def leaf_2_frr_conf(site) -> str:
    """leaf-2's /etc/frr/frr.conf as the fabric stage installs it (its part of the review file)."""
    review = render_files(site)["switch_configs/leaf-2.cumulus.conf"].decode()
    return review.split("## ---- /etc/frr/frr.conf", 1)[1].split("\n## ---- ", 1)[0]


def names(findings) -> list[str]:
    return sorted({finding.check for finding in findings})


@pytest.mark.parametrize("site_name", SHIPPED_SITES)
@pytest.mark.parametrize("topology_check", TOPOLOGY_CHECKS, ids=lambda fn: fn.__name__)
def test_shipped_sites_pass(site_name, topology_check):
    assert list(topology_check(load_site(site_name, REPO))) == []


def test_the_checks_run_with_the_others(lab_files):
    lab_files.edit_site(LEAF_2_ASN, LEAF_2_ASN.replace("65102", "65101"))

    assert "leaf_asns_unique" in names(run_checks(lab_files.load()))


# ---------------------------------------------------------------- AS plan


def test_two_leaves_with_one_asn_are_refused_at_the_second(lab_files):
    lab_files.edit_site(LEAF_2_ASN, LEAF_2_ASN.replace("65102", "65101"))
    site = lab_files.load()

    [finding] = leaf_asns_unique(site)

    assert finding.loc == site.switches["leaf-2"].loc
    assert finding.key == "racks[r1].devices[leaf-2].switch.asn"
    assert f"AS 65101 is already leaf-1's (line {site.switches['leaf-1'].loc.line})" in finding.message


def test_leaves_of_different_fabrics_may_share_an_asn(lab_files):
    # leaf-2 moves to a fabric of its own (a storage fabric): its AS is its own business
    lab_files.edit_site("  - {name: compute, purpose: compute_fabric, prefix: 10.20.0.0/16}",
                        "  - {name: compute, purpose: compute_fabric, prefix: 10.20.0.0/16}\n"
                        "  - {name: storage, purpose: storage_fabric, prefix: 10.30.0.0/16}")
    lab_files.edit_site(LEAF_2_ASN, "switch: {role: leaf, os: cumulus, fabric: storage, asn: 65101}")

    assert list(leaf_asns_unique(lab_files.load())) == []


def test_a_leaf_with_the_spine_asn_is_refused(lab_files):
    lab_files.edit_site(LEAF_2_ASN, LEAF_2_ASN.replace("65102", "65100"))
    site = lab_files.load()

    [finding] = leaf_asn_differs_from_spines(site)

    assert finding.loc == site.switches["leaf-2"].loc
    assert "AS 65100 is the AS of spine spine-1" in finding.message and "never comes up" in finding.message
    assert list(leaf_asns_unique(site)) == []  # one mistake, one finding


def test_spines_may_share_an_asn(repo_root):
    campus = load_site("campus", repo_root)

    assert campus.switches["spine-1"].asn == campus.switches["spine-2"].asn
    assert list(leaf_asn_differs_from_spines(campus)) == list(leaf_asns_unique(campus)) == []


def test_a_leaf_without_asn_in_a_routed_fabric_is_refused(lab_files):
    lab_files.edit_site(LEAF_2_ASN, "switch: {role: leaf, os: cumulus, fabric: compute}")
    site = lab_files.load()

    [finding] = fabric_asns_complete(site)

    assert finding.loc == site.switches["leaf-2"].loc
    assert "leaf leaf-2 has no AS number while leaf-1 of fabric compute runs BGP (AS 65101)" in finding.message


def test_a_layer2_fabric_needs_no_asn(repo_root):
    reference = load_site("reference", repo_root)

    assert all(switch.asn is None for switch in reference.switches.values())
    assert list(fabric_asns_complete(reference)) == []


# ---------------------------------------------------------------- one connected fabric


def test_a_leaf_with_no_uplink_is_an_island(lab_files):
    lab_files.edit_site(LEAF_2_UPLINK, "")
    site = lab_files.load()

    [finding] = fabric_connected(site)

    assert finding.loc == site.switches["leaf-2"].loc
    assert finding.key == "racks[r1].devices[leaf-2]"
    assert "leaf leaf-2 has no link to another leaf or spine of fabric compute" in finding.message
    assert "cut off from leaf-1, spine-1" in finding.message


def test_a_leaf_pair_cabled_to_each_other_is_connected(lab_files):
    # the reference site's shape: no spine, the two leaves joined by a peer link
    lab_files.edit_site(LEAF_2_UPLINK, "  - {a: leaf-2:swp31, b: leaf-1:swp32}\n")

    assert list(fabric_connected(lab_files.load())) == []


def test_leaves_linked_only_to_each_other_are_one_island_reported_once(lab_files):
    lab_files.edit_site(LEAF_1_UPLINK, "  - {a: leaf-1:swp31, b: leaf-2:swp32}\n")
    lab_files.edit_site(LEAF_2_UPLINK, "")
    site = lab_files.load()

    [finding] = fabric_connected(site)

    # the larger island (the leaf pair) is the fabric; the lone spine is cut off from it
    assert finding.loc == site.switches["spine-1"].loc
    assert "spine spine-1 has no link" in finding.message and "cut off from leaf-1, leaf-2" in finding.message
    assert "cable it to a leaf" in finding.message


def test_a_two_switch_island_is_named_whole(lab_files):
    # campus: leaf-4a and leaf-4b lose their spine uplinks and are joined to each other
    text = lab_files.read("topologies/sites/campus.yaml")
    uplinks = [line for line in text.splitlines() if "leaf-4" in line and "spine-" in line]
    assert uplinks
    for line in uplinks:
        text = text.replace(line + "\n", "")
    text = text.replace("cabling:\n", "cabling:\n  - {a: leaf-4a:swp32, b: leaf-4b:swp32}\n", 1)
    lab_files.write("topologies/sites/campus.yaml", text)
    site = lab_files.load("campus")

    [finding] = fabric_connected(site)

    assert finding.loc == site.switches["leaf-4a"].loc
    assert finding.message.startswith("leaf-4a, leaf-4b are linked only to each other: fabric fabric is 2 islands")


# ---------------------------------------------------------------- BGP peer groups


def test_a_switch_running_bgp_with_no_switch_link_is_refused(lab_files):
    lab_files.edit_site(LEAF_2_UPLINK, "")
    site = lab_files.load()

    [finding] = bgp_peer_groups_have_members(site)

    assert finding.loc == site.switches["leaf-2"].loc
    assert "leaf leaf-2 runs BGP (AS 65102)" in finding.message and "no members" in finding.message


def test_an_asn_on_a_switch_outside_the_fabric_is_refused(lab_files):
    lab_files.edit_site(OOB_SWITCH, "switch: {role: oob, os: unmanaged, asn: 65200}")
    site = lab_files.load()

    [finding] = bgp_peer_groups_have_members(site)

    assert finding.key == "racks[r1].devices[oob-1].switch.asn"


def test_the_frr_config_holds_no_empty_peer_group(lab_files):
    # what the check guards against, rendered: leaf-2 keeps its AS but loses its uplink
    lab_files.edit_site(LEAF_2_UPLINK, "")
    frr = leaf_2_frr_conf(lab_files.load())

    assert "router bgp 65102" in frr
    assert "peer-group" not in frr


def test_the_frr_config_of_a_linked_leaf_keeps_its_peer_group(lab_files):
    frr = leaf_2_frr_conf(lab_files.load())

    assert " neighbor fabric peer-group\n neighbor fabric remote-as external\n" in frr
    assert " neighbor swp31 interface peer-group fabric" in frr.splitlines()


def test_a_one_leaf_fabric_is_a_warning_not_an_island(tmp_path):
    """Two hosts on one leaf (the lab tests' small sites): nothing to peer with, nothing cut off."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
    from sitebuilder import build_site, group_vars, networks, two_hosts_on_a_leaf

    design = two_hosts_on_a_leaf("oneleaf", "one leaf", networks("10.91.0.0/24", "10.91.1.0/24", "10.92.0.0/16"))
    host_vars = {f"node-{n}": (f"management_address: 10.91.0.{10 + n}\nbmc_address: 10.91.1.{10 + n}\n"
                               f"fabric_ports:\n  fab0: {{address: 10.92.1.{10 + n}/24}}\n") for n in (1, 2)}
    host_vars["leaf-1"] = "management_address: 10.91.0.201\n"
    root = build_site(tmp_path, "oneleaf", design, host_vars, group_vars("oneleaf", "10.91.0.1"))
    found = [f for f in run_checks(load_site("oneleaf", root)) if f.check == "bgp_peer_groups_have_members"]
    assert [(f.severity, f.message.split(":")[0]) for f in found] == [
        ("warning", "leaf leaf-1 is the only BGP switch of fabric compute")]
