"""Preflight checks: the user's inventory against the design. What the inventory adds
(groups, variables) must fit what rackform generates, so the rendered inventory carries
all of it and means what it says; serials are unique and every cabled fabric port has an
address. (What one inventory file shows by itself is refused by rackform.model.inventory.)"""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from rackform.checks.registry import check
from rackform.checks.cabling import host_fabric_links
from rackform.checks.findings import Finding
from rackform.k8s.cni import cni_group_vars
from rackform.model.site import Host, Site, Switch
from rackform.model.source import Loc
from rackform.render.group_vars import CONNECTION_DEFAULTS, USER_CONCERN, build_group_vars
from rackform.render.groups import generated_groups, group_members
from rackform.render.host_vars import own_host_vars, own_switch_vars, peer_index
from rackform.render.storage_vars import storage_host_vars

# Host facts rackform writes only when the inventory gives them (so a sampled host may lack them).
_FACT_NAMES = frozenset({"ansible_host", "management_address", "management_mac", "bmc_address", "bmc_mac", "serial_number"})
# Where a person changes a value rackform renders, for the names it is most often tried with.
_RENDERED_FROM = {
    "ansible_host": "management_address in host_vars",
    "serial_number": "serial in host_vars",
    "fabric_ports": "fabric_ports in host_vars (address, mac) and the design's cabling",
    "site_ntp_servers": "ntp_servers in group_vars/all.yml",
    "site_dns_servers": "dns_servers in group_vars/all.yml",
    "site_timezone": "timezone in group_vars/all.yml",
    "site_domain": "domain in group_vars/all.yml",
}
_RENDERED_FROM_PREFIX = {
    "fabric_host_": "fabric.host in the site design, or a device's roce_overrides",
    "fabric_switch_": "fabric.switch in the site design, or a device's roce_overrides",
    "fabric_": "fabric in the site design",
    "kube_": "kubernetes in the site design",
    "gpu_node_": "the block's gpus in the catalog",
    "switch_": "the device's switch placement in the site design",
    "storage_": "the site design's data_sets (docs/storage.md)",
}


def _user(site: Site):
    return site.user_inventory


def _nodes(site: Site) -> Iterator[Host | Switch]:
    yield from site.hosts.values()
    yield from site.switches.values()


def _var_loc(node: Host | Switch, key: str) -> Loc:
    return node.var_locs.get(key) or node.vars_loc or node.loc


def _shown(names) -> str:
    return ", ".join(sorted(names)) or "none"


@check
def inventory_groups(site: Site) -> Iterator[Finding]:
    """A group of hosts.yml named like a generated group lists the design's members or none, and adds no children."""
    user = _user(site)
    if user is None or not user.groups:
        return
    generated = group_members(generated_groups(site))
    for name, group in user.groups.items():
        if name not in generated:
            continue
        hosts, children = generated[name]
        if group.hosts and set(group.hosts) != hosts:
            yield Finding(
                "inventory_groups", "error", group.loc, name,
                f"rackform generates group '{name}' from the design with hosts {_shown(hosts)}; hosts.yml gives it "
                f"{_shown(group.hosts)}: list the same hosts or none, or use a group of your own",
            )
        if group.children:
            yield Finding(
                "inventory_groups", "error", next(iter(group.children.values())), f"{name}.children",
                f"rackform generates group '{name}' from the design (children: {_shown(children)}); "
                "it cannot take children from hosts.yml: make your group the parent instead",
            )


@check
def inventory_group_names(site: Site) -> Iterator[Finding]:
    """Variables are for a group that exists; an empty group that looks like a typo is pointed out."""
    user = _user(site)
    if user is None:
        return
    generated = group_members(generated_groups(site))
    known = {"all", *generated, *user.groups}
    for name, variables in user.group_vars.items():
        if name not in known:
            yield Finding(
                "inventory_group_names", "error", variables.loc or site.loc, name,
                f"variables for group '{name}', which is neither generated from the design nor declared in hosts.yml"
                f"{_did_you_mean(name, known)}",
            )
    for name, group in user.groups.items():
        if name in generated or group.hosts or group.children or name in user.group_vars:
            continue
        hint = _did_you_mean(name, known - {name})
        if hint:
            yield Finding("inventory_group_names", "warning", group.loc, name, f"empty group{hint}")


