"""The fabric consistency check, per link, on live outputs recorded from the chktest lab
(tests/unit/data/fabric_check/): the recording is clean, and each kind of drift planted
in it (one line of one device's output changed) is reported on the right links with
both ends' values and the design's."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fabric_check_support import DATA, SITE, make_root, onyx_leaf_site
from rackform.fabric.check import FabricReport, Mismatch, check_fabric, design_speed_mismatch
from rackform.fabric.check_ends import FabricLink, RocePath
from rackform.fabric.check_parse import RC_MARK, SECTION_MARK
from rackform.fabric.live import LiveDevice, Unreadable, read_cumulus, read_host, read_onyx
from rackform.model.loader import load_site
from rackform.model.site import Endpoint, Site
from rackform.model.source import Loc

SWITCHES = ("leaf-1", "spine-1")
HOSTS = ("node-1", "node-2")
QOS = "file:/etc/cumulus/datapath/qos/qos_features.conf"
HOST_LINK_1, HOST_LINK_2 = "node-1:fab0 - leaf-1:swp1", "node-2:fab0 - leaf-1:swp2"
UPLINK = "leaf-1:swp31 - spine-1:swp1"

Edit = Callable[[str], str]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Site:
    return load_site(SITE, make_root(tmp_path_factory.mktemp("chktest")))


# ---------------------------------------------------------------- planting drift in a recording


def snapshot(device: str) -> str:
    return (DATA / f"{device}.snapshot").read_text()


def replace_once(old: str, new: str) -> Edit:
    def edit(text: str) -> str:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
        return text.replace(old, new)
    return edit


def section_edit(name: str, change: Callable[[str], str], rc: int | None = None) -> Edit:
    """Change one section's text (and optionally its exit status) within a snapshot."""
    def edit(text: str) -> str:
        head = f"{SECTION_MARK}{name}\n"
        start = text.index(head) + len(head)
        end = text.index(RC_MARK, start)
        rc_end = text.index("\n", end)
        body = change(text[start:end].removesuffix("\n")) + "\n"
        status = text[end:rc_end] if rc is None else f"{RC_MARK}{rc}"
        return text[:start] + body + status + text[rc_end:]
    return edit


def json_edit(name: str, change: Callable[[object], None]) -> Edit:
    def rewrite(body: str) -> str:
        data = json.loads(body)
        change(data)
        return json.dumps(data)
    return section_edit(name, rewrite)


def link_edit(ifname: str, **fields) -> Edit:
    """Change one interface's record in `ip -j -d link` (None removes a field)."""
    def change(records):
        record = next(r for r in records if r["ifname"] == ifname)
        for key, value in fields.items():
            if value is None:
                record.pop(key, None)
            else:
                record[key] = value
    return json_edit("ip-link", change)


def drop_link(ifname: str) -> Edit:
    return json_edit("ip-link", lambda records: records.remove(next(r for r in records if r["ifname"] == ifname)))


def read(site: Site, device: str, edits: tuple[Edit, ...] = ()) -> LiveDevice:
    text = snapshot(device)
    for edit in edits:
        text = edit(text)
    if device in SWITCHES:
        return read_cumulus(device, text)
    return read_host(device, text, ["fab0"])


def check(site: Site, **edits: Edit | tuple[Edit, ...]) -> FabricReport:
    """The check against the recording, with `edits` (device name with _ for -) applied."""
    by_device = {name.replace("_", "-"): (e if isinstance(e, tuple) else (e,)) for name, e in edits.items()}
    live = {device: read(site, device, by_device.get(device, ())) for device in (*SWITCHES, *HOSTS)}
    return check_fabric(site, live, "recorded")


def found(report: FabricReport, setting: str, kind: str | None = None) -> list[Mismatch]:
    return [m for m in report.mismatches if m.setting == setting and (kind is None or m.kind == kind)]


def links(report: FabricReport, setting: str) -> set[str]:
    return {m.link for m in found(report, setting)}


# ---------------------------------------------------------------- clean


def test_the_recorded_lab_is_clean(site):
    report = check(site)
    assert report.ok, [m.message for m in report.mismatches]


def test_every_fabric_link_is_checked(site):
    assert check(site).links_checked == 3


