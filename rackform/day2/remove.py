"""`node remove`'s file edits: the host leaves the design, its cables, hosts.yml and host_vars.

Its device goes from the rack (or, in a chassis of several nodes, its name from `hosts:`),
every cable with an end on it goes, its line in hosts.yml (under all.hosts and any group
of yours) and its host_vars go; its addresses are free again since nothing holds them.
A control-plane member is refused: the cluster's membership changes first, by a person.
"""

from __future__ import annotations

from rackform.day2.add import inventory_dir, site_file
from rackform.day2.errors import refuse
from rackform.day2.files import FileChange
from rackform.day2.yamledit import YamlFile, remove_at
from rackform.model.site import Site


def known_host(site: Site, host: str):
    """The site's Host; BadInput naming the hosts there are when it is unknown."""
    if host not in site.hosts:
        known = ", ".join(sorted(site.hosts))
        hint = " (it is a switch: switches are not retired with `node remove`)" if host in site.switches else ""
        raise refuse(site.loc, "hosts", f"unknown host {host!r}{hint}; the site's hosts are: {known}")
    return site.hosts[host]


def file_changes(site: Site, root, host: str) -> list[FileChange]:
    known_host(site, host)
    if site.kubernetes is not None and host in (site.kubernetes.control_plane or []):
        raise refuse(site.kubernetes_loc, "kubernetes.control_plane",
                     f"{host} is a control-plane node: take it out of kubernetes.control_plane (and the cluster) "
                     f"first; rackform does not shrink a control plane on its own")
    served = [data_set for data_set in site.data_sets if data_set.server == host]
    if served:
        raise refuse(served[0].loc, f"data_sets[{served[0].name}].server",
                     f"{host} serves data set(s) {', '.join(d.name for d in served)}: move them to another storage "
                     f"host (their `server:`) or take them out of the design first; rackform does not move data")
    design = YamlFile.load(root / site_file(site.name))
    _remove_from_racks(design, site, host)
    cables = design.data.get("cabling") or []
    for index in reversed(range(len(cables))):
        ends = {str(cables[index].get(key, "")).split(":")[0] for key in ("a", "b")}
        if host in ends:
            remove_at(cables, index)
    hosts = YamlFile.load(root / inventory_dir(site.name) / "hosts.yml")
    _remove_from_groups(hosts.data.get("all"), host)
    changes = [FileChange(site_file(site.name), design.original, design.text()),
               FileChange(inventory_dir(site.name) / "hosts.yml", hosts.original, hosts.text())]
    host_vars = root / inventory_dir(site.name) / "host_vars"
    for path in [host_vars / f"{host}{suffix}" for suffix in (".yml", ".yaml", ".json")] + \
            sorted((host_vars / host).glob("*")):
        if path.is_file():
            changes.append(FileChange(path.relative_to(root), path.read_text(), None))
    return changes


def _remove_from_racks(design: YamlFile, site: Site, host: str) -> None:
    device_name = site.hosts[host].device.name
    for rack in design.data.get("racks") or []:
        devices = rack.get("devices") or []
        for index, device in enumerate(devices):
            if device.get("name") != device_name:
                continue
            names = device.get("hosts")
            if names and len(names) > 1:
                names.remove(host)
            else:
                remove_at(devices, index)
            return
    raise refuse(site.hosts[host].loc, "racks", f"{host}'s device {device_name} is not written in "
                                                f"{site_file(site.name)}: remove it by hand")


def _remove_from_groups(group, host: str) -> None:
    if not isinstance(group, dict):
        return
    members = group.get("hosts")
    if isinstance(members, dict) and host in members:
        del members[host]
    for child in (group.get("children") or {}).values():
        _remove_from_groups(child, host)
