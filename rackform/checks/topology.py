"""Preflight checks: the routed fabric. Leaves and spines run eBGP unnumbered (one AS per
switch, `remote-as external` in roles/switch_baseline/templates/frr.conf.j2), so the AS plan
must let every session come up and every route be accepted, the leaves and spines of a
fabric must form one connected graph, and no switch may run BGP with no one to peer with.

A fabric is the set of leaves and spines naming the same `switch.fabric` network (leaves
that name none, like the reference site's pair, form one fabric together). A switch-to-switch
link is a cable between two of them: the links the renderer marks `bgp_peer`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from rackform.checks.registry import check
from rackform.checks.findings import Finding
from rackform.model.site import Site, Switch

FABRIC_ROLES = ("leaf", "spine")


def _asn_key(switch: Switch) -> str:
    return f"racks[{switch.device.rack}].devices[{switch.name}].switch.asn"


def _fabric_name(switch: Switch) -> str:
    return switch.fabric or "(no fabric network named)"


def _fabrics(site: Site) -> dict[str | None, list[Switch]]:
    """Leaves and spines by fabric network, in file order."""
    fabrics: dict[str | None, list[Switch]] = defaultdict(list)
    for switch in site.switches.values():
        if switch.role in FABRIC_ROLES:
            fabrics[switch.fabric].append(switch)
    return fabrics


def _bgp_neighbours(site: Site) -> dict[str, list[tuple[str, Switch]]]:
    """For each switch: (its port, the leaf or spine at the far end) of every switch-to-switch
    cable, as `rackform.render.host_vars.switch_vars` marks a port `bgp_peer`."""
    neighbours: dict[str, list[tuple[str, Switch]]] = defaultdict(list)
    for cable in site.cables:
        for near, far in ((cable.a, cable.b), (cable.b, cable.a)):
            switch, peer = site.switches.get(near.device), site.switches.get(far.device)
            if switch is None or peer is None or near.port not in switch.ports:
                continue  # cable_ends_exist reports unknown devices and ports
            if peer.role in FABRIC_ROLES:
                neighbours[switch.name].append((near.port, peer))
    return neighbours


# ---------------------------------------------------------------- the AS plan


@check
def leaf_asns_unique(site: Site) -> Iterator[Finding]:
    """No two leaves of a fabric share an AS number: a route from one reaches the other
    through a spine with the receiver's own AS in its path, and eBGP drops it as a loop."""
    for fabric, switches in _fabrics(site).items():
        first: dict[int, Switch] = {}
        for leaf in switches:
            if leaf.role != "leaf" or leaf.asn is None:
                continue
            if leaf.asn in first:
                owner = first[leaf.asn]
                yield Finding(
                    "leaf_asns_unique", "error", leaf.loc, _asn_key(leaf),
                    f"AS {leaf.asn} is already {owner.name}'s (line {owner.loc.line}): each leaf of fabric "
                    f"{_fabric_name(leaf)} needs an AS of its own, else the routes of one are dropped by the "
                    "other as an AS-path loop",
                )
            else:
                first[leaf.asn] = leaf


@check
def leaf_asn_differs_from_spines(site: Site) -> Iterator[Finding]:
    """No leaf uses the AS number of a spine of its fabric: the sessions are eBGP
    (`remote-as external`), which FRR never brings up between two equal AS numbers."""
    for switches in _fabrics(site).values():
        spines = {switch.asn: switch for switch in switches if switch.role == "spine" and switch.asn is not None}
        for leaf in switches:
            if leaf.role == "leaf" and leaf.asn in spines:
                spine = spines[leaf.asn]
                yield Finding(
                    "leaf_asn_differs_from_spines", "error", leaf.loc, _asn_key(leaf),
                    f"AS {leaf.asn} is the AS of spine {spine.name} (line {spine.loc.line}): an eBGP session between "
                    "two equal AS numbers never comes up; give the leaf an AS of its own",
                )