def test_host_nic_values_are_not_guessed_where_there_is_no_rdma_nic(site):
    report = check(site)
    no_nic = {endpoint for (reason, _), endpoints in report.unreadable.items() if reason == "no RDMA NIC"
              for endpoint in endpoints}
    assert no_nic == {"node-1:fab0", "node-2:fab0"}


def test_veth_speeds_are_not_readable(site):
    report = check(site)
    reasons = {reason for reason, settings in report.unreadable if "speed_gbps" in settings}
    assert reasons == {"virtual cable (veth): no line rate"}


def test_the_design_alone_is_clean(site):
    report = check_fabric(site)
    assert (report.ok, report.live_source, report.links_checked) == (True, None, 3)


# ---------------------------------------------------------------- switch QoS drift


def test_pfc_priority_changed_on_a_leaf_is_reported_on_each_of_its_links(site):
    report = check(site, leaf_1=section_edit(QOS, lambda t: t.replace("pfc.roce_ports.cos_list = [3]",
                                                                      "pfc.roce_ports.cos_list = [4]")))
    assert links(report, "pfc_priorities") == {HOST_LINK_1, HOST_LINK_2, UPLINK}


def test_pfc_mismatch_carries_both_ends_and_the_design(site):
    report = check(site, leaf_1=section_edit(QOS, lambda t: t.replace("cos_list = [3]\npfc", "cos_list = [4]\npfc")))
    (mismatch,) = [m for m in found(report, "pfc_priorities") if m.link == HOST_LINK_1]
    assert (mismatch.kind, mismatch.design, mismatch.live) == (
        "live", {"node-1:fab0": (3,), "leaf-1:swp1": (3,)},
        {"node-1:fab0": Unreadable("no RDMA NIC"), "leaf-1:swp1": (4,)})


def test_pfc_changed_at_one_end_of_an_uplink_says_the_ends_disagree(site):
    report = check(site, spine_1=section_edit(QOS, lambda t: t.replace("cos_list = [3]\npfc", "cos_list = [3,4]\npfc")))
    (mismatch,) = found(report, "pfc_priorities")
    assert mismatch.link == UPLINK and "only one end honours" in mismatch.message


def test_trust_changed_to_pcp(site):
    report = check(site, leaf_1=section_edit(QOS, lambda t: t.replace("source_set = [dscp]", "source_set = [802.1p]")))
    assert {m.live["leaf-1:swp1"] for m in found(report, "trust") if m.link == HOST_LINK_1} == {"pcp"}


def test_roce_dscp_mapped_elsewhere(site):
    report = check(site, leaf_1=section_edit(QOS, lambda t: t.replace("cos_3.priority_source.dscp = [26]",
                                                                      "cos_3.priority_source.dscp = [24]")))
    mismatch = next(m for m in found(report, "roce_path") if m.link == HOST_LINK_1)
    assert mismatch.live["leaf-1:swp1"] == RocePath(26, None, None)


def test_roce_dscp_mapped_to_another_priority_moves_its_traffic_class(site):
    report = check(site, leaf_1=section_edit(QOS, lambda t: t.replace("cos_3.priority_source.dscp = [26]",
                                                                      "cos_4.priority_source.dscp = [26]")))
    mismatch = next(m for m in found(report, "roce_path") if m.link == HOST_LINK_1)
    assert str(mismatch.live["leaf-1:swp1"]) == "DSCP 26 -> priority 4 -> TC 4"


def test_cnp_on_another_priority(site):
    report = check(site, leaf_1=section_edit(QOS, lambda t: t.replace("cos_6.priority_source.dscp = [48]",
                                                                      "cos_5.priority_source.dscp = [48]")))
    assert links(report, "cnp_priority") == {HOST_LINK_1, HOST_LINK_2, UPLINK}


def test_ecn_turned_off(site):
    report = check(site, spine_1=section_edit(QOS, lambda t: t.replace("ecn_enable = true", "ecn_enable = false")))
    (mismatch,) = found(report, "ecn")
    assert (mismatch.link, mismatch.live) == (UPLINK, {"leaf-1:swp31": True, "spine-1:swp1": False})