def _did_you_mean(name: str, known) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


@check
def inventory_variables(site: Site) -> Iterator[Finding]:
    """No inventory variable has the name of one rackform renders: one of the two values would be lost."""
    user = _user(site)
    with_vars = [node for node in _nodes(site) if node.user_vars]
    group_vars = [(name, variables) for name, variables in (user.group_vars.items() if user else ()) if variables.values]
    if not with_vars and not group_vars:
        return
    rendered = _rendered_group_names(site)
    peers = peer_index(site)
    storage = storage_host_vars(site)
    for node in with_vars:
        names = rendered | set(_own_vars(node, peers, site)) | set(storage.get(node.name, ()))
        for key in node.user_vars:
            if key in names and key not in CONNECTION_DEFAULTS:
                yield _rendered_finding(_var_loc(node, key), f"{node.name}.{key}", key)
    host_names = _rendered_host_names(site, peers).union(*storage.values())
    for group, variables in group_vars:
        for key in variables.values:
            if key in (rendered | host_names) and key not in CONNECTION_DEFAULTS:
                yield _rendered_finding(variables.locs[key], f"{group}.{key}", key)


def _rendered_group_names(site: Site) -> set[str]:
    names = {key for concerns in build_group_vars(site).values()
             for concern, values in concerns.items() if concern != USER_CONCERN for key in values}
    return names | set(cni_group_vars(site))


def _own_vars(node: Host | Switch, peers, site: Site) -> dict:
    return own_host_vars(node, peers) if isinstance(node, Host) else own_switch_vars(node, peers, site.switches)


def _rendered_host_names(site: Site, peers) -> set[str]:
    """Every variable rackform writes into some host_vars file of the site."""
    names: set[str] = set()
    seen_kinds: set[tuple] = set()
    for node in _nodes(site):
        kind = (type(node).__name__, node.device.block.name, node.device.roce_overrides is not None)
        if kind in seen_kinds:
            continue
        seen_kinds.add(kind)
        names |= set(_own_vars(node, peers, site))
    return names | _FACT_NAMES


def _rendered_finding(loc: Loc, key_path: str, key: str) -> Finding:
    source = _RENDERED_FROM.get(key) or next(
        (where for prefix, where in _RENDERED_FROM_PREFIX.items() if key.startswith(prefix)), "the site design and inventory"
    )
    return Finding(
        "inventory_variables", "error", loc, key_path,
        f"rackform writes '{key}' itself (from {source}): set it there, or give your variable another name",
    )


@check
def unlisted_host_vars(site: Site) -> Iterator[Finding]:
    """host_vars of a host hosts.yml does not list would be ignored by Ansible."""
    user = _user(site)
    for name, loc in (user.unlisted_host_vars.items() if user else ()):
        if name in site.hosts or name in site.switches:
            continue  # placed but not listed: reported where the design places it
        yield Finding(
            "unlisted_host_vars", "error", loc, name,
            "variables for a host that the inventory's hosts.yml does not list (Ansible would ignore them)",
        )


@check
def unique_serials(site: Site) -> Iterator[Finding]:
    """No two hosts or switches share a serial number (a copied host_vars file, left half-edited)."""
    first: dict[str, Host | Switch] = {}
    for node in _nodes(site):
        if node.serial is None:
            continue
        other = first.setdefault(node.serial, node)
        if other is not node:
            yield Finding(
                "unique_serials", "error", _var_loc(node, "serial"), f"{node.name}.serial",
                f"{node.serial} is already the serial of {other.name} ({_var_loc(other, 'serial')})",
            )


@check
def cabled_fabric_ports_addressed(site: Site) -> Iterator[Finding]:
    """Every host fabric port the cabling plan connects has an address in the inventory."""
    for link in host_fabric_links(site):
        host, port = link.host, link.host_port.name
        if port in host.fabric_addresses:
            continue
        loc = host.var_locs.get(f"fabric_ports.{port}") or host.var_locs.get("fabric_ports") or host.vars_loc or host.loc
        yield Finding(
            "cabled_fabric_ports_addressed", "error", loc, f"{host.name}.fabric_ports.{port}",
            f"cabled to {link.switch.name}:{link.switch_port.name} ({link.cable.loc}) but has no address; "
            f"give fabric_ports.{port}.address",
        )
