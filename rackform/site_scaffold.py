"""A new site's files, scaffolded from an existing site (`rackform new-site NAME --from SITE`).

The design is the source site's text with the site-specific values rewritten in place
(name, description, network prefixes and gateways, the Kubernetes API VIP), so its racks,
blocks, cabling and comments stay as the person wrote them. The inventory is new: a
hosts.yml and a host_vars stub per host and managed switch, with addresses drawn from the
new site's prefixes. Serials and MACs are left as commented-out `TO FILL IN` lines (both
are optional, so the scaffold validates before they are filled).

A new site is a real one, whatever it was made from: the source's `lab_only: true` and
every inventory setting that turns SSH host key checking off are left out (`real_site_design`,
`real_site_vars`, which `rackform init` applies to the example it copies too).

Everything is computed in memory: `scaffold_files` either returns every file or raises
`ScaffoldError` having written nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path

import yaml

from rackform.checks.cabling import host_fabric_links
from rackform.checks.host_keys import checking_off
from rackform.model.schema import Network
from rackform.model.site import Host, Site, Switch
from rackform.model.source import LineDict, LineList, load_yaml

FABRIC_PURPOSES = ("compute_fabric", "storage_fabric")
PREFERRED_LEAF_SUBNET_PREFIXLEN = 24
"""A /24 of server addresses per rail when the fabric prefix has room: easy to read."""
ADDRESSES_NOT_FOR_PORTS = 3
"""Per rail subnet: the network and broadcast addresses, and the leaf's own (the servers'
gateway, the subnet's first address: roles/switch_baseline/templates/servers.intf.j2)."""
FILL_IN = "TO FILL IN"


class ScaffoldError(Exception):
    """The new site cannot be scaffolded as asked; nothing was written."""


@dataclass(frozen=True, slots=True)
class NewPrefixes:
    """The new site's prefixes: management, out-of-band, and fabric networks by name
    (a fabric network not named keeps the source's prefix)."""

    management: IPv4Network | None = None
    oob: IPv4Network | None = None
    fabric: dict[str, IPv4Network] = field(default_factory=dict)


@dataclass(slots=True)
class _NodeAddresses:
    management: IPv4Address | None = None
    bmc: IPv4Address | None = None
    fabric: dict[str, IPv4Interface] = field(default_factory=dict)


# ---------------------------------------------------------------- address plan


def _usable(prefix: IPv4Network) -> tuple[IPv4Address, int]:
    """The first usable address and how many there are: all but network and broadcast,
    except in /31 and /32 (by arithmetic: a /8 is not listed)."""
    if prefix.prefixlen >= 31:
        return prefix.network_address, prefix.num_addresses
    return prefix.network_address + 1, prefix.num_addresses - 2


def _managed(site: Site) -> list[Host | Switch]:
    """Every node with a management address, in design order: hosts, then managed switches."""
    switches = [switch for switch in site.switches.values() if switch.os != "unmanaged"]
    return [*site.hosts.values(), *switches]


def _allocate(option: str, prefix: IPv4Network, reserved: list[str], count: int, what: str) -> Iterator[IPv4Address]:
    """`reserved` addresses first (gateway, VIP), then `count` more, in order; a clear error
    when the prefix is too small."""
    first, usable = _usable(prefix)
    needed = len(reserved) + count
    if needed > usable:
        raise ScaffoldError(
            f"{option} {prefix} holds {usable} usable addresses but the new site needs {needed} "
            f"({', '.join([what, *reserved])}): use a shorter prefix"
        )
    for offset in range(needed):
        yield first + offset


def _network(site: Site, purpose: str) -> Network | None:
    networks = [network for network in site.networks.values() if network.purpose == purpose]
    return networks[0] if networks else None


@dataclass(slots=True)
class AddressPlan:
    nodes: dict[str, _NodeAddresses]
    networks: dict[str, Network]
    """Every network of the new site (name -> the source's, with the new prefix and gateway)."""
    api_vip: IPv4Address | None


