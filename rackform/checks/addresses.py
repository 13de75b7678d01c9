"""Preflight checks: addresses. Every address inside its network, none used twice,
no overlapping prefixes, enough room in each prefix, and MACs and host names unique."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from typing import NamedTuple

from rackform.checks.registry import check
from rackform.checks.cabling import host_fabric_links
from rackform.checks.findings import Finding
from rackform.checks.run_memo import derived
from rackform.model.schema import Network
from rackform.model.site import Host, Site, Switch
from rackform.model.source import Loc

FABRIC_PURPOSES = ("compute_fabric", "storage_fabric")


class Assigned(NamedTuple):
    """One address or MAC given to a host or switch in the inventory (a tuple: there
    is one per interface of the site, and only the reported ones need a file line)."""

    node: Host | Switch
    key: str
    """The inventory key, e.g. `management_address` or `fabric_ports.fab0.address`."""
    loc_key: str
    """The key whose line is reported (a fabric port's addresses sit on its line)."""

    @property
    def loc(self) -> Loc:
        return _var_loc(self.node, self.loc_key)

    @property
    def path(self) -> str:
        return f"{self.node.name}.{self.key}"

    def __str__(self) -> str:
        return f"{self.node.name} {self.key} ({self.loc})"


def _var_loc(node: Host | Switch, key: str) -> Loc:
    return node.var_locs.get(key) or node.vars_loc or node.loc


def _nodes(site: Site) -> Iterator[Host | Switch]:
    yield from site.hosts.values()
    yield from site.switches.values()


_PORT_KEYS: dict[str, tuple[str, str, str]] = {}
"""port -> its address key, its MAC key and its line's key: a site names a few ports, 20k times."""


def _port_keys(port: str) -> tuple[str, str, str]:
    keys = _PORT_KEYS.get(port)
    if keys is None:
        keys = _PORT_KEYS[port] = (f"fabric_ports.{port}.address", f"fabric_ports.{port}.mac", f"fabric_ports.{port}")
    return keys


def assigned_addresses(site: Site) -> Iterator[tuple[IPv4Address, Assigned]]:
    """Every management, BMC and fabric address of every host and switch."""
    for node in _nodes(site):
        if node.management_address is not None:
            yield node.management_address, Assigned(node, "management_address", "management_address")
        if isinstance(node, Host):
            if node.bmc_address is not None:
                yield node.bmc_address, Assigned(node, "bmc_address", "bmc_address")
            for port, interface in node.fabric_addresses.items():
                address_key, _mac_key, line_key = _port_keys(port)
                yield interface.ip, Assigned(node, address_key, line_key)


def assigned_address_list(site: Site) -> tuple[tuple[IPv4Address, Assigned], ...]:
    """assigned_addresses(site), listed once per run of the checks (three checks read it)."""
    return derived(site, "assigned_addresses", lambda site: tuple(assigned_addresses(site)))


def _networks(site: Site, *purposes: str) -> list[Network]:
    return [network for network in site.networks.values() if network.purpose in purposes]


def _shown(networks: list[Network]) -> str:
    return ", ".join(f"{network.name} ({network.prefix})" for network in networks)


def _networks_loc(site: Site) -> Loc:
    return min(site.network_locs.values(), key=lambda loc: loc.line, default=site.loc)


def _usable_addresses(prefix: IPv4Network) -> int:
    """Host addresses in a prefix: all but network and broadcast, except in /31 and /32."""
    return prefix.num_addresses if prefix.prefixlen >= 31 else prefix.num_addresses - 2


def _in_prefix_findings(site: Site, check_name: str, purpose: str, key: str,
                        uses: list[tuple[IPv4Address, Host | Switch]]):
    """A finding for each (address, its node's `key`) in none of the `purpose` networks.
    The node's Assigned (its key and line) is only made for a finding: 10k of each per site."""
    networks = _networks(site, purpose)
    if not networks:
        if uses:
            yield Finding(
                check_name, "error", _networks_loc(site), "networks",
                f"{len(uses)} {key} value(s) given but no network has purpose '{purpose}'; add one",
            )
        return
    ranges = _ranges(networks)
    for address, node in uses:
        if not _in_ranges(int(address), ranges):
            use = Assigned(node, key, key)
            yield Finding(
                check_name, "error", use.loc, use.path,
                f"{address} is outside the {purpose} network {_shown(networks)}",
            )


def _ranges(networks: list[Network]) -> list[tuple[int, int]]:
    """(netmask, network address) of each network's prefix, as numbers: an address is in the
    prefix when its number masked is the network's (what IPv4Network's `in` works out, in Python)."""
    return [(int(network.prefix.netmask), int(network.prefix.network_address)) for network in networks]


def _in_ranges(number: int, ranges: list[tuple[int, int]]) -> bool:
    for mask, network in ranges:
        if number & mask == network:
            return True
    return False


# ---------------------------------------------------------------- checks


@check
def management_addresses_in_prefix(site: Site) -> Iterator[Finding]:
    """Every management address of a host or switch lies in a `management` network."""
    uses = [(node.management_address, node) for node in _nodes(site) if node.management_address is not None]
    yield from _in_prefix_findings(site, "management_addresses_in_prefix", "management", "management_address", uses)


@check
def bmc_addresses_in_prefix(site: Site) -> Iterator[Finding]:
    """Every BMC address lies in an `oob` network."""
    uses = [(host.bmc_address, host) for host in site.hosts.values() if host.bmc_address is not None]
    yield from _in_prefix_findings(site, "bmc_addresses_in_prefix", "oob", "bmc_address", uses)


@check
def fabric_addresses_in_prefix(site: Site) -> Iterator[Finding]:
    """A fabric port's address lies in the fabric network of the switch it is cabled to
    (in any fabric network when that switch names none); the port exists on the host."""
    fabric_networks = _networks(site, *FABRIC_PURPOSES)
    fabric_ranges = _ranges(fabric_networks)
    ranges = dict(zip(site.networks, _ranges(list(site.networks.values()))))
    switch_of_port = {(link.host.name, link.host_port.name): link.switch for link in host_fabric_links(site)}
    for host in site.hosts.values():
        for port, interface in host.fabric_addresses.items():
            # The location and the key are only worked out for a finding: 20k ports at 10k nodes.
            spec = host.ports.get(port)
            if spec is None or spec.role != "fabric":
                fabric_ports = [p.name for p in host.ports.values() if p.role == "fabric"]
                yield Finding(
                    "fabric_addresses_in_prefix", "error", _var_loc(host, f"fabric_ports.{port}"),
                    f"{host.name}.fabric_ports.{port}",
                    f"{host.name} ({host.block.name}) has no fabric port '{port}'; "
                    f"its fabric ports: {', '.join(fabric_ports) or 'none'}",
                )
                continue
            number = int(interface)  # its address's number: `interface.ip in prefix`, in C (_in_ranges)
            switch = switch_of_port.get((host.name, port))
            if switch is not None and switch.fabric in ranges:
                network = site.networks[switch.fabric]
                if not _in_ranges(number, [ranges[switch.fabric]]):
                    yield Finding(
                        "fabric_addresses_in_prefix", "error", _var_loc(host, f"fabric_ports.{port}"),
                        f"{host.name}.fabric_ports.{port}.address",
                        f"{interface} is outside {network.name} ({network.prefix}), the fabric network of "
                        f"{switch.name} that {host.name}:{port} is cabled to",
                    )
            elif not _in_ranges(number, fabric_ranges):
                yield Finding(
                    "fabric_addresses_in_prefix", "error", _var_loc(host, f"fabric_ports.{port}"),
                    f"{host.name}.fabric_ports.{port}.address",
                    f"{interface} is outside every fabric network: {_shown(fabric_networks) or 'none defined'}",
                )


@check
def unique_addresses(site: Site) -> Iterator[Finding]:
    """No management, BMC or fabric address is given twice, across hosts and switches."""
    # Keyed by the address's number: an IPv4Address hashes through hex() in Python, and the
    # site's 40k addresses are all distinct (equal numbers: equal IPv4 addresses).
    first: dict[int, Assigned] = {}
    for address, use in assigned_address_list(site):
        number = int(address)
        if number in first:
            yield Finding(
                "unique_addresses", "error", use.loc, use.path,
                f"{address} is already {first[number]}: every address once",
            )
        else:
            first[number] = use


@check
def unique_macs(site: Site) -> Iterator[Finding]:
    """No MAC address is given twice, across hosts and switches."""
    first: dict[str, tuple[Host | Switch, str, str]] = {}  # Assigned's fields: made one only for a finding
    for node in _nodes(site):
        given = []
        if node.management_mac is not None:
            given.append((node.management_mac, "management_mac", "management_mac"))
        if isinstance(node, Host):
            if node.bmc_mac is not None:
                given.append((node.bmc_mac, "bmc_mac", "bmc_mac"))
            for port, mac in node.fabric_macs.items():
                _address_key, mac_key, line_key = _port_keys(port)
                given.append((mac, mac_key, line_key))
        for mac, key, line_key in given:
            if mac in first:
                use = Assigned(node, key, line_key)
                yield Finding(
                    "unique_macs", "error", use.loc, use.path,
                    f"{mac} is already {Assigned(*first[mac])}: a MAC is unique per interface",
                )
            else:
                first[mac] = (node, key, line_key)


@check
def unique_hostnames(site: Site) -> Iterator[Finding]:
    """No host shares its name with a switch (they share one DNS zone and inventory)."""
    for name in sorted(site.hosts.keys() & site.switches.keys()):
        host, switch = site.hosts[name], site.switches[name]
        yield Finding(
            "unique_hostnames", "error", switch.loc, f"racks[{switch.device.rack}].devices[{name}].name",
            f"switch {name} has the name of host {name} ({host.loc}): rename one",
        )


@dataclass(frozen=True, slots=True)
class _Prefix:
    prefix: IPv4Network
    key: str
    loc: Loc


def _site_prefixes(site: Site) -> list[_Prefix]:
    prefixes = [
        _Prefix(network.prefix, f"networks[{name}].prefix", site.network_locs[name])
        for name, network in site.networks.items()
    ]
    if site.kubernetes is not None and site.kubernetes_loc is not None:
        prefixes.append(_Prefix(site.kubernetes.pod_prefix, "kubernetes.pod_prefix", site.kubernetes_loc))
        prefixes.append(_Prefix(site.kubernetes.service_prefix, "kubernetes.service_prefix", site.kubernetes_loc))
    return prefixes


@check
def prefixes_do_not_overlap(site: Site) -> Iterator[Finding]:
    """Network, pod and service prefixes are disjoint (sorted sweep: n log n)."""
    ordered = sorted(_site_prefixes(site), key=lambda p: (p.prefix.network_address, p.prefix.prefixlen))
    widest: _Prefix | None = None
    for item in ordered:
        if widest is not None and item.prefix.network_address <= widest.prefix.broadcast_address:
            yield Finding(
                "prefixes_do_not_overlap", "error", item.loc, item.key,
                f"{item.prefix} overlaps {widest.key} {widest.prefix} (line {widest.loc.line}): "
                "routes and addresses would be ambiguous; pick a disjoint prefix",
            )
        if widest is None or item.prefix.broadcast_address > widest.prefix.broadcast_address:
            widest = item


def _addresses_needed(site: Site) -> dict[str, tuple[int, str]]:
    """Addresses each network must hold, with what they are for, by network name."""
    needed: dict[str, tuple[int, str]] = {}
    management, oob = _networks(site, "management"), _networks(site, "oob")
    if len(management) == 1:
        managed = [node for node in _nodes(site) if not isinstance(node, Switch) or node.os != "unmanaged"]
        needed[management[0].name] = (len(managed), f"{len(managed)} hosts and managed switches")
    if len(oob) == 1:
        needed[oob[0].name] = (len(site.hosts), f"{len(site.hosts)} host BMCs")
    ports_per_fabric: dict[str, int] = defaultdict(int)
    for link in host_fabric_links(site):
        if link.switch.fabric is not None:
            ports_per_fabric[link.switch.fabric] += 1
    for name, count in ports_per_fabric.items():
        needed[name] = (count, f"{count} cabled host fabric ports")
    return needed


@check
def prefix_capacity(site: Site) -> Iterator[Finding]:
    """Each network's prefix has room for the hosts on it, its gateway and the API VIP."""
    vip = site.kubernetes.api_vip if site.kubernetes is not None else None
    for name, (count, what) in _addresses_needed(site).items():
        network = site.networks.get(name)
        if network is None:
            continue
        extras = []
        if network.gateway is not None:
            extras.append("the gateway")
        if vip is not None and vip in network.prefix:
            extras.append("the API VIP")
        total = count + len(extras)
        usable = _usable_addresses(network.prefix)
        if total > usable:
            yield Finding(
                "prefix_capacity", "error", site.network_locs[name], f"networks[{name}].prefix",
                f"{network.prefix} holds {usable} usable addresses but {name} needs {total} "
                f"({', '.join([what, *extras])}): use a shorter prefix",
            )


@check
def api_vip_address(site: Site) -> Iterator[Finding]:
    """The Kubernetes API VIP lies in the management network and belongs to no host or gateway."""
    if site.kubernetes is None or site.kubernetes.api_vip is None or site.kubernetes_loc is None:
        return
    vip, loc = site.kubernetes.api_vip, site.kubernetes_loc
    management = _networks(site, "management")
    if not any(vip in network.prefix for network in management):
        yield Finding(
            "api_vip_address", "error", loc, "kubernetes.api_vip",
            f"{vip} is outside the management network {_shown(management) or '(none defined)'}",
        )
    vip_number = int(vip)  # numbers compare in C, IPv4Address in Python: 40k times
    for address, use in assigned_address_list(site):
        if int(address) == vip_number:
            yield Finding(
                "api_vip_address", "error", loc, "kubernetes.api_vip",
                f"{vip} is also {use}: the VIP must be an address no host has",
            )
    for network in site.networks.values():
        if network.gateway == vip:
            yield Finding(
                "api_vip_address", "error", loc, "kubernetes.api_vip",
                f"{vip} is the gateway of network {network.name}: pick a free address",
            )


@check
def gateway_addresses(site: Site) -> Iterator[Finding]:
    """A network's gateway is a host address inside its prefix that no host uses."""
    gateways = {int(network.gateway) for network in site.networks.values() if network.gateway is not None}
    owners = {address: use for address, use in assigned_address_list(site) if int(address) in gateways}
    for name, network in site.networks.items():
        gateway = network.gateway
        if gateway is None:
            continue
        key, loc = f"networks[{name}].gateway", site.network_locs[name]
        if gateway not in network.prefix:
            yield Finding("gateway_addresses", "error", loc, key, f"gateway {gateway} is outside {network.prefix}")
        elif network.prefix.prefixlen < 31 and gateway in (network.prefix.network_address, network.prefix.broadcast_address):
            yield Finding(
                "gateway_addresses", "error", loc, key,
                f"gateway {gateway} is the {'network' if gateway == network.prefix.network_address else 'broadcast'} "
                f"address of {network.prefix}",
            )
        if gateway in owners:
            yield Finding(
                "gateway_addresses", "error", loc, key,
                f"gateway {gateway} is also {owners[gateway]}: give the host another address",
            )