def test_ecn_threshold_changed(site):
    report = check(site, leaf_1=section_edit(QOS, lambda t: t.replace("min_threshold_bytes = 153600",
                                                                      "min_threshold_bytes = 307200")))
    mismatch = next(m for m in found(report, "ecn_thresholds_kb") if m.link == HOST_LINK_1)
    assert (str(mismatch.design["leaf-1:swp1"]), str(mismatch.live["leaf-1:swp1"])) == ("150/1500 KB", "300/1500 KB")


def test_ecn_thresholds_reversed(site):
    def reverse(text: str) -> str:
        return (text.replace("min_threshold_bytes = 153600", "min_threshold_bytes = 1536000")
                .replace("max_threshold_bytes = 1536000", "max_threshold_bytes = 153600"))
    report = check(site, spine_1=section_edit(QOS, reverse))
    (mismatch,) = found(report, "ecn")
    assert "spine-1:swp1 ECN minimum 1500 KB is not below maximum 150 KB" in mismatch.message


def test_pfc_watchdog_dropped_from_a_cumulus_leaf(site):
    report = check(site, leaf_1=section_edit(QOS, lambda t: t.replace(
        "pfc_watchdog.pfc_wd_port_group.port_set = swp1,swp2,swp31", "pfc_watchdog.pfc_wd_port_group.port_set = swp31")))
    mismatches = found(report, "pfc_watchdog", "live")
    assert {m.link for m in mismatches} == {HOST_LINK_1, HOST_LINK_2}
    assert all(m.live[m.link.split(" - ")[1]] is False for m in mismatches)


def test_a_switch_without_the_qos_file_runs_lossy(site):
    report = check(site, spine_1=section_edit(QOS, lambda t: "cat: no such file", rc=1))
    assert {m.setting for m in report.mismatches} >= {"pfc_priorities", "trust", "roce_path", "ecn"}


# ---------------------------------------------------------------- MTU, link, description, BGP


def test_switch_port_mtu_below_host_mtu_plus_overhead(site):
    report = check(site, leaf_1=link_edit("swp1", mtu=9000))
    (mismatch,) = found(report, "mtu")
    assert mismatch.link == HOST_LINK_1 and "9022 B exceeds MTU 9000" in mismatch.message


def test_host_mtu_raised_to_the_switch_mtu(site):
    report = check(site, node_2=link_edit("fab0", mtu=9216))
    (mismatch,) = found(report, "mtu")
    assert (mismatch.link, mismatch.live) == (HOST_LINK_2, {"node-2:fab0": 9216, "leaf-1:swp2": 9216})


def test_uplink_mtu_differs_between_the_ends(site):
    report = check(site, spine_1=link_edit("swp1", mtu=1500))
    (mismatch,) = found(report, "mtu")
    assert mismatch.link == UPLINK and "frames above 1500 B are dropped one way" in mismatch.message


def test_mtu_in_the_interfaces_file_differs_from_the_design(site):
    report = check(site, leaf_1=replace_once("alias node-1:fab0\n    mtu 9216", "alias node-1:fab0\n    mtu 1500"))
    (mismatch,) = found(report, "mtu_persisted")
    assert (mismatch.link, mismatch.live["leaf-1:swp1"]) == (HOST_LINK_1, 1500)


def test_port_down(site):
    report = check(site, node_1=link_edit("fab0", flags=["BROADCAST", "MULTICAST", "UP"]))
    (mismatch,) = found(report, "link_state")
    assert mismatch.live["node-1:fab0"] == "down"


def test_port_missing(site):
    report = check(site, node_1=drop_link("fab0"))
    mismatch = next(m for m in found(report, "link_state") if m.link == HOST_LINK_1)
    assert mismatch.live["node-1:fab0"] == "missing"


def test_port_description_differs_from_the_cabling_plan(site):
    report = check(site, leaf_1=link_edit("swp2", ifalias="node-9:fab0"))
    (mismatch,) = found(report, "description")
    assert (mismatch.link, mismatch.design["leaf-1:swp2"]) == (HOST_LINK_2, "node-2:fab0")