def plan_addresses(site: Site, prefixes: NewPrefixes) -> AddressPlan:
    """Addresses for every node of `site` from the new prefixes; ScaffoldError when one is
    missing or too small."""
    nodes = {node.name: _NodeAddresses() for node in _managed(site)}
    networks = dict(site.networks)
    management, oob = _network(site, "management"), _network(site, "oob")
    api_vip = None
    if management is not None:
        if prefixes.management is None:
            raise ScaffoldError(f"give the new site's management prefix: --management-prefix "
                                f"({site.name} uses {management.prefix})")
        source_vip = site.kubernetes.api_vip if site.kubernetes is not None else None
        reserved = (["the gateway"] if management.gateway else []) + (
            ["the API VIP"] if source_vip is not None and source_vip in management.prefix else [])
        managed = _managed(site)
        addresses = iter(_allocate("--management-prefix", prefixes.management, reserved, len(managed),
                                   f"{len(managed)} hosts and managed switches"))
        gateway = next(addresses) if management.gateway else None
        api_vip = next(addresses) if "the API VIP" in reserved else None
        networks[management.name] = Network(name=management.name, purpose="management",
                                            prefix=prefixes.management, gateway=gateway)
        for node, address in zip(managed, addresses):
            nodes[node.name].management = address
    if oob is not None:
        if prefixes.oob is None:
            raise ScaffoldError(f"give the new site's out-of-band prefix: --oob-prefix ({site.name} uses {oob.prefix})")
        hosts = list(site.hosts.values())
        addresses = iter(_allocate("--oob-prefix", prefixes.oob, ["the gateway"] if oob.gateway else [],
                                   len(hosts), f"{len(hosts)} host BMCs"))
        gateway = next(addresses) if oob.gateway else None
        networks[oob.name] = Network(name=oob.name, purpose="oob", prefix=prefixes.oob, gateway=gateway)
        for host, address in zip(hosts, addresses):
            nodes[host.name].bmc = address
    _plan_fabric(site, prefixes, networks, nodes)
    return AddressPlan(nodes, networks, api_vip)


def _fabric_network_of(site: Site, host: Host, port: str, switch: Switch) -> Network | None:
    """The fabric network a host port's address comes from: its leaf's, else the one its
    address in the source site lies in, else the site's first fabric network."""
    fabric = [network for network in site.networks.values() if network.purpose in FABRIC_PURPOSES]
    if switch.fabric in site.networks:
        return site.networks[switch.fabric]
    source_address = host.fabric_addresses.get(port)
    for network in fabric:
        if source_address is not None and source_address.ip in network.prefix:
            return network
    return fabric[0] if fabric else None


def _plan_fabric(site: Site, prefixes: NewPrefixes, networks: dict[str, Network],
                 nodes: dict[str, _NodeAddresses]) -> None:
    """One subnet per fabric network, leaf and port name (a rail: fab0 of every server on
    the leaf) so no server has two ports in one subnet: the leaf owns the first address
    (the servers' gateway), the server ports take the next ones."""
    unknown = sorted(set(prefixes.fabric) - {n.name for n in site.networks.values() if n.purpose in FABRIC_PURPOSES})
    if unknown:
        fabric = [n.name for n in site.networks.values() if n.purpose in FABRIC_PURPOSES]
        raise ScaffoldError(f"--fabric-prefix {unknown[0]}=...: {site.name} has no fabric network '{unknown[0]}'; "
                            f"its fabric networks: {', '.join(fabric) or 'none'}")
    ports_by_rail: dict[str, dict[tuple[str, str], list[tuple[Host, str]]]] = {}
    for link in host_fabric_links(site):
        network = _fabric_network_of(site, link.host, link.host_port.name, link.switch)
        if network is None:
            continue
        rail = (link.switch.name, link.host_port.name)
        ports_by_rail.setdefault(network.name, {}).setdefault(rail, []).append((link.host, link.host_port.name))
    for name, network in site.networks.items():
        if network.purpose not in FABRIC_PURPOSES:
            continue
        prefix = prefixes.fabric.get(name, network.prefix)
        networks[name] = Network(name=name, purpose=network.purpose, prefix=prefix, gateway=None)
        rails = ports_by_rail.get(name, {})
        if not rails:
            continue
        subnets = _rail_subnets(name, prefix, [len(ports) for ports in rails.values()])
        for subnet, ports in zip(subnets, rails.values()):
            addresses = iter(subnet.hosts())
            next(addresses)  # the leaf's: the servers' gateway
            for (host, port), address in zip(ports, addresses):
                nodes[host.name].fabric[port] = IPv4Interface(f"{address}/{subnet.prefixlen}")


