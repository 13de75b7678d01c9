"""rackform.render.host_vars.own_host_vars, built key by key, equals a plain version of it:
the same keys in the same order, the same values (addresses as str() writes them)."""

from __future__ import annotations

import sys
from dataclasses import replace
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

import pytest

from rackform.model.loader import load_site
from rackform.render.host_vars import (_HOST_OVERRIDES, _overrides, _place, _present, gpu_vars, own_host_vars,
                                       peer_index)

REPO = Path(__file__).resolve().parents[2]
SHIPPED_SITES = sorted(path.stem for path in (REPO / "topologies" / "sites").glob("*.yaml"))


def plain_own_host_vars(host, peers) -> dict:
    fabric_ports: dict[str, dict] = {}
    for port in host.ports.values():
        peer = peers.get((host.name, port.name))
        address = host.fabric_addresses.get(port.name)
        mac = host.fabric_macs.get(port.name)
        if port.role != "fabric" or (peer is None and address is None and mac is None):
            continue
        fabric_ports[port.name] = _present(
            address=None if address is None else str(address),
            mac=mac,
            speed_gbps=port.speed_gbps,
            peer_switch=peer.device if peer else None,
            peer_port=peer.port if peer else None,
        )
    return {
        **_present(
            ansible_host=None if host.management_address is None else str(host.management_address),
            management_address=None if host.management_address is None else str(host.management_address),
            management_mac=host.management_mac,
            bmc_address=None if host.bmc_address is None else str(host.bmc_address),
            bmc_mac=host.bmc_mac,
            serial_number=host.serial,
        ),
        **_place(host.device),
        "host_role": host.role,
        "fabric_ports": fabric_ports,
        **gpu_vars(host),
        **_overrides(host.device, _HOST_OVERRIDES),
    }


def assert_same(host, peers):
    fast, plain = own_host_vars(host, peers), plain_own_host_vars(host, peers)
    assert fast == plain
    assert list(fast) == list(plain)
    assert [list(port) for port in fast["fabric_ports"].values()] == [list(port) for port in plain["fabric_ports"].values()]


@pytest.mark.parametrize("site_name", [*SHIPPED_SITES, "generated"])
def test_every_host_of_a_site_gets_the_plain_versions_variables(site_name, tmp_path):
    if site_name == "generated":
        sys.path.insert(0, str(REPO / "bench"))
        from gen_site import SITE_NAME, write_site

        site = load_site(SITE_NAME, write_site(tmp_path / "root", 300))
    else:
        site = load_site(site_name, REPO)
    peers = peer_index(site)
    for host in site.hosts.values():
        assert_same(host, peers)


def test_hosts_missing_facts_or_cables_get_the_plain_versions_variables():
    site = load_site("lab", REPO)
    peers = peer_index(site)
    host = next(host for host in site.hosts.values() if host.fabric_addresses)
    port = next(iter(host.fabric_addresses))
    bare = replace(host, management_address=None, management_mac=None, bmc_address=None, bmc_mac=None, serial=None,
                   fabric_addresses={}, fabric_macs={})
    assert_same(bare, peers)
    uncabled = replace(host, name="not-cabled", fabric_macs={port: "02:00:00:00:00:01"},
                       fabric_addresses={port: IPv4Interface("10.9.0.1/31")}, management_address=IPv4Address("0.0.0.0"))
    assert_same(uncabled, peers)
    assert own_host_vars(uncabled, peers)["fabric_ports"] == {port: {"address": "10.9.0.1/31", "mac": "02:00:00:00:00:01",
                                                                    "speed_gbps": host.ports[port].speed_gbps}}


def test_a_host_with_roce_overrides_gets_the_plain_versions_variables():
    from rackform.model.schema import RoceOverrides

    site = load_site("campus", REPO)
    peers = peer_index(site)
    gpu = next(host for host in site.hosts.values() if host.role == "gpu")
    overridden = replace(gpu, device=replace(gpu.device, roce_overrides=RoceOverrides(mtu=4200, trust="pcp", roce_tos=106)))
    assert_same(overridden, peers)
    assert own_host_vars(overridden, peers)["fabric_host_mtu"] == 4200
    assert "gpu_node_expected_count" in own_host_vars(overridden, peers)