@check
def fabric_asns_complete(site: Site) -> Iterator[Finding]:
    """In a routed fabric (a leaf or spine has an AS number) every leaf and spine has one:
    a switch without runs no BGP, and its links carry no routes."""
    for switches in _fabrics(site).values():
        routed = [switch for switch in switches if switch.asn is not None]
        if not routed:
            continue  # a layer-2 fabric, like the reference site's Onyx pair
        for switch in switches:
            if switch.asn is None:
                yield Finding(
                    "fabric_asns_complete", "error", switch.loc, _asn_key(switch),
                    f"{switch.role} {switch.name} has no AS number while {routed[0].name} of fabric "
                    f"{_fabric_name(switch)} runs BGP (AS {routed[0].asn}): without one it runs no BGP "
                    "and its links carry no routes; add switch.asn",
                )


# ---------------------------------------------------------------- one connected fabric


def _islands(switches: list[Switch], neighbours: dict[str, list[tuple[str, Switch]]]) -> list[list[Switch]]:
    """Connected groups of the fabric's switches (links to other fabrics do not count),
    each in file order, in order of their first switch."""
    order = {switch.name: index for index, switch in enumerate(switches)}
    seen: set[str] = set()
    islands = []
    for start in switches:
        if start.name in seen:
            continue
        island, stack = [], [start]
        seen.add(start.name)
        while stack:
            switch = stack.pop()
            island.append(switch)
            for _port, peer in neighbours.get(switch.name, ()):
                if peer.name in order and peer.name not in seen:
                    seen.add(peer.name)
                    stack.append(peer)
        islands.append(sorted(island, key=lambda s: order[s.name]))
    return islands


def _main_island(islands: list[list[Switch]]) -> list[Switch]:
    """The island the others are cut off from: the largest, then the one with most spines."""
    return max(islands, key=lambda island: (len(island), sum(s.role == "spine" for s in island)))


@check
def fabric_connected(site: Site) -> Iterator[Finding]:
    """The leaves and spines of each fabric form one connected graph: every leaf reaches a
    spine (or its pair leaf), and a leaf with no uplink is not left as an island."""
    neighbours = _bgp_neighbours(site)
    for switches in _fabrics(site).values():
        islands = _islands(switches, neighbours)
        if len(islands) < 2:
            continue
        main = _main_island(islands)
        shown_main = ", ".join(switch.name for switch in main)
        for island in islands:
            if island is main:
                continue
            first = island[0]
            key = f"racks[{first.device.rack}].devices[{first.name}]"
            if len(island) == 1:
                wanted = "a leaf" if first.role == "spine" else "a spine (or its pair leaf)"
                message = (
                    f"{first.role} {first.name} has no link to another leaf or spine of fabric "
                    f"{_fabric_name(first)}: it is an island cut off from {shown_main}; cable it to {wanted}"
                )
            else:
                message = (
                    f"{', '.join(switch.name for switch in island)} are linked only to each other: fabric "
                    f"{_fabric_name(first)} is {len(islands)} islands, cut off from {shown_main}; "
                    "cable them to a spine of the rest"
                )
            yield Finding("fabric_connected", "error", first.loc, key, message)


# ---------------------------------------------------------------- BGP peer groups


@check
def bgp_peer_groups_have_members(site: Site) -> Iterator[Finding]:
    """Every switch with an AS number has a switch-to-switch link: its BGP peer group
    `fabric` gets one member per such link, and a peer group with none peers with no one.

    A fabric of one switch (a single leaf, as small labs have) has no one to peer with and
    no island either: a warning, since its BGP only announces its own subnets."""
    neighbours = _bgp_neighbours(site)
    fabrics = _fabrics(site)
    for switch in site.switches.values():
        if switch.asn is None or neighbours.get(switch.name):
            continue
        alone = len([peer for peer in fabrics.get(switch.fabric, []) if peer.asn is not None]) == 1
        if alone:
            yield Finding(
                "bgp_peer_groups_have_members", "warning", switch.loc, _asn_key(switch),
                f"{switch.role} {switch.name} is the only BGP switch of fabric {_fabric_name(switch)}: it has no "
                "peer (no peer group is rendered); fine for a one-leaf site, else cable it to a spine",
            )
            continue
        yield Finding(
            "bgp_peer_groups_have_members", "error", switch.loc, _asn_key(switch),
            f"{switch.role} {switch.name} runs BGP (AS {switch.asn}) but no cable joins it to a leaf or "
            "spine: its BGP peer group would have no members; cable it to the fabric or drop switch.asn",
        )