def test_bgp_session_missing_on_an_uplink(site):
    report = check(site, leaf_1=replace_once(" neighbor swp31 interface peer-group fabric\n", ""))
    (mismatch,) = found(report, "bgp_unnumbered")
    assert (mismatch.link, mismatch.live) == (UPLINK, {"leaf-1:swp31": False, "spine-1:swp1": True})


# ---------------------------------------------------------------- speed


def physical(ifname: str, speed_mbps: int) -> tuple[Edit, Edit]:
    """The port as a real NIC would show it: no veth link kind, a line rate."""
    return (link_edit(ifname, linkinfo=None),
            section_edit("speed", lambda t: t.replace(f"/{ifname}/speed:10000", f"/{ifname}/speed:{speed_mbps}")))


def test_speeds_that_match_the_design(site):
    report = check(site, node_1=physical("fab0", 25000), leaf_1=physical("swp1", 25000))
    assert found(report, "speed_gbps") == []


def test_switch_port_trained_at_another_speed(site):
    report = check(site, node_1=physical("fab0", 25000), leaf_1=physical("swp1", 100000))
    (mismatch,) = found(report, "speed_gbps")
    assert (mismatch.design, mismatch.live) == ({"node-1:fab0": 25, "leaf-1:swp1": 25},
                                                {"node-1:fab0": 25, "leaf-1:swp1": 100})


def test_design_host_port_faster_than_its_switch_port():
    link = FabricLink(Endpoint("gpu-1", "fab0"), Endpoint("leaf-1", "swp5"), True, 400, 100, 4, Loc("site.yaml", 9))
    assert "trains at 100G" in design_speed_mismatch(link).message


# ---------------------------------------------------------------- LLDP


def lldp_port(port: str) -> Edit:
    """node-x's LLDP: the leaf port it sees on fab0."""
    return json_edit("lldp", lambda data: data["lldp"]["interface"]["fab0"]["port"]["id"].update(value=port))


def swap_leaf_neighbours(data) -> None:
    ports = data["lldp"]["interface"]
    first, second = ports[0]["swp1"], ports[1]["swp2"]
    ports[0]["swp1"], ports[1]["swp2"] = second, first


def test_two_swapped_cables_are_reported_on_both_links(site):
    report = check(site, leaf_1=json_edit("lldp", swap_leaf_neighbours),
                   node_1=lldp_port("swp2"), node_2=lldp_port("swp1"))
    assert links(report, "lldp") == {HOST_LINK_1, HOST_LINK_2}


def test_swapped_cable_names_what_each_end_sees(site):
    report = check(site, leaf_1=json_edit("lldp", swap_leaf_neighbours),
                   node_1=lldp_port("swp2"), node_2=lldp_port("swp1"))
    (mismatch,) = [m for m in found(report, "lldp") if m.link == HOST_LINK_1]
    assert mismatch.live == {"node-1:fab0": "leaf-1:swp2", "leaf-1:swp1": "node-2:fab0"}


def test_a_port_that_sees_no_neighbour(site):
    report = check(site, spine_1=section_edit("lldp", lambda t: "{\n}"))
    (mismatch,) = found(report, "lldp")
    assert mismatch.link == UPLINK and "spine-1:swp1 sees no LLDP neighbour" in mismatch.message


def test_a_port_that_sees_a_second_neighbour(site):
    def second(data):
        entries = data["lldp"]["interface"]
        entries.append({"swp1": entries[1]["swp2"]})
    report = check(site, leaf_1=json_edit("lldp", second))
    (mismatch,) = found(report, "lldp")
    assert mismatch.live["leaf-1:swp1"] == "node-1:fab0, node-2:fab0"


def test_lldp_system_name_sent_as_fqdn(site):
    def fqdn(data):
        chassis = data["lldp"]["interface"][0]["swp1"]["chassis"]
        chassis["node-1.chktest.rackform.test"] = chassis.pop("node-1")
    assert found(check(site, leaf_1=json_edit("lldp", fqdn)), "lldp") == []


def test_lldp_port_given_by_mac_is_resolved(site):
    def by_mac(data):
        data["lldp"]["interface"][0]["swp1"]["port"]["id"] = {"type": "mac", "value": "02:42:10:00:00:11"}
    assert found(check(site, leaf_1=json_edit("lldp", by_mac)), "lldp") == []


