"""`rackform fabric check` reads an Onyx switch's LLDP neighbours (`show lldp interfaces
ethernet remote`) and compares them with the cabling plan, as it does for Cumulus and hosts:
the parser on Onyx's printed shape, then the Onyx CLI emulator (a rackform stand-in, not Onyx)
read over netmiko and checked against the chktest design with leaf-1 running Onyx."""

from __future__ import annotations

import shutil

import pytest

from fabric_check_support import DATA, onyx_leaf_site
from rackform.fabric.check import check_fabric
from rackform.fabric.check_parse import LldpNeighbor
from rackform.fabric.check_parse_switch import parse_onyx_lldp_remote
from rackform.fabric.live import OnyxLogin, SshTransport, Target, read_cumulus, read_device, read_host
from rackform.lab.onyx_emulator import OnyxEmulator

PASSWORD = "lab-only-password"
ONYX_LINK_1, ONYX_LINK_2 = "node-1:fab0 - leaf-1:Eth1/1", "node-2:fab0 - leaf-1:Eth1/2"
ONYX_UPLINK = "leaf-1:Eth1/31 - spine-1:swp1"
AS_CABLED = {"1/1": ("node-1", "fab0"), "1/2": ("node-2", "fab0"), "1/31": ("spine-1", "swp1")}

# The shape of Onyx's manual (LLDP chapter: `show lldp interfaces ethernet 1/1 remote`).
MANUAL_OUTPUT = """\
Ethernet 1/1
Remote Index: 1
Remote chassis id: 00:11:22:33:44:55 ; chassis id subtype: mac
Remote port-id: ethernet 1/2; port id subtype: local
Remote port description: ethernet 1/2
Remote system name: remote-system
Remote system description: remote-system-description

Ethernet 1/2
"""


def test_onyx_lldp_output_becomes_neighbours_per_design_port_name():
    assert parse_onyx_lldp_remote(MANUAL_OUTPUT) == {
        "Eth1/1": [LldpNeighbor(system="remote-system", port_id="ethernet 1/2", port_id_type="local",
                                port_descr="ethernet 1/2")]}


def test_onyx_port_id_given_as_a_mac_is_named_as_lldpcli_names_it():
    text = "Eth1/4\nRemote Index: 1\nRemote port-id: 0c:42:a1:00:00:01; port id subtype: MAC address\n"
    (neighbour,) = parse_onyx_lldp_remote(text)["Eth1/4"]
    assert (neighbour.port_id, neighbour.port_id_type) == ("0c:42:a1:00:00:01", "mac")


# ---------------------------------------------------------------- the emulator, read over netmiko


@pytest.fixture(scope="module")
def onyx_site(tmp_path_factory):
    return onyx_leaf_site(tmp_path_factory.mktemp("chktest-onyx"))


@pytest.fixture(scope="module")
def onyx(tmp_path_factory):
    state = tmp_path_factory.mktemp("onyx")
    shutil.copy(DATA / "onyx-leaf.running-config", state / "saved-config.txt")  # lldp on, replayed at boot
    with OnyxEmulator("leaf-1", 32, state, password=PASSWORD) as emulator:
        yield emulator


def read_leaf(onyx: OnyxEmulator, neighbours: dict[str, tuple[str, str]]):
    onyx.set_lldp_neighbours(neighbours)
    login = OnyxLogin(password=PASSWORD, known_hosts=onyx.scanned_known_hosts())
    return read_device(Target("leaf-1", "onyx", "127.0.0.1", port=onyx.port), SshTransport(), login)


def check_with(onyx_site, leaf):
    live = {"leaf-1": leaf,
            "spine-1": read_cumulus("spine-1", (DATA / "spine-1.snapshot").read_text()),
            "node-1": read_host("node-1", (DATA / "node-1.snapshot").read_text(), ["fab0"]),
            "node-2": read_host("node-2", (DATA / "node-2.snapshot").read_text(), ["fab0"])}
    return check_fabric(onyx_site, live, "emulated")


def onyx_end_problems(report) -> list[str]:
    """What the LLDP check says about the Onyx ends (the recorded hosts and spine saw a Cumulus leaf)."""
    return [part for m in report.mismatches if m.setting == "lldp"
            for part in m.message.split("; ") if part.startswith("leaf-1:Eth1/")]


def test_onyx_neighbours_are_read_over_netmiko(onyx):
    leaf = read_leaf(onyx, AS_CABLED)
    assert leaf.error is None
    assert {port: [(n.system, n.port_descr) for n in seen] for port, seen in leaf.lldp.items()} == {
        "Eth1/1": [("node-1", "fab0")], "Eth1/2": [("node-2", "fab0")], "Eth1/31": [("spine-1", "swp1")]}


def test_onyx_ends_cabled_as_planned_agree(onyx, onyx_site):
    report = check_with(onyx_site, read_leaf(onyx, AS_CABLED))
    lldp = {m.link: m for m in report.mismatches if m.setting == "lldp"}
    assert onyx_end_problems(report) == []
    assert lldp[ONYX_LINK_1].live["leaf-1:Eth1/1"] == "node-1:fab0"
    assert not any("leaf-1:Eth1/" in endpoint for (reason, _), endpoints in report.unreadable.items()
                   if "LLDP" in reason for endpoint in endpoints)


def test_two_swapped_cables_on_the_onyx_leaf_are_reported(onyx, onyx_site):
    swapped = {**AS_CABLED, "1/1": ("node-2", "fab0"), "1/2": ("node-1", "fab0")}
    report = check_with(onyx_site, read_leaf(onyx, swapped))
    assert sorted(onyx_end_problems(report)) == ["leaf-1:Eth1/1 sees node-2:fab0", "leaf-1:Eth1/2 sees node-1:fab0"]


def test_an_onyx_port_that_sees_no_neighbour(onyx, onyx_site):
    report = check_with(onyx_site, read_leaf(onyx, {"1/1": ("node-1", "fab0"), "1/2": ("node-2", "fab0")}))
    assert onyx_end_problems(report) == ["leaf-1:Eth1/31 sees no LLDP neighbour"]
