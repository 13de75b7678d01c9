"""Ansible groups of a site: the tree written to `inventory/hosts.yml`.

Groups come from the design, never from hand edits: one per host role
(`management_plane`, `compute`, `storage`, `gpu`, under `servers`), per switch OS
and switch role (under `switches`, plus `fabric_switches` for leaves and spines),
the Kubernetes groups Kubespray's users know (`etcd` holds the control plane:
stacked etcd), one per block type
(`block_dgx_h100`), one per rack (`rack_r1`) and `provisioning`, the host that
serves PXE to the rest. The fixed groups are always present, even empty, so no
play ever names an unknown group.
Unmanaged switches have no Ansible connection and stay out of the inventory.
Groups the user declares in the inventory's hosts.yml are added after the generated ones.
"""

from __future__ import annotations

import re

from rackform.model.site import HOST_ROLE_BY_CATEGORY, Site, Switch

SERVER_GROUPS = tuple(dict.fromkeys(HOST_ROLE_BY_CATEGORY.values()))
SWITCH_OS_GROUPS = ("cumulus", "onyx")
SWITCH_ROLE_GROUPS = {"leaf": "leaf", "spine": "spine", "management": "management_switch", "oob": "oob_switch"}
# Switches of the lossless RoCE fabric: only they get the fabric.switch settings
# (MTU, PFC, ECN); management and out-of-band switches keep their defaults.
FABRIC_SWITCH_ROLES = ("leaf", "spine")
# Host roles whose hosts run workloads as Kubernetes nodes; the control plane is
# named in the design. Storage nodes serve NVMe-oF/NFS and are not cluster nodes.
KUBE_WORKER_ROLES = ("compute", "gpu")
# The PXE service (role pxe_server) runs on the site's first management-plane host:
# it sits on the management network, comes up first (it is installed by hand or
# from USB as the seed) and stays up, unlike the controller running rackform.
PROVISIONING_ROLE = "management_plane"


def group_name(text: str) -> str:
    """An Ansible-safe group name (letters, digits, underscores)."""
    return re.sub(r"[^a-z0-9_]", "_", text.lower())


def block_group(block_name: str) -> str:
    return "block_" + group_name(block_name)


def rack_group(rack_name: str) -> str:
    return "rack_" + group_name(rack_name)


def managed_switches(site: Site) -> list[Switch]:
    """Switches Ansible or netmiko can reach (not `unmanaged`), in design order."""
    return [switch for switch in site.switches.values() if switch.os != "unmanaged"]


def _group(hosts: list[str]) -> dict:
    return {"hosts": dict.fromkeys(hosts)} if hosts else {}


def _server_groups(site: Site) -> dict:
    by_role: dict[str, list[str]] = {role: [] for role in SERVER_GROUPS}
    for host in site.hosts.values():
        by_role[host.role].append(host.name)
    return {role: _group(names) for role, names in by_role.items()}


def _switch_groups(switches: list[Switch]) -> dict:
    by_os: dict[str, list[str]] = {os_name: [] for os_name in SWITCH_OS_GROUPS}
    by_role: dict[str, list[str]] = {group: [] for group in SWITCH_ROLE_GROUPS.values()}
    for switch in switches:
        by_os[switch.os].append(switch.name)
        by_role[SWITCH_ROLE_GROUPS[switch.role]].append(switch.name)
    fabric = [switch.name for switch in switches if switch.role in FABRIC_SWITCH_ROLES]
    return {
        **{os_name: _group(names) for os_name, names in by_os.items()},
        "fabric_switches": _group(fabric),
        **{role: _group(names) for role, names in by_role.items()},
    }


def _kube_groups(site: Site) -> dict:
    control_plane = list(site.kubernetes.control_plane) if site.kubernetes else []
    in_control_plane = set(control_plane)
    workers = [
        host.name
        for host in site.hosts.values()
        if site.kubernetes and host.role in KUBE_WORKER_ROLES and host.name not in in_control_plane
    ]
    return {"kube_control_plane": _group(control_plane), "kube_node": _group(workers)}


def _provisioning_group(site: Site) -> dict:
    first = next((host.name for host in site.hosts.values() if host.role == PROVISIONING_ROLE), None)
    return _group([first] if first else [])


