"""Turn newly found BMCs into inventory entries without touching the ones that exist.

Each new node gets a new `host_vars/<name>.yml` (created exclusively: an existing file is
never overwritten) and a line under `all.hosts` in `hosts.yml`, inserted after the last
existing entry: every existing line stays byte for byte as it was.

Names: the design may already place hosts that the inventory lacks (a block racked and
cabled, its BMCs not yet known). When exactly as many new BMCs answer as there are such
hosts, they are paired in order, hosts in design order (rack, then device) with BMCs by
address (the usual OOB numbering follows the rack position); the pairing is printed so a
person can check it against the rack. Otherwise each new BMC is named after its address
(`node-10-0-1-17`), for a person to place in the design.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from rackform.ipmi.discovery import BmcFacts
from rackform.model import loader
from rackform.model.loader import site_catalog, site_paths
from rackform.model.source import BadInput, Loc, SourceError


@dataclass(frozen=True, slots=True)
class Design:
    """What discovery needs from a site design, readable while the inventory lags behind it."""

    oob: ipaddress.IPv4Network
    management: ipaddress.IPv4Network | None
    reserved_management: frozenset[ipaddress.IPv4Address]
    """Gateway and API VIP: never handed to a host."""
    server_hosts: tuple[str, ...]
    """Servers (not switches) in design order: rack by rack, device by device."""


@dataclass(frozen=True, slots=True)
class Inventory:
    path: Path
    hosts: frozenset[str]
    bmc_addresses: dict[str, str]
    """BMC address -> host."""
    management_addresses: frozenset[ipaddress.IPv4Address]


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    facts: BmcFacts
    management_address: ipaddress.IPv4Address
    placed_in_design: bool


def load_design(site_name: str, root: Path) -> Design:
    """The site design's networks and server names; BadInput for a design that cannot be read."""
    from rackform.model.loader import _resolve_racks  # the one place the host naming rule lives

    blocks_dir, site_path, _inventory = site_paths(root, site_name)
    if not site_path.exists():
        raise BadInput([SourceError(Loc(str(site_path), 0), "", f"no such site '{site_name}'")])
    catalog = site_catalog(blocks_dir)
    design, raw = loader.load_design(root, site_path)  # with the profiles and defaults it extends
    errors: list[SourceError] = []
    racks, hosts, _switches, _unresolved = _resolve_racks(design, raw, catalog, errors)
    if errors:
        raise BadInput(errors)
    by_purpose = {network.purpose: network for network in design.networks}
    if "oob" not in by_purpose:
        raise BadInput([SourceError(raw.key_loc("networks"), "networks", "no network with purpose oob: "
                                    "discovery scans the out-of-band network")])
    management = by_purpose.get("management")
    reserved = {management.gateway} if management and management.gateway else set()
    if design.kubernetes and design.kubernetes.api_vip:
        reserved.add(design.kubernetes.api_vip)
    order = [name for rack in racks for device in rack.devices for name in device.host_names if name in hosts]
    return Design(by_purpose["oob"].prefix, management.prefix if management else None, frozenset(reserved),
                  tuple(order))


def read_inventory(inventory: Path) -> Inventory:
    """Hosts and the addresses they use, read leniently (an entry in progress must not stop discovery)."""
    hosts_file = inventory / "hosts.yml"
    data = yaml.safe_load(hosts_file.read_text()) if hosts_file.exists() else None
    listed = ((data or {}).get("all") or {}).get("hosts") or {}
    host_vars: dict[str, dict] = {name: dict(values) for name, values in listed.items() if isinstance(values, dict)}
    for path in sorted((inventory / "host_vars").glob("*.yml")):
        try:
            values = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            continue
        if isinstance(values, dict):
            host_vars.setdefault(path.stem, {}).update(values)
    bmcs = {str(values["bmc_address"]): name for name, values in host_vars.items() if values.get("bmc_address")}
    management = set()
    for values in host_vars.values():
        try:
            management.add(ipaddress.IPv4Address(str(values.get("management_address"))))
        except ValueError:
            pass
    return Inventory(inventory, frozenset(listed) | frozenset(host_vars), bmcs, frozenset(management))


def plan_entries(design: Design, inventory: Inventory, found: list[BmcFacts]) -> list[Entry]:
    """Names and management addresses for BMCs the inventory does not know yet."""
    new = sorted((facts for facts in found if facts.address not in inventory.bmc_addresses),
                 key=lambda facts: ipaddress.IPv4Address(facts.address))
    pending = [name for name in design.server_hosts if name not in inventory.hosts]
    paired = len(pending) == len(new)
    taken = set(inventory.management_addresses) | set(design.reserved_management)
    entries = []
    for position, facts in enumerate(new):
        name = pending[position] if paired else "node-" + facts.address.replace(".", "-")
        address = allocate_management_address(design, facts.address, taken)
        taken.add(address)
        entries.append(Entry(name, facts, address, placed_in_design=paired))
    return entries


