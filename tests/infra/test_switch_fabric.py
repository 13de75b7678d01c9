"""Stage fabric (role switch_baseline) on the Cumulus switches: hostname, cabled
ports described and at the fabric MTU, FRR running, BGP up on leaf-spine links."""

from __future__ import annotations

import pytest

from checklib import bgp_peer_states, mismatches

pytestmark = [pytest.mark.stage("fabric"), pytest.mark.machines("cumulus")]

FRR_UNIT = "frr.service"


@pytest.fixture
def switch_ports(machine_vars) -> dict:
    """The switch's cabled ports (inventory `switch_ports`, from the cabling plan)."""
    ports = machine_vars.get("switch_ports") or {}
    if not ports:
        pytest.skip("no cabled ports")
    return ports


def test_hostname_is_inventory_name(host, machine):
    hostname = host.check_output("hostname")
    assert hostname == machine, f"hostname is {hostname}, the inventory says {machine}"


def test_frr_running(unit_state):
    state = unit_state(FRR_UNIT)
    assert state["ActiveState"] == "active", f"{FRR_UNIT} is {state['ActiveState']} ({state['SubState']})"


def test_cabled_ports_up(switch_ports, links):
    problems = [f"{port} ({'down' if port in links else 'missing'})"
                for port in switch_ports if port not in links or not links[port].up]
    assert not problems, f"cabled ports not up: {', '.join(problems)}"


def test_cabled_ports_mtu(switch_ports, links, machine_vars):
    if "fabric_switch_mtu" not in machine_vars:
        pytest.skip("not a leaf or spine: its ports keep their own MTU")
    live = {port: links[port].mtu for port in switch_ports if port in links}
    problems = mismatches(live, dict.fromkeys(switch_ports, int(machine_vars["fabric_switch_mtu"])))
    assert not problems, f"port MTU {problems}"


def test_port_descriptions(switch_ports, links):
    live = {port: repr(links[port].alias) for port in switch_ports if port in links}
    problems = mismatches(live, {port: repr(link["description"]) for port, link in switch_ports.items()})
    assert not problems, f"port description {problems}"


def test_bgp_sessions_established(host, machine_vars, switch_ports):
    peers = [port for port, link in switch_ports.items() if link.get("bgp_peer")]
    if not peers or not machine_vars.get("switch_asn"):
        pytest.skip("no leaf-spine links: no BGP sessions to check")
    output = host.run("vtysh -c 'show bgp summary json'").stdout
    problems = mismatches(bgp_peer_states(output), dict.fromkeys(peers, "Established"))
    assert not problems, f"BGP session {problems}"
