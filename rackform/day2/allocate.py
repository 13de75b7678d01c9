"""Addresses for a new node, drawn deterministically from the site's prefixes.

Management: the BMC's host number on the management network when it is free (BMC
10.10.1.17 -> 10.10.0.17, the numbering sites keep), else the lowest free address. The
gateway, the Kubernetes API VIP and every address a host or switch holds are never
handed out.

Fabric: each cabled fabric port joins the subnet its neighbours on the same leaf and port
name already use (`fab0` on leaf-1: 10.20.1.0/24 in the lab), at the management host
number when free, else the lowest free; the subnet's first address is the leaf's and is
never given to a host. The same inputs give the same addresses, run after run.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from rackform.day2.errors import refuse
from rackform.model.site import Site


@dataclass(frozen=True, slots=True)
class FabricLink:
    """One of the new node's cabled fabric ports: host port -> leaf port."""

    port: str
    switch: str
    switch_port: str


def taken_management(site: Site) -> set[ipaddress.IPv4Address]:
    taken = {node.management_address for node in (*site.hosts.values(), *site.switches.values())
             if node.management_address is not None}
    taken |= {network.gateway for network in site.networks.values() if network.gateway is not None}
    if site.kubernetes is not None and site.kubernetes.api_vip is not None:
        taken.add(site.kubernetes.api_vip)
    return taken


def management_address(site: Site, bmc_address: ipaddress.IPv4Address | str | None,
                       taken: Iterable[ipaddress.IPv4Address] = ()) -> ipaddress.IPv4Address:
    """See the module doc; BadInput (exit 2) when the site has no management network or it is full."""
    management, oob = site.network_for("management"), site.network_for("oob")
    if management is None:
        raise refuse(site.loc, "networks", "no network with purpose management: a new node needs a management address")
    used = taken_management(site) | set(taken)
    prefix = management.prefix
    if bmc_address is not None and oob is not None:
        offset = int(ipaddress.IPv4Address(str(bmc_address))) - int(oob.prefix.network_address)
        if 0 < offset < prefix.num_addresses - 1:
            candidate = prefix.network_address + offset
            if candidate not in used:
                return candidate
    for candidate in prefix.hosts():
        if candidate not in used:
            return candidate
    raise refuse(site.network_locs.get(management.name), f"networks[{management.name}].prefix",
                 f"address exhausted: every address of {prefix} is taken ({len(used)} in use or reserved); "
                 f"widen the prefix or retire a node first")


def fabric_address(site: Site, link: FabricLink, host_number: int,
                   taken: Iterable[ipaddress.IPv4Interface] = ()) -> ipaddress.IPv4Interface:
    """The address of one new fabric port (module doc); BadInput when no subnet is known or it is full."""
    peers = _peer_subnets(site, link)
    if not peers:
        raise refuse(site.loc, "cabling", f"{link.switch}:{link.switch_port}: no host has a {link.port} address on "
                                          f"{link.switch} yet, so its subnet is unknown; give one host on that "
                                          f"leaf a fabric_ports.{link.port}.address first")
    subnet = Counter(peers).most_common(1)[0][0]
    used = {iface.ip for host in site.hosts.values() for iface in host.fabric_addresses.values()}
    used |= {iface.ip for iface in taken}
    first = subnet.network_address + 1  # the leaf's own address on the subnet
    candidates = ([subnet.network_address + host_number] if 1 < host_number < subnet.num_addresses - 1 else [])
    candidates += [address for address in subnet.hosts() if address != first]
    for candidate in candidates:
        if candidate not in used and candidate != first:
            return ipaddress.IPv4Interface(f"{candidate}/{subnet.prefixlen}")
    raise refuse(site.loc, "cabling", f"address exhausted: {link.switch}'s {link.port} subnet {subnet} has no free "
                                      f"address")


def _peer_subnets(site: Site, link: FabricLink) -> list[ipaddress.IPv4Network]:
    subnets = []
    for cable in site.cables:
        for near, far in ((cable.a, cable.b), (cable.b, cable.a)):
            host = site.hosts.get(near.device)
            if host is not None and far.device == link.switch and near.port == link.port \
                    and near.port in host.fabric_addresses:
                subnets.append(host.fabric_addresses[near.port].network)
    return subnets


def host_number(site: Site, address: ipaddress.IPv4Address) -> int:
    management = site.network_for("management")
    return int(address) - int(management.prefix.network_address) if management else 0
