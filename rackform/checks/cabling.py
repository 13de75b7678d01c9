"""Preflight checks: cabling. Every cable joins two real ports, each port takes one
cable, host fabric ports land on leaf switches, and GPU nodes survive a leaf failure.

`host_fabric_links` (host fabric port <-> switch port, as resolved objects) is the one
place cables are turned into links; the RoCE, bandwidth and address checks read it.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rackform.checks.registry import check
from rackform.checks.findings import Finding
from rackform.model.site import Cable, Host, Port, Site, Switch

# difflib compares a name with every candidate: suggest names for the first few
# unknown devices only, so a file full of bad names stays linear.
_SUGGESTIONS_FOR_UNKNOWN_DEVICES = 10


@dataclass(frozen=True, slots=True)
class HostLink:
    """A cable from a host's fabric port to a switch port."""

    host: Host
    host_port: Port
    switch: Switch
    switch_port: Port
    cable: Cable
    cable_index: int
    """Position in the site's `cabling` list, for `cabling[N]` key paths."""

    @property
    def speed_gbps(self) -> int:
        """What the link trains at: the slower of its two ends."""
        return min(self.host_port.speed_gbps, self.switch_port.speed_gbps)

    def __str__(self) -> str:
        return f"{self.host.name}:{self.host_port.name} - {self.switch.name}:{self.switch_port.name}"


def _node(site: Site, name: str) -> Host | Switch | None:
    return site.hosts.get(name) or site.switches.get(name)


class _LastSiteLinks:
    """The links of the site last asked about, so every check of one run shares one
    walk over the cables. A site is read-only once loaded; another site object (or a
    changed cable count) starts afresh."""

    site: Site | None = None
    cable_count = -1
    links: tuple[HostLink, ...] = ()


def host_fabric_links(site: Site) -> tuple[HostLink, ...]:
    """Every cable joining a host fabric port to an existing switch port, in file order.

    Cables with an unknown end are left out (the `cable_ends_exist` check reports them).
    """
    last = _LastSiteLinks
    if last.site is not site or last.cable_count != len(site.cables):
        last.site, last.cable_count, last.links = site, len(site.cables), tuple(_walk_host_links(site))
    return last.links


def _walk_host_links(site: Site) -> Iterator[HostLink]:
    hosts, switches = site.hosts, site.switches
    for index, cable in enumerate(site.cables):
        host_end, other_end = (cable.b, cable.a) if cable.b.device in hosts else (cable.a, cable.b)
        host = hosts.get(host_end.device)
        switch = switches.get(other_end.device)
        if host is None or switch is None:
            continue
        host_port = host.ports.get(host_end.port)
        switch_port = switch.ports.get(other_end.port)
        if host_port is None or switch_port is None or host_port.role != "fabric":
            continue
        yield HostLink(host, host_port, switch, switch_port, cable, index)


def leaf_links(site: Site) -> list[HostLink]:
    """Host fabric ports cabled to leaf switches: the links RoCE runs over."""
    return [link for link in host_fabric_links(site) if link.switch.role == "leaf"]


def _port_summary(ports: dict[str, Port]) -> str:
    """`fab0..fab7 (fabric), mgmt0 (management)`: port names grouped by role, in order."""
    by_role: dict[str, list[str]] = defaultdict(list)
    for port in ports.values():
        by_role[port.role].append(port.name)
    parts = []
    for role, names in by_role.items():
        shown = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
        parts.append(f"{shown} ({role})")
    return ", ".join(parts)


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


# ---------------------------------------------------------------- checks


@check
def cable_ends_exist(site: Site) -> Iterator[Finding]:
    """Each cable end names an existing host or switch and a port it has."""
    devices: dict | None = None  # name -> device, made for the first unknown name only
    suggestions_left = _SUGGESTIONS_FOR_UNKNOWN_DEVICES
    hosts, switches = site.hosts, site.switches
    for index, cable in enumerate(site.cables):
        for side, end in (("a", cable.a), ("b", cable.b)):
            node = hosts.get(end.device) or switches.get(end.device)  # _node
            if node is not None:
                if end.port not in node.ports:
                    key = f"cabling[{index}].{side}"  # only for a finding: 49k ends at 10k nodes
                    yield Finding(
                        "cable_ends_exist", "error", cable.loc, key,
                        f"{end.device} has no port '{end.port}'{_did_you_mean(end.port, node.ports)}; "
                        f"its ports: {_port_summary(node.ports)}",
                    )
                continue
            key = f"cabling[{index}].{side}"
            if devices is None:
                devices = {device.name: device for device in site.devices()}
            chassis = devices.get(end.device)
            if chassis is not None:
                hint = f"; {end.device} is a {chassis.block.name} chassis: name one of its hosts ({', '.join(chassis.host_names)})"
            elif suggestions_left > 0:
                suggestions_left -= 1
                hint = _did_you_mean(end.device, [*site.hosts, *site.switches])
            else:
                hint = ""
            yield Finding("cable_ends_exist", "error", cable.loc, key, f"no host or switch named '{end.device}'{hint}")


