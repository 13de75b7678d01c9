"""A new node's cabling and management MAC from what the lab's real lldpd printed, and a DHCP lease file."""

from __future__ import annotations

from pathlib import Path

from rackform.day2 import lldp, mgmtmac
from rackform.fabric.check_parse import parse_sections

SNAPSHOT = Path(__file__).parent / "data" / "fabric_check" / "leaf-1.snapshot"


def leaf_lldp() -> str:
    """`lldpcli -f json show neighbors` as a lab leaf printed it (three neighbours)."""
    return parse_sections(SNAPSHOT.read_text())["lldp"].text


def test_parse_reads_system_port_chassis_mac_and_ipv4_management_addresses():
    heard = lldp.parse("leaf-1", leaf_lldp())
    first = heard[0]
    assert (first.switch, first.switch_port, first.system, first.port) == ("leaf-1", "swp1", "node-1", "fab0")
    assert first.chassis_mac == "02:42:00:00:00:11" and first.mgmt_ips == ("10.66.0.11",)
    assert [(item.switch_port, item.system, item.port) for item in heard] == [
        ("swp1", "node-1", "fab0"), ("swp2", "node-2", "fab0"), ("swp31", "spine-1", "swp1")]


def test_strangers_are_unknown_systems_on_ports_the_plan_leaves_free(lab_site):
    heard = lldp.parse("leaf-1", leaf_lldp())
    # In the shipped lab every one of these leaf ports is cabled: nobody is a stranger.
    assert lldp.strangers(lab_site, heard) == []
    # Free swp1 and swp2 in the plan: the two unknown systems there are new nodes; spine-1:swp31 stays planned.
    lab_site.cables = [cable for cable in lab_site.cables
                       if not ({str(cable.a), str(cable.b)} & {"leaf-1:swp1", "leaf-1:swp2"})]
    systems = lldp.by_system(lldp.strangers(lab_site, heard))
    assert sorted(systems) == ["node-1", "node-2"]
    assert [(item.port, item.switch_port) for item in systems["node-2"]] == [("fab0", "swp2")]


def test_a_neighbour_the_site_knows_is_no_stranger(lab_site):
    heard = [lldp.Heard("leaf-1", "swp20", "gpu-1", "fab3", None, ())]
    assert lldp.strangers(lab_site, heard) == []


def test_management_mac_from_the_pxe_servers_leases(tmp_path):
    leases = tmp_path / "dnsmasq.leases"
    leases.write_text("1764000000 02:aa:00:00:00:01 10.10.0.40 other *\n"
                      "1764000100 02:4D:00:00:00:17 10.77.0.23 stor-1 01:02:4d:00:00:00:17\n")
    assert mgmtmac.from_leases(leases, ["10.77.0.23"], None) == "02:4d:00:00:00:17"
    assert mgmtmac.from_leases(leases, [], "stor-1") == "02:4d:00:00:00:17"
    assert mgmtmac.from_leases(leases, ["10.77.0.99"], "nobody") is None
    assert mgmtmac.from_leases(tmp_path / "missing", ["10.77.0.23"], None) is None