def test_lldpd_not_running_is_not_readable_rather_than_a_mismatch(site):
    report = check(site, spine_1=section_edit("lldp", lambda t: "unable to connect to socket", rc=1))
    unreadable = {reason: endpoints for (reason, settings), endpoints in report.unreadable.items()
                  if settings == ("lldp",)}
    assert (found(report, "lldp"), unreadable) == (
        [], {"lldpcli failed: unable to connect to socket": ["spine-1:swp1"]})


# ---------------------------------------------------------------- hosts with an RDMA NIC


MLNX_QOS = (DATA / "mlnx_qos.txt").read_text()
ECN_FILES = ("/sys/class/net/fab0/ecn/roce_np/enable/3:1\n/sys/class/net/fab0/ecn/roce_rp/enable/3:1\n"
             "/sys/class/net/fab0/ecn/roce_np/cnp_802p_prio:6")


def rdma_nic(mlnx_qos: str = MLNX_QOS, tclass: str = "Global tclass=106", ecn: str = ECN_FILES) -> tuple[Edit, ...]:
    return (section_edit("rdma:fab0", lambda t: "mlx5_0", rc=0),
            section_edit("mlnx_qos:fab0", lambda t: mlnx_qos, rc=0),
            section_edit("tclass:fab0", lambda t: tclass, rc=0),
            section_edit("ecn:fab0", lambda t: ecn, rc=0))


def test_a_host_nic_that_agrees_is_clean_and_read(site):
    report = check(site, node_1=rdma_nic())
    readable_gaps = {endpoint for (reason, _), endpoints in report.unreadable.items() if reason == "no RDMA NIC"
                     for endpoint in endpoints}
    assert (report.ok, readable_gaps) == (True, {"node-2:fab0"})


def test_host_nic_pfc_on_an_extra_priority(site):
    report = check(site, node_1=rdma_nic(MLNX_QOS.replace("enabled     0   0   0   1   0",
                                                          "enabled     0   0   0   1   1")))
    (mismatch,) = found(report, "pfc_priorities")
    assert mismatch.live == {"node-1:fab0": (3, 4), "leaf-1:swp1": (3,)} and "deadlock" in mismatch.message


def test_host_nic_trusting_pcp_against_a_dscp_switch(site):
    report = check(site, node_1=rdma_nic(MLNX_QOS.replace("trust state: dscp", "trust state: pcp")))
    (mismatch,) = found(report, "trust")
    assert "node-1:fab0 trusts pcp, leaf-1:swp1 trusts dscp" in mismatch.message


def test_host_marking_another_dscp(site):
    report = check(site, node_1=rdma_nic(tclass="Global tclass=98"))  # DSCP 24: priority 3, but not the RoCE DSCP
    (mismatch,) = found(report, "roce_path")
    assert mismatch.live["node-1:fab0"] == RocePath(24, 3, 3)


def test_host_nic_ecn_off(site):
    report = check(site, node_1=rdma_nic(ecn=ECN_FILES.replace("roce_rp/enable/3:1", "roce_rp/enable/3:0")))
    (mismatch,) = found(report, "ecn")
    assert mismatch.live == {"node-1:fab0": False, "leaf-1:swp1": True}


# ---------------------------------------------------------------- what roce_host persisted


def test_persisted_pfc_differs_from_the_design(site):
    persisted = replace_once('"pfc_priorities": [\n            3\n', '"pfc_priorities": [\n            4\n')
    report = check(site, node_2=persisted)
    (mismatch,) = found(report, "config.pfc_priorities")
    assert (mismatch.link, mismatch.live) == (HOST_LINK_2, {"node-2:fab0": (4,)})


def test_persisted_settings_missing(site):
    report = check(site, node_1=section_edit("file:/etc/rackform/roce-host.json", lambda t: "cat: no such file", rc=1))
    (mismatch,) = found(report, "roce_host_config")
    assert (mismatch.link, mismatch.live) == ("node-1 (host-wide)", {"node-1": "missing"})