@check
def ports_cabled_once(site: Site) -> Iterator[Finding]:
    """No port takes two cables, on the switch side or the host side."""
    first_use: dict[tuple[str, str], tuple[int, Cable]] = {}  # (device, port): tuples hash fast
    for index, cable in enumerate(site.cables):
        if cable.a == cable.b:
            yield Finding(
                "ports_cabled_once", "error", cable.loc, f"cabling[{index}]",
                f"both ends are {cable.a}: a cable joins two different ports",
            )
            continue
        for side, end in (("a", cable.a), ("b", cable.b)):
            port_key = (end.device, end.port)
            if port_key in first_use:
                first_index, first = first_use[port_key]
                yield Finding(
                    "ports_cabled_once", "error", cable.loc, f"cabling[{index}].{side}",
                    f"port {end} is already cabled by cabling[{first_index}] at line {first.loc.line} "
                    f"({first.a} - {first.b}): a port takes one cable",
                )
            else:
                first_use[port_key] = (index, cable)


@check
def host_ports_land_on_switches(site: Site) -> Iterator[Finding]:
    """Hosts cable to switches, never to each other; fabric ports belong on leaves."""
    for index, cable in enumerate(site.cables):
        if cable.a.device in site.hosts and cable.b.device in site.hosts:
            yield Finding(
                "host_ports_land_on_switches", "error", cable.loc, f"cabling[{index}]",
                f"{cable.a} - {cable.b} joins two hosts: cable each host port to a switch port",
            )
    for link in host_fabric_links(site):
        if link.switch.role != "leaf":
            yield Finding(
                "host_ports_land_on_switches", "warning", link.cable.loc, f"cabling[{link.cable_index}]",
                f"fabric port {link.host.name}:{link.host_port.name} lands on {link.switch.name}, "
                f"a {link.switch.role} switch: hosts attach to leaves (RoCE is checked on host-leaf links only)",
            )


@check
def switch_port_count(site: Site) -> Iterator[Finding]:
    """A switch has no more cabled ports than its model has ports."""
    cabled: dict[str, set[str]] = defaultdict(set)
    for cable in site.cables:
        for end in (cable.a, cable.b):
            if end.device in site.switches:
                cabled[end.device].add(end.port)
    for name, ports in cabled.items():
        switch = site.switches[name]
        spec = switch.device.block.switch
        available = spec.ports if spec is not None else len(switch.ports)
        if len(ports) > available:
            yield Finding(
                "switch_port_count", "error", switch.loc, f"racks[{switch.device.rack}].devices[{name}]",
                f"{name} has {len(ports)} cabled ports but a {switch.device.block.name} has {available}: "
                "move cables to another switch or use a larger model",
            )


@check
def port_speeds_match(site: Site) -> Iterator[Finding]:
    """Warn where a host port is faster than the switch port it is cabled to (one line per host)."""
    slow: dict[str, list[HostLink]] = defaultdict(list)
    for link in host_fabric_links(site):
        if link.host_port.speed_gbps > link.switch_port.speed_gbps:
            slow[link.host.name].append(link)
    for host_name, links in slow.items():
        first = links[0]
        shown = ", ".join(
            f"{link.host_port.name} ({link.host_port.speed_gbps}G) -> {link.switch.name}:{link.switch_port.name} "
            f"({link.switch_port.speed_gbps}G)"
            for link in links
        )
        yield Finding(
            "port_speeds_match", "warning", first.cable.loc, f"cabling[{first.cable_index}]",
            f"{host_name}: {len(links)} fabric port(s) faster than the switch port they land on, "
            f"links train at the lower speed: {shown}",
        )


@check
def gpu_nodes_dual_homed(site: Site) -> Iterator[Finding]:
    """With no_single_point_of_failure, every GPU node reaches two different leaves."""
    if not site.fabric.no_single_point_of_failure:
        return
    leaves: dict[str, set[str]] = defaultdict(set)
    first_link: dict[str, HostLink] = {}
    for link in leaf_links(site):
        leaves[link.host.name].add(link.switch.name)
        first_link.setdefault(link.host.name, link)
    for host in site.hosts.values():
        if host.role != "gpu" or len(leaves[host.name]) >= 2:
            continue
        reached = ", ".join(sorted(leaves[host.name])) or "no leaf"
        link = first_link.get(host.name)
        if link is not None:
            loc, key = link.cable.loc, f"cabling[{link.cable_index}]"
        else:
            loc, key = host.loc, f"racks[{host.device.rack}].devices[{host.device.name}]"
        yield Finding(
            "gpu_nodes_dual_homed", "error", loc, key,
            f"GPU node {host.name} reaches {reached} ({len(leaves[host.name])} leaf switch(es)); "
            "fabric.no_single_point_of_failure needs its fabric ports on at least 2 different leaves",
        )