def _placement_groups(site: Site, managed: set[str]) -> dict:
    """One group per block type (sorted) and one per rack (design order)."""
    by_block: dict[str, list[str]] = {}
    by_rack: dict[str, list[str]] = {rack_group(rack.name): [] for rack in site.racks}
    for rack in site.racks:
        for device in rack.devices:
            names = [name for name in device.host_names if name in site.hosts or name in managed]
            if names:
                by_block.setdefault(block_group(device.block.name), []).extend(names)
                by_rack[rack_group(rack.name)].extend(names)
    return {
        **{group: _group(by_block[group]) for group in sorted(by_block)},
        **{group: _group(names) for group, names in by_rack.items()},
    }


def generated_groups(site: Site) -> dict:
    """The groups rackform derives from the design, as the `all` group of hosts.yml."""
    switches = managed_switches(site)
    return {
        "children": {
            "servers": {"children": _server_groups(site)},
            "switches": {"children": _switch_groups(switches)},
            "k8s_cluster": {"children": _kube_groups(site)},
            # Kubespray's etcd group: kubeadm runs etcd stacked on the control plane.
            "etcd": _group(list(site.kubernetes.control_plane) if site.kubernetes else []),
            "provisioning": _provisioning_group(site),
            **_placement_groups(site, {switch.name for switch in switches}),
        }
    }


def group_members(all_group: dict) -> dict[str, tuple[set[str], set[str]]]:
    """group -> (its direct hosts, its child groups), for every group under `all`."""
    found: dict[str, tuple[set[str], set[str]]] = {}

    def walk(group: dict | None) -> None:
        for name, child in ((group or {}).get("children") or {}).items():
            hosts, children = found.setdefault(name, (set(), set()))
            hosts.update((child or {}).get("hosts") or {})
            children.update((child or {}).get("children") or {})
            walk(child)

    walk(all_group)
    return found


def _user_groups(site: Site, generated: dict) -> dict:
    """The user's own groups of hosts.yml, each with its hosts and child groups (by name).

    Written flat under `all`: a group's depth, which orders Ansible's variable merge,
    is its longest path from `all` and stays the same. Groups named like generated ones
    are the design's (the `inventory_groups` check refuses other members), so they are
    not written twice; their variables go to group_vars like any group's."""
    user = site.user_inventory
    if user is None:
        return {}
    written = {}
    for name, group in user.groups.items():
        if name in generated:
            continue
        written[name] = {
            **({"hosts": dict.fromkeys(group.hosts)} if group.hosts else {}),
            **({"children": dict.fromkeys(group.children)} if group.children else {}),
        }
    return written


def build_groups(site: Site) -> dict:
    """The `all` group as written to hosts.yml: {children: {group: {hosts: {name: None}, children: ...}}}.

    The generated groups, then the user's own groups from the inventory's hosts.yml."""
    tree = generated_groups(site)
    tree["children"].update(_user_groups(site, group_members(tree)))
    return tree


def host_groups(all_group: dict) -> dict[str, dict[str, int]]:
    """Each host's groups with their depth (`all` is 0), as Ansible computes them.

    Ansible merges group_vars from shallow to deep groups (then by name), so a
    host's merged variables can be rebuilt from this. One walk over the tree.
    """
    depth: dict[str, int] = {}
    members: dict[str, set[str]] = {}
    parents: dict[str, set[str]] = {}

    def walk(name: str, group: dict | None, level: int) -> None:
        depth[name] = max(depth.get(name, 0), level)
        group = group or {}
        for host in group.get("hosts") or {}:
            members.setdefault(name, set()).add(host)
        for child, child_group in (group.get("children") or {}).items():
            parents.setdefault(child, set()).add(name)
            walk(child, child_group, level + 1)

    walk("all", all_group, 0)
    ancestors: dict[str, set[str]] = {}

    def lineage(name: str) -> set[str]:
        if name not in ancestors:
            found = {name}
            for parent in parents.get(name, ()):
                found |= lineage(parent)
            ancestors[name] = found
        return ancestors[name]

    result: dict[str, dict[str, int]] = {}
    for name, hosts in members.items():
        groups = lineage(name) | {"all"}
        for host in hosts:
            result.setdefault(host, {}).update((group, depth[group]) for group in groups)
    return result