def _rail_subnets(name: str, prefix: IPv4Network, port_counts: list[int]) -> list[IPv4Network]:
    """Equal subnets of `prefix`, one per rail: /24 when there is room, else the smallest
    that holds the busiest rail's ports."""
    host_bits = (max(port_counts) + ADDRESSES_NOT_FOR_PORTS - 1).bit_length()  # 2**bits holds them
    preferred = max(host_bits, 32 - PREFERRED_LEAF_SUBNET_PREFIXLEN)
    for bits in (preferred, host_bits):
        if len(port_counts) << bits <= prefix.num_addresses:
            return list(islice(prefix.subnets(new_prefix=32 - bits), len(port_counts)))
    raise ScaffoldError(
        f"fabric network {name} {prefix} holds {prefix.num_addresses} addresses but its {len(port_counts)} server "
        f"subnet(s) (one per leaf and port name) of /{32 - host_bits} need {len(port_counts) << host_bits} "
        f"({sum(port_counts)} server ports): give a shorter prefix with --fabric-prefix {name}=PREFIX"
    )


# ---------------------------------------------------------------- a real site, not a lab


LAB_ONLY_KEY = "lab_only"
DATA_SETS_KEY = "data_sets"


def _top_level_spans(text: str) -> list[tuple[str, int, int]]:
    """(key, first line, last line) of each top-level entry, 0-based and inclusive:
    the entry's own lines, without the blank and comment lines that follow it."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        return []
    lines = text.splitlines()
    spans = []
    for index, (key_node, value_node) in enumerate(root.value):
        first = key_node.start_mark.line
        last = root.value[index + 1][0].start_mark.line - 1 if index + 1 < len(root.value) else len(lines) - 1
        if isinstance(value_node, yaml.ScalarNode):
            end = value_node.end_mark
            last = min(last, end.line - 1 if end.column == 0 else end.line)
        while last > first and (not lines[last].strip() or lines[last].startswith("#")):
            last -= 1
        spans.append((key_node.value, first, last))
    return spans


def _without_entries(text: str, shown: str, dropped: set[str], note: list[str]) -> str:
    """`text` without the top-level entries named in `dropped`, each with the comment lines
    right above it (which say why it is there); `note` replaces the first one. The result
    must read as the same mapping less those keys, or nothing is changed and ScaffoldError says so."""
    spans = [span for span in _top_level_spans(text) if span[0] in dropped]
    if not spans:
        return text
    lines = text.splitlines()
    for number, (_key, first, last) in enumerate(reversed(spans)):
        while first > 0 and lines[first - 1].startswith("#"):
            first -= 1
        replacement = note if number == len(spans) - 1 else []
        if not replacement and first > 0 and lines[first - 1].strip() and last + 1 < len(lines) \
                and lines[last + 1].strip():
            replacement = [""]  # keep the sections apart
        lines[first:last + 1] = replacement
    result = "\n".join(lines) + "\n"
    before, after = yaml.safe_load(text), yaml.safe_load(result)
    if not isinstance(before, dict) or after != {key: value for key, value in before.items() if key not in dropped}:
        raise ScaffoldError(f"{shown}: cannot leave out {', '.join(sorted(dropped))} by itself; remove it from the "
                            "source by hand, or scaffold by hand")
    return result


def real_site_design(text: str, shown: str) -> str:
    """A site file's text without `lab_only` (a new site from a lab is a real one)."""
    return _without_entries(text, shown, {LAB_ONLY_KEY}, [])