@pytest.mark.parametrize(("edit", "setting", "value"), [
    (replace_once("NCCL_IB_TC=106", "NCCL_IB_TC=0"), "nccl_ib_tc", "0"),
    (section_edit("unit", lambda t: "disabled", rc=1), "roce_host_unit", "disabled"),
    (replace_once("net.ipv4.tcp_ecn = 1", "net.ipv4.tcp_ecn = 2"), "net.ipv4.tcp_ecn", "2"),
])
def test_host_wide_settings(site, edit, setting, value):
    (mismatch,) = check(site, node_2=edit).mismatches
    assert (mismatch.link, mismatch.setting, mismatch.live) == ("node-2 (host-wide)", setting, {"node-2": value})


# ---------------------------------------------------------------- devices that cannot be read


def test_an_unreachable_device_is_a_mismatch(site):
    live = {device: read(site, device) for device in (*SWITCHES, *HOSTS)}
    live["spine-1"] = LiveDevice("spine-1", "cumulus", error="SSH to 10.66.0.202 failed: Connection refused")
    report = check_fabric(site, live, "recorded")
    assert [(m.link, m.kind) for m in report.mismatches] == [("spine-1", "unreachable")]


# ---------------------------------------------------------------- the design itself


def variant(tmp_path: Path, old: str, new: str) -> Site:
    root = make_root(tmp_path)
    path = root / "topologies" / "sites" / f"{SITE}.yaml"
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    return load_site(SITE, root)


def test_design_override_that_breaks_pfc_is_reported_per_link(tmp_path):
    site = variant(tmp_path, "        switch: {role: leaf, os: cumulus, fabric: compute, asn: 65101}\n",
                   "        switch: {role: leaf, os: cumulus, fabric: compute, asn: 65101}\n"
                   "        roce_overrides: {pfc_priorities: [3, 4]}\n")
    report = check_fabric(site)
    assert {(m.link, m.kind) for m in found(report, "pfc_priorities")} == {
        (HOST_LINK_1, "design"), (HOST_LINK_2, "design"), (UPLINK, "design")}


def test_design_override_mtu_too_small_on_one_leaf(tmp_path):
    site = variant(tmp_path, "        switch: {role: leaf, os: cumulus, fabric: compute, asn: 65101}\n",
                   "        switch: {role: leaf, os: cumulus, fabric: compute, asn: 65101}\n"
                   "        roce_overrides: {mtu: 9000}\n")
    report = check_fabric(site)
    assert links(report, "mtu") == {HOST_LINK_1, HOST_LINK_2, UPLINK}


# ---------------------------------------------------------------- an Onyx leaf


@pytest.fixture(scope="module")
def onyx_site(tmp_path_factory) -> Site:
    return onyx_leaf_site(tmp_path_factory.mktemp("chktest-onyx"))


@pytest.fixture(scope="module")
def onyx_report(onyx_site) -> FabricReport:
    lldp = ("Ethernet 1/1\nRemote Index: 1\nRemote port-id: fab0; port id subtype: local\n"
            "Remote port description: fab0\nRemote system name: node-1\n")
    live = {"leaf-1": read_onyx("leaf-1", (DATA / "onyx-leaf.running-config").read_text(), lldp),
            "spine-1": read(onyx_site, "spine-1"), "node-1": read(onyx_site, "node-1"),
            "node-2": read(onyx_site, "node-2")}
    return check_fabric(onyx_site, live, "recorded")


def test_onyx_port_with_the_lossless_lines_agrees(onyx_report):
    # LLDP aside: the hosts' recorded neighbour is the Cumulus leaf's swp1.
    assert [m.setting for m in onyx_report.mismatches
            if m.link == "node-1:fab0 - leaf-1:Eth1/1" and m.setting != "lldp"] == []


def test_onyx_link_state_is_not_read_but_lldp_is(onyx_report):
    reasons = {reason for (reason, settings), endpoints in onyx_report.unreadable.items()
               if "leaf-1:Eth1/1" in endpoints}
    assert reasons == {"not read from Onyx"}


def test_onyx_port_without_them_is_reported(onyx_report):
    settings = {m.setting for m in onyx_report.mismatches if m.link == "node-2:fab0 - leaf-1:Eth1/2"}
    assert settings >= {"pfc_priorities", "trust", "ecn", "mtu", "pfc_watchdog", "description"}
