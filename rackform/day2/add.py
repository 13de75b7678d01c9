"""`node add`'s plan: a new node's name, place and addresses, and the file edits that record it.

Pure: what was found on the wire (`Found`: BMC facts, block, LLDP cabling, management MAC)
plus the site give a `NodePlan` (naming, allocation, placement) and then `FileChange`s:
the device in its rack (in position order, in its neighbours' style), its cables (after
the site's other host cables), a line in hosts.yml and a new host_vars file. Every other
line of the site file and hosts.yml stays as it was (rackform.day2.yamledit).
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass, field
from pathlib import Path

from rackform.day2 import allocate, naming, placement
from rackform.day2.allocate import FabricLink
from rackform.day2.errors import refuse
from rackform.day2.files import FileChange
from rackform.day2.yamledit import YamlFile, insert_after, like_siblings
from rackform.model.schema import BlockType
from rackform.model.site import Site


@dataclass(frozen=True, slots=True)
class Found:
    """What the wire told about one new node."""

    bmc_address: str
    bmc_mac: str | None
    serial: str | None
    block: BlockType
    links: tuple[FabricLink, ...] = ()
    management_mac: str | None = None
    fru: str = ""
    """FRU manufacturer and product, as read."""


@dataclass(slots=True)
class NodePlan:
    host: str
    device: str
    found: Found
    place: placement.Placement
    management_address: ipaddress.IPv4Address
    fabric: dict[str, ipaddress.IPv4Interface] = field(default_factory=dict)

    def lines(self) -> list[str]:
        cables = ", ".join(f"{link.port}->{link.switch}:{link.switch_port}" for link in self.found.links) or "none heard"
        fabric = ", ".join(f"{port} {address}" for port, address in self.fabric.items()) or "-"
        return [f"{self.host}: {self.found.block.name} ({self.found.fru or 'no FRU'}), serial {self.found.serial or '-'}",
                f"  rack {self.place.rack} U{self.place.position_u}, device {self.device}",
                f"  bmc {self.found.bmc_address} ({self.found.bmc_mac or 'MAC unknown'}), management "
                f"{self.management_address} ({self.found.management_mac or 'MAC unknown'})",
                f"  cabling {cables}; fabric {fabric}"]


def plan_node(site: Site, found: Found, *, rack: str | None = None, position_u: int | None = None,
              taken_names: set[str] | None = None, taken_addresses: set | None = None,
              reserved: list[placement.Reserved] | None = None) -> NodePlan:
    """Name, place and address one new node (BadInput for every refusal: nothing is written)."""
    taken_names = naming.taken_names(site) if taken_names is None else taken_names
    taken_addresses = set() if taken_addresses is None else taken_addresses
    host = naming.host_name(site, found.block.name, taken_names)
    device = naming.device_name(site, found.block.name, host, taken_names)
    reserved = [] if reserved is None else reserved  # chassis placed earlier in this run: filled in here
    where = placement.place(site, found.block, rack, position_u, tuple(reserved))
    fabric_ports = set(_fabric_ports(found.block)) if found.block.node else set()
    for link in found.links:
        if link.port not in fabric_ports:
            raise refuse(None, "cabling", f"{found.bmc_address}: LLDP shows port {link.port!r} on "
                                          f"{link.switch}:{link.switch_port}, which a {found.block.name} does not have "
                                          f"(fabric ports: {', '.join(sorted(fabric_ports))})")
    management = allocate.management_address(site, found.bmc_address,
                                              {a for a in taken_addresses if isinstance(a, ipaddress.IPv4Address)})
    number = allocate.host_number(site, management)
    fabric = {}
    for link in found.links:
        fabric[link.port] = allocate.fabric_address(
            site, link, number, [a for a in taken_addresses if isinstance(a, ipaddress.IPv4Interface)])
        taken_addresses.add(fabric[link.port])
    taken_names |= {host, device}
    taken_addresses.add(management)
    reserved.append(placement.Reserved(where.rack, where.position_u, found.block))
    return NodePlan(host, device, found, where, management, fabric)


def _fabric_ports(block: BlockType) -> dict[str, str]:
    from rackform.model.loader import _port_map  # the one place port names are expanded

    return {name: port.role for name, port in _port_map(block.node.ports).items() if port.role == "fabric"}


# ---------------------------------------------------------------- file edits


def site_file(site_name: str) -> Path:
    return Path("topologies") / "sites" / f"{site_name}.yaml"


def inventory_dir(site_name: str) -> Path:
    return Path("inventories") / site_name


def file_changes(site: Site, root: Path, plans: list[NodePlan], when: str | None = None) -> list[FileChange]:
    when = when or time.strftime("%Y-%m-%d")
    design = YamlFile.load(root / site_file(site.name))
    for plan in plans:
        _add_device(design, site, plan)
        _add_cables(design, site, plan)
    hosts_path = root / inventory_dir(site.name) / "hosts.yml"
    hosts = YamlFile.load(hosts_path)
    for plan in plans:
        _add_host_line(hosts, site, plan.host)
    changes = [FileChange(site_file(site.name), design.original, design.text()),
               FileChange(inventory_dir(site.name) / "hosts.yml", hosts.original, hosts.text())]
    for plan in plans:
        path = inventory_dir(site.name) / "host_vars" / f"{plan.host}.yml"
        if (root / path).exists():
            raise refuse(None, "host_vars", f"{path} already exists: {plan.host} is known to the inventory")
        changes.append(FileChange(path, None, host_vars_text(plan, when)))
    return changes


def _add_device(design: YamlFile, site: Site, plan: NodePlan) -> None:
    racks = design.data.get("racks") or []
    rack = next((item for item in racks if item.get("name") == plan.place.rack), None)
    if rack is None:
        raise refuse(site.loc, "racks", f"rack {plan.place.rack} is not written in {site_file(site.name)} "
                                        f"(it comes from elsewhere): place the node by hand")
    devices = rack["devices"]
    below = [index for index, device in enumerate(devices)
             if int(device.get("position_u", 0)) < plan.place.position_u]
    after = below[-1] if below else -1
    values = {"name": plan.device, "block": plan.found.block.name, "position_u": plan.place.position_u}
    if plan.found.block.nodes > 1:
        values["hosts"] = [plan.host]
    insert_after(devices, after, like_siblings(values, devices, after if after >= 0 else 0))


def _add_cables(design: YamlFile, site: Site, plan: NodePlan) -> None:
    if not plan.found.links:
        return
    cables = design.data.get("cabling")
    if cables is None:
        raise refuse(site.loc, "cabling", f"{site_file(site.name)} has no cabling list to add {plan.host}'s cables to")
    host_cables = [index for index, cable in enumerate(cables)
                   if str(cable.get("a", "")).split(":")[0] in site.hosts
                   or str(cable.get("b", "")).split(":")[0] in site.hosts]
    after = host_cables[-1] if host_cables else len(cables) - 1
    for link in plan.found.links:
        after = insert_after(cables, after, like_siblings(
            {"a": f"{plan.host}:{link.port}", "b": f"{link.switch}:{link.switch_port}"}, cables, max(after, 0)))


def _add_host_line(hosts: YamlFile, site: Site, host: str) -> None:
    listed = (hosts.data.get("all") or {}).get("hosts")
    if listed is None:
        raise refuse(None, "all.hosts", f"{site.inventory_path}/hosts.yml has no all.hosts to list {host} under")
    servers = [index for index, name in enumerate(listed) if name in site.hosts]
    listed.insert(servers[-1] + 1 if servers else len(listed), host, None)


def host_vars_text(plan: NodePlan, when: str) -> str:
    found = plan.found
    lines = [f"# Added by `rackform node add` on {when}: BMC {found.bmc_address}, FRU {found.fru or '-'}.",
             f"management_address: {plan.management_address}"]
    if found.management_mac:
        lines.append(f'management_mac: "{found.management_mac}"')
    lines.append(f"bmc_address: {found.bmc_address}")
    if found.bmc_mac:
        lines.append(f'bmc_mac: "{found.bmc_mac}"')
    if found.serial:
        lines.append(f"serial: {_scalar(found.serial)}")
    if plan.fabric:
        lines.append("fabric_ports:")
        lines += [f"  {port}: {{address: {address}}}" for port, address in plan.fabric.items()]
    return "\n".join(lines) + "\n"


def _scalar(text: str) -> str:
    """`text` as a YAML scalar that reads back as that same string (quoted only when it must be)."""
    import json

    import yaml

    try:
        plain = yaml.safe_load(text) == text and "#" not in text and ": " not in text
    except yaml.YAMLError:
        plain = False
    return text if plain else json.dumps(text)