def real_site_vars(text: str, shown: str, name: str, source: str) -> str:
    """A variables file's text without the settings that turn SSH host key checking off
    (rackform.checks.host_keys), a comment in their place naming `source` (what it was copied from)."""
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError:  # not for us to judge: validate reads the new site's files with rackform's own loader
        return text
    if not isinstance(values, dict):
        return text
    dropped = {key for key, value in values.items() if isinstance(key, str) and checking_off(key, value)}
    if not dropped:
        return text
    note = [f"# Host key checking is on: {', '.join(sorted(dropped))} (which turned it off in {source}) was not copied.",
            f"# Record the machines' keys once they answer: `rackform ssh-keys {name} --collect` (docs/site-format.md)."]
    return _without_entries(text, shown, dropped, note)


# ---------------------------------------------------------------- the site file


def _rewrite(lines: list[str], line: int, key: str, old: object, new: object, shown: str) -> None:
    """Replace `key: old` with `key: new` on a 1-based line of the source text."""
    pattern = re.compile(rf"(?<![\w-]){re.escape(key)}:\s*([\"']?){re.escape(str(old))}\1(?![\w./:-])")
    text, count = pattern.subn(f"{key}: {new}", lines[line - 1], count=1)
    if count != 1:
        raise ScaffoldError(f"{shown}:{line}: {key}: cannot find '{old}' to rewrite; edit the source site's line to "
                            f"`{key}: {old}` or scaffold by hand")
    lines[line - 1] = text


def _header(name: str, source: str) -> list[str]:
    return [
        f"# Site {name}, scaffolded from {source} by `rackform new-site`: the same racks, blocks and cabling,",
        f"# addresses from {name}'s own prefixes. Edit it to fit, then `rackform validate {name}`.",
    ]


def site_text(site: Site, name: str, plan: AddressPlan) -> str:
    """The source site's design text with the new site's name, description, prefixes,
    gateways and API VIP."""
    shown = str(site.site_path)
    raw = load_yaml(site.site_path)
    lines = site.site_path.read_text(encoding="utf-8").splitlines()
    _rewrite(lines, raw.key_loc("site").line, "site", raw["site"], name, shown)
    if isinstance(raw.get("description"), str) and "\n" not in raw["description"]:
        line = raw.key_loc("description").line
        lines[line - 1] = re.sub(r"description:.*$", "description: " + json.dumps(
            f"{name} (scaffolded from {site.name}): describe the site here"), lines[line - 1], count=1)
    items = raw.get("networks")
    if not isinstance(items, LineList):
        raise ScaffoldError(f"{shown}: networks: the source's networks are not in its site file; scaffold by hand")
    for item in items:
        if not isinstance(item, LineDict) or item.get("name") not in plan.networks:
            continue
        new = plan.networks[item["name"]]
        if str(new.prefix) != str(item.get("prefix")):
            _rewrite(lines, item.key_loc("prefix").line, "prefix", item["prefix"], new.prefix, shown)
        if item.get("gateway") is not None and new.gateway is not None:
            _rewrite(lines, item.key_loc("gateway").line, "gateway", item["gateway"], new.gateway, shown)
    kubernetes = raw.get("kubernetes")
    if isinstance(kubernetes, LineDict) and kubernetes.get("api_vip") is not None and plan.api_vip is not None:
        _rewrite(lines, kubernetes.key_loc("api_vip").line, "api_vip", kubernetes["api_vip"], plan.api_vip, shown)
    first_content = next((i for i, text in enumerate(lines) if text.strip() and not text.lstrip().startswith("#")), 0)
    text = real_site_design("\n".join([*_header(name, site.name), *lines[first_content:]]) + "\n", shown)
    # The source's data sets are its tenants' data (its platform file, which is not copied): a new site starts with none.
    return _without_entries(text, shown, {DATA_SETS_KEY}, [
        f"# {site.name}'s data sets were not copied: they belong to its tenants. Declare this site's own under",
        "# `data_sets:` once topologies/platform/<site>.yaml names its tenants (docs/storage.md)."])