def allocate_management_address(design: Design, bmc_address: str, taken: set) -> ipaddress.IPv4Address:
    """The BMC's host number on the management network when free (10.0.1.17 -> 10.0.0.17), else the lowest free."""
    if design.management is None:
        raise BadInput([SourceError(Loc("", 0), "networks", "no management network: new hosts need a "
                                    "management_address")])
    offset = int(ipaddress.IPv4Address(bmc_address)) - int(design.oob.network_address)
    usable = design.management.num_addresses - 2
    if 0 < offset <= usable:
        candidate = design.management.network_address + offset
        if candidate not in taken:
            return candidate
    for candidate in design.management.hosts():
        if candidate not in taken:
            return candidate
    raise BadInput([SourceError(Loc("", 0), "networks", f"management network {design.management} is full")])


def host_vars_text(entry: Entry, when: str) -> str:
    facts = entry.facts
    lines = [f"# Written by `rackform discover` on {when}: a BMC at {facts.address} answered the factory login.",
             "# management_address was allocated (the BMC's host number on the management network): check it.",
             f"management_address: {entry.management_address}",
             f"bmc_address: {facts.address}"]
    if facts.bmc_mac:
        lines.append(f'bmc_mac: "{facts.bmc_mac}"')
    if facts.serial:
        lines.append(f"serial: {yaml.safe_dump(facts.serial, default_style=None).splitlines()[0]}")
    return "\n".join(lines) + "\n"


def write_entries(inventory: Path, entries: list[Entry], when: str | None = None) -> list[Path]:
    """Create host_vars files and insert hosts.yml lines; existing files and lines are left alone."""
    when = when or time.strftime("%Y-%m-%d")
    hosts_file = inventory / "hosts.yml"
    clashing = [entry.name for entry in entries if (inventory / "host_vars" / f"{entry.name}.yml").exists()]
    if clashing:
        raise FileExistsError(f"{inventory / 'host_vars'}: {', '.join(clashing)} already exist; "
                              f"nothing was written")
    text = hosts_file.read_text()
    updated = insert_hosts(text, [entry.name for entry in entries])
    written = []
    (inventory / "host_vars").mkdir(exist_ok=True)
    for entry in entries:
        path = inventory / "host_vars" / f"{entry.name}.yml"
        with open(path, "x", encoding="utf-8") as handle:  # "x": never overwrite an entry
            handle.write(host_vars_text(entry, when))
        written.append(path)
    hosts_file.write_text(updated)
    return written


def insert_hosts(text: str, names: list[str]) -> str:
    """`text` (a hosts.yml) with `names` added under all.hosts after the last entry there."""
    if not names:
        return text
    lines = text.splitlines(keepends=True)
    hosts_key, hosts_value = _all_hosts_node(text)
    if isinstance(hosts_value, yaml.MappingNode) and hosts_value.value:
        indent = hosts_value.value[0][0].start_mark.column
        last_key, last_value = hosts_value.value[-1]
        insert_at = max(_last_line(last_key), _last_line(last_value)) + 1
    else:  # `hosts:` with nothing under it yet
        indent = hosts_key.start_mark.column + 2
        insert_at = hosts_key.start_mark.line + 1
        if hosts_value.end_mark.line != hosts_key.start_mark.line:
            insert_at = hosts_value.end_mark.line
    insert_at = min(insert_at, len(lines))
    if insert_at > 0 and not lines[insert_at - 1].endswith("\n"):
        lines[insert_at - 1] += "\n"
    new_lines = [f"{' ' * indent}{name}:\n" for name in names]
    return "".join(lines[:insert_at] + new_lines + lines[insert_at:])


def _last_line(node: yaml.Node) -> int:
    """The last line holding any of `node`'s text (a block collection's end mark is the next token's)."""
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
        children = [child for pair in node.value for child in (pair if isinstance(pair, tuple) else (pair,))]
        return max(_last_line(child) for child in children)
    mark = node.end_mark
    return mark.line if mark.column > 0 or mark.line == node.start_mark.line else mark.line - 1


def _all_hosts_node(text: str) -> tuple[yaml.Node, yaml.Node]:
    root = yaml.compose(text)
    all_node = _mapping_value(root, "all")
    hosts = _mapping_entry(all_node, "hosts")
    if hosts is None:
        raise ValueError("hosts.yml has no all.hosts mapping to add hosts under")
    return hosts


def _mapping_entry(node, key: str):
    if not isinstance(node, yaml.MappingNode):
        return None
    return next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)


def _mapping_value(node, key: str):
    entry = _mapping_entry(node, key)
    if entry is None:
        raise ValueError(f"hosts.yml has no top-level `{key}:`")
    return entry[1]
