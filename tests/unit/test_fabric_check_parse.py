"""Parsers of what fabric devices print, on outputs recorded from the chktest lab, the
Onyx emulator and mlnx_qos's documented layout (tests/unit/data/fabric_check/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.fabric.check_parse import (
    ParseError,
    parse_env_lines,
    parse_ip_links,
    parse_lldp_neighbors,
    parse_mlnx_qos,
    parse_roce_host_config,
    parse_sections,
    parse_speeds,
    parse_traffic_class,
)
from rackform.fabric.check_parse_switch import (
    Ecn,
    expand_port_set,
    parse_cumulus_qos,
    parse_frr_bgp,
    parse_interfaces,
    parse_onyx_running_config,
)

DATA = Path(__file__).parent / "data" / "fabric_check"


def sections(device: str):
    return parse_sections((DATA / f"{device}.snapshot").read_text())


def section_text(device: str, name: str) -> str:
    return sections(device)[name].text


# ---------------------------------------------------------------- framing


def test_snapshot_sections_carry_their_exit_status():
    found = sections("node-1")
    assert (found["ip-link"].rc, found["mlnx_qos:fab0"].rc, found["rdma:fab0"].rc) == (0, 127, 2)


def test_snapshot_section_text_has_no_framing_lines():
    text = section_text("node-1", "file:/etc/nccl.conf")
    assert "@@rackform" not in text and text.endswith("NCCL_IB_GID_INDEX=3")


# ---------------------------------------------------------------- links


def test_ip_links_give_mtu_state_alias_and_kind():
    links = parse_ip_links(section_text("leaf-1", "ip-link"))
    swp1 = links["swp1"]
    assert (swp1.mtu, swp1.up, swp1.alias, swp1.kind) == (9216, True, "node-1:fab0", "veth")


def test_ip_links_of_a_host_port():
    links = parse_ip_links(section_text("node-1", "ip-link"))
    assert (links["fab0"].mtu, links["fab0"].mac) == (9000, "02:42:10:00:00:11")


def test_ip_links_reject_text_that_is_not_json():
    with pytest.raises(ParseError, match="did not print JSON"):
        parse_ip_links("Device \"fab0\" does not exist.")


def test_speeds_in_megabits():
    assert parse_speeds(section_text("leaf-1", "speed"))["swp31"] == 10000


# ---------------------------------------------------------------- LLDP


def test_lldp_several_neighbours_come_as_a_list_and_are_all_read():
    neighbours = parse_lldp_neighbors(section_text("leaf-1", "lldp"))
    assert {port: [(n.system, n.port_id) for n in seen] for port, seen in neighbours.items()} == {
        "swp1": [("node-1", "fab0")], "swp2": [("node-2", "fab0")], "swp31": [("spine-1", "swp1")]}


def test_lldp_one_neighbour_comes_as_an_object():
    neighbours = parse_lldp_neighbors(section_text("node-1", "lldp"))
    (neighbour,) = neighbours["fab0"]
    assert (neighbour.system, neighbour.port_id, neighbour.port_id_type) == ("leaf-1", "swp1", "ifname")


def test_lldp_with_no_neighbours_is_empty():
    # lldpcli prints "{\n}" when it has seen no one yet (recorded right after the fabric stage).
    assert parse_lldp_neighbors("{\n}\n") == {}


# ---------------------------------------------------------------- Cumulus files


def test_interfaces_follow_source_lines_into_fragments():
    files = {name[len("file:"):]: section.text for name, section in sections("leaf-1").items()
             if name.startswith("file:/etc/network")}
    stanzas = parse_interfaces(files)
    assert (stanzas["swp1"].mtu, stanzas["swp1"].alias, stanzas["swp1"].source) == (
        9216, "node-1:fab0", "/etc/network/interfaces.d/rackform-fabric.intf")


def test_interfaces_ignore_fragments_that_are_not_sourced():
    files = {"/etc/network/interfaces": "source /etc/network/interfaces.d/*.intf\n",
             "/etc/network/interfaces.d/old.bak": "iface swp1\n    mtu 1500\n"}
    assert parse_interfaces(files) == {}


def test_frr_bgp_unnumbered_neighbours():
    bgp = parse_frr_bgp(section_text("leaf-1", "file:/etc/frr/frr.conf"))
    assert (bgp.asn, bgp.unnumbered_ports) == (65101, frozenset({"swp31"}))


def test_cumulus_qos_file_as_the_fabric_stage_writes_it():
    qos = parse_cumulus_qos(section_text("leaf-1", "file:/etc/cumulus/datapath/qos/qos_features.conf"), "leaf-1")
    assert (qos.trust("swp1"), qos.dscp_to_priority, qos.pfc("swp31"), qos.ecn("swp2")) == (
        "dscp", {26: 3, 48: 6}, (3,), Ecn(frozenset({3}), 150, 1500))


def test_cumulus_qos_file_holds_the_pfc_watchdog_ports():
    qos = parse_cumulus_qos(section_text("leaf-1", "file:/etc/cumulus/datapath/qos/qos_features.conf"), "leaf-1")
    assert qos.pfc_watchdog_ports == {"swp1", "swp2", "swp31"}


def test_cumulus_qos_without_watchdog_keys_runs_no_watchdog():
    qos = parse_cumulus_qos("pfc.port_group_list = [g]\npfc.g.cos_list = [3]\npfc.g.port_set = swp1\n", "x")
    assert qos.pfc_watchdog_ports == set()


def test_cumulus_qos_ports_outside_the_pfc_group_have_no_pfc():
    qos = parse_cumulus_qos("pfc.port_group_list = [g]\npfc.g.cos_list = [3]\npfc.g.port_set = swp1\n", "x")
    assert (qos.pfc("swp1"), qos.pfc("swp2")) == ((3,), ())


def test_cumulus_qos_egress_queue_map_moves_the_traffic_class():
    qos = parse_cumulus_qos("traffic.cos_3.priority_source.dscp = [26]\ncos_egr_queue.cos_3.uc = 5\n", "x")
    assert qos.traffic_class(qos.dscp_to_priority[26]) == 5


@pytest.mark.parametrize(("text", "ports"), [
    ("swp1-swp3,swp6", {"swp1", "swp2", "swp3", "swp6"}),
    ("swp1-3", {"swp1", "swp2", "swp3"}),
    ("allports", {"swp1", "swp31"}),
])
def test_port_sets(text, ports):
    assert expand_port_set(text, ["swp1", "swp31"]) == ports


# ---------------------------------------------------------------- Onyx


@pytest.fixture(scope="module")
def onyx():
    return parse_onyx_running_config((DATA / "onyx-leaf.running-config").read_text(), "leaf-1")


def test_onyx_port_settings(onyx):
    port = "Eth1/1"
    assert (onyx.trust(port), onyx.pfc(port), onyx.mtu_by_port[port], onyx.description_by_port[port]) == (
        "dscp", (3,), 9216, "node-1:fab0")


def test_onyx_ecn_thresholds_in_kilobytes(onyx):
    assert onyx.ecn("Eth1/1") == Ecn(frozenset({3}), 150, 1500)


def test_onyx_port_without_pfc_mode_on_has_no_pfc(onyx):
    assert (onyx.pfc("Eth1/2"), onyx.trust("Eth1/2")) == ((), "pcp")


def test_onyx_maps_dscp_to_priority_eight_to_one(onyx):
    assert (onyx.dscp_to_priority[26], onyx.dscp_to_priority[48]) == (3, 6)


def test_onyx_roce_lossless_profile_alone_means_pfc_trust_and_ecn_everywhere():
    qos = parse_onyx_running_config("   roce lossless\n", "x")
    assert (qos.pfc("Eth1/7"), qos.trust("Eth1/7"), qos.ecn("Eth1/7").traffic_classes) == ((3,), "dscp", {3})


# ---------------------------------------------------------------- hosts


def test_mlnx_qos_layout():
    qos = parse_mlnx_qos((DATA / "mlnx_qos.txt").read_text())
    assert (qos.trust, qos.pfc_priorities, qos.dscp_to_priority[26], qos.priority_to_tc[0], qos.priority_to_tc[3]) == (
        "dscp", (3,), 3, 1, 3)


def test_mlnx_qos_rejects_other_text():
    with pytest.raises(ParseError, match="not `mlnx_qos"):
        parse_mlnx_qos("sh: 1: mlnx_qos: not found")


@pytest.mark.parametrize(("text", "tos"), [("Global tclass=106\n", 106), ("", None)])
def test_traffic_class_file(text, tos):
    assert parse_traffic_class(text) == tos


def test_roce_host_settings_file():
    config = parse_roce_host_config(section_text("node-1", "file:/etc/rackform/roce-host.json"))
    assert (config.trust, config.pfc_priorities, config.roce_tos, config.ecn, config.cnp_priority, config.mtu) == (
        "dscp", (3,), 106, True, 6, 9000)


def test_nccl_conf():
    assert parse_env_lines(section_text("node-1", "file:/etc/nccl.conf")) == {
        "NCCL_IB_TC": "106", "NCCL_IB_GID_INDEX": "3"}