# ---------------------------------------------------------------- the inventory


def hosts_yml(site: Site, name: str) -> str:
    lines = [
        f"# Ansible inventory of site {name} (scaffolded from {site.name}): every host and managed switch.",
        "# Per-host facts live in host_vars/; groups are generated by `rackform render` from the design.",
        "all:",
        "  hosts:",
    ]
    lines += [f"    {node.name}:" for node in _managed(site)]
    return "\n".join(lines) + "\n"


def host_vars_yml(node: Host | Switch, addresses: _NodeAddresses, name: str) -> str:
    device = node.device
    lines = [
        f"# {node.name}: {device.block.name} in rack {device.rack} at U{device.position_u} (site {name}).",
        f"# {FILL_IN} from the delivery note or the chassis label, then uncomment (optional until then):",
        f'# serial: "{FILL_IN}"',
        f'# management_mac: "{FILL_IN}"',
    ]
    if addresses.bmc is not None:
        lines.append(f'# bmc_mac: "{FILL_IN}"')
    if addresses.management is not None:
        lines.append(f"management_address: {addresses.management}")
    if addresses.bmc is not None:
        lines.append(f"bmc_address: {addresses.bmc}")
    if addresses.fabric:
        lines.append("fabric_ports:")
        lines += [f'  {port}: {{address: {addresses.fabric[port]}}}  # mac: "{FILL_IN}"'
                  for port in node.ports if port in addresses.fabric]
    return "\n".join(lines) + "\n"


def group_vars_files(site: Site, plan: AddressPlan, name: str) -> dict[Path, str]:
    """The source's group_vars/, with each old gateway address replaced by the new one, the
    domain's leading label (when it is the source's name) by the new name, and no setting that
    turns host key checking off."""
    source_dir = site.inventory_path / "group_vars"
    moved = {str(old.gateway): str(plan.networks[net].gateway)
             for net, old in site.networks.items()
             if old.gateway is not None and plan.networks[net].gateway not in (None, old.gateway)}
    files: dict[Path, str] = {}
    for path in sorted(source_dir.rglob("*")) if source_dir.is_dir() else ():
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for old, new in moved.items():
            text = re.sub(rf"(?<![\d.]){re.escape(old)}(?![\d.])", new, text)
        text = re.sub(rf"^(domain:\s*[\"']?){re.escape(site.name)}\.", rf"\g<1>{name}.", text, flags=re.MULTILINE)
        files[Path("group_vars") / path.relative_to(source_dir)] = real_site_vars(text, str(path), name, site.name)
    return files


# ---------------------------------------------------------------- all of it


def scaffold_files(site: Site, name: str, prefixes: NewPrefixes) -> dict[Path, str]:
    """Every file of the new site, by path relative to the repository root."""
    plan = plan_addresses(site, prefixes)
    inventory = Path("inventories") / name
    files = {Path("topologies") / "sites" / f"{name}.yaml": site_text(site, name, plan),
             inventory / "hosts.yml": hosts_yml(site, name)}
    for node in _managed(site):
        files[inventory / "host_vars" / f"{node.name}.yml"] = host_vars_yml(node, plan.nodes[node.name], name)
    for path, text in group_vars_files(site, plan, name).items():
        files[inventory / path] = text
    return files
