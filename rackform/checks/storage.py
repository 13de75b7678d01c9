"""Preflight checks: the data sets the storage blocks serve (docs/storage.md, "In the design").

A data set names its server, its owning tenant, its size and its clients; each rule here
refuses, at the data set's line in the site file, a design the storage role could not serve:
a server that is not a storage host, data sets that do not fit the block's usable capacity, a
tenant the platform design does not have, two data sets on one name or one folder, and hosts
with no address on the storage network.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from rackform.checks.registry import check
from rackform.checks.findings import Finding
from rackform.model.schema import BlockType
from rackform.model.site import DataSet, Site
from rackform.model.source import Loc, SourceError, display_path
from rackform.model.storage_network import storage_addresses, storage_network

STORAGE_ROLE = "storage"
GB_PER_TB = 1000
"""Drive sizes are vendors' decimal terabytes; data set sizes decimal gigabytes."""
GANESHA_WITHOUT_RDMA = (
    "NFS-Ganesha as Debian builds it (4.3) has no NFS over RDMA: its libntirpc carries no RDMA transport, "
    "so it serves over TCP only; drop `nfs_rdma: true`, or serve with `nfs_server: kernel` for RDMA")


def _key(data_set: DataSet, field: str = "") -> str:
    return f"data_sets[{data_set.name}]" + (f".{field}" if field else "")


# ---------------------------------------------------------------- capacity


def usable_capacity_gb(block: BlockType) -> tuple[float | None, str]:
    """The block's usable capacity for data sets in GB, and how it was reached (or, for None,
    why it is unknown): the drives of its `storage.data_media`, times data/(data + parity)."""
    if block.storage is None:
        return None, (f"the block gives no protection: {block.name} has no `storage:` section "
                      f"(topologies/blocks/{block.name}.yaml)")
    drives = [group for group in (block.node.drives if block.node else []) if group.media in block.storage.data_media]
    media = "/".join(block.storage.data_media)
    if not drives:
        return None, f"the block gives no drive sizes: {block.name} has no {media} drives"
    if any(group.size_tb is None for group in drives):
        return None, f"the block gives no drive sizes: {block.name}'s {media} drives have no size_tb"
    raw_tb = sum(group.count * group.size_tb for group in drives)
    protection = block.storage.protection
    units = protection.data_units + protection.parity_units
    usable = raw_tb * GB_PER_TB * protection.data_units / units
    return usable, f"{raw_tb:.10g} TB of {media} drives x {protection.data_units}/{units}, {protection.scheme}"


# ---------------------------------------------------------------- device placements


@check
def storage_placements(site: Site) -> Iterator[Finding]:
    """`storage:` only on storage blocks; `nfs_rdma: true` only where the server can serve RDMA."""
    for device in site.devices():
        if device.storage is None:
            continue
        if device.block.category != STORAGE_ROLE:
            yield Finding("storage_placements", "error", device.loc, f"devices[{device.name}].storage",
                          f"block '{device.block.name}' is a {device.block.category} block; only storage blocks "
                          f"serve data sets")
        elif device.storage.nfs_server == "ganesha" and "nfs_rdma" in device.storage.model_fields_set \
                and device.storage.nfs_rdma:
            yield Finding("storage_placements", "warning", device.loc, f"devices[{device.name}].storage.nfs_rdma",
                          GANESHA_WITHOUT_RDMA)


# ---------------------------------------------------------------- data sets


@check
def data_set_names_and_paths(site: Site) -> Iterator[Finding]:
    """Every data set has its own name, and its own folder on its server (not inside another's)."""
    names: dict[str, DataSet] = {}
    folders: dict[str, list[tuple[str, DataSet]]] = {}
    for data_set in site.data_sets:
        first = names.setdefault(data_set.name, data_set)
        if first is not data_set:
            yield Finding("data_set_names_and_paths", "error", data_set.loc, _key(data_set, "name"),
                          f"data set name used twice (first at {first.loc}): it names the export and the "
                          f"PersistentVolume")
            continue
        folder = posixpath.normpath(data_set.path)
        for other_folder, other in folders.get(data_set.server, []):
            if other_folder == folder:
                yield Finding("data_set_names_and_paths", "error", data_set.loc, _key(data_set, "path"),
                              f"{folder} on {data_set.server} is also the folder of data set '{other.name}' (at "
                              f"{other.loc}): two data sets on one path would share their files")
            elif _inside(folder, other_folder) or _inside(other_folder, folder):
                inner, outer = (data_set, other) if _inside(folder, other_folder) else (other, data_set)
                yield Finding("data_set_names_and_paths", "error", data_set.loc, _key(data_set, "path"),
                              f"data set '{inner.name}' ({posixpath.normpath(inner.path)}) lies inside data set "
                              f"'{outer.name}' ({posixpath.normpath(outer.path)}) on {data_set.server}, at "
                              f"{other.loc}: its files would be served through both exports")
        folders.setdefault(data_set.server, []).append((folder, data_set))


def _inside(folder: str, parent: str) -> bool:
    return folder.startswith(parent.rstrip("/") + "/")


@check
def data_set_servers(site: Site) -> Iterator[Finding]:
    """Every data set's server is a storage host of the site."""
    storage_hosts = sorted(host.name for host in site.hosts_in_role(STORAGE_ROLE))
    for data_set in site.data_sets:
        host = site.hosts.get(data_set.server)
        if host is not None and host.role == STORAGE_ROLE:
            continue
        what = f"'{data_set.server}' is a {host.role} host" if host else f"no host named '{data_set.server}'"
        yield Finding("data_set_servers", "error", data_set.loc, _key(data_set, "server"),
                      f"{what}; a data set is served by a storage host: "
                      f"{', '.join(storage_hosts) or 'the site has none (add a storage block)'}")


@check
def data_set_capacity(site: Site) -> Iterator[Finding]:
    """The data sets on one server fit the usable capacity of its block."""
    by_server: dict[str, list[DataSet]] = {}
    for data_set in site.data_sets:
        host = site.hosts.get(data_set.server)
        if host is not None and host.role == STORAGE_ROLE:
            by_server.setdefault(data_set.server, []).append(data_set)
    for server, data_sets in by_server.items():
        block = site.hosts[server].block
        usable_gb, basis = usable_capacity_gb(block)
        if usable_gb is None:
            yield Finding("data_set_capacity", "error", data_sets[0].loc, _key(data_sets[0], "server"),
                          f"usable capacity unknown: {basis}; {server} cannot be given data sets until it does")
            continue
        total_gb = sum(data_set.size_gb for data_set in data_sets)
        if total_gb > usable_gb:
            shares = ", ".join(f"{data_set.name} {data_set.size_gb}" for data_set in data_sets)
            last = data_sets[-1]
            yield Finding("data_set_capacity", "error", last.loc, _key(last, "size_gb"),
                          f"the data sets on {server} total {total_gb} GB ({shares}) but its {block.name} block "
                          f"holds {usable_gb:.0f} GB usable ({basis}); shrink them or move some to another "
                          f"storage host")


@check
def data_set_tenants(site: Site) -> Iterator[Finding]:
    """Every data set's owner is a tenant of the site's platform design (topologies/platform/<site>.yaml)."""
    from rackform.k8s.platform import load_platform, platform_path

    if not site.data_sets:
        return
    path = platform_path(site)
    shown = display_path(path, site.site_path.parent.parent.parent)
    if not path.exists():
        for data_set in site.data_sets:
            yield Finding("data_set_tenants", "error", data_set.loc, _key(data_set, "tenant"),
                          f"no tenant '{data_set.tenant}': the site has no platform design ({shown}, where "
                          f"tenants are declared)")
        return
    try:
        design = load_platform(site)
    except SourceError as error:
        if site.kubernetes is None:  # else platform_versions reports it
            yield Finding("data_set_tenants", "error", error.loc, error.key or "platform", error.message)
        return
    tenants = [tenant.name for tenant in design.tenants]
    for data_set in site.data_sets:
        if data_set.tenant not in tenants:
            yield Finding("data_set_tenants", "error", data_set.loc, _key(data_set, "tenant"),
                          f"no tenant '{data_set.tenant}' in {shown}; tenants: {', '.join(tenants) or 'none'}")


@check
def data_set_network(site: Site) -> Iterator[Finding]:
    """Servers and clients have an address on the storage network; clients are server hosts."""
    if not site.data_sets:
        return
    network = storage_network(site)
    if network is None:
        yield Finding("data_set_network", "error", site.data_sets[0].loc, "data_sets",
                      "the site has no storage network to serve data sets on: add a network of purpose "
                      "storage_fabric (or compute_fabric)")
        return
    reported: set[str] = set()
    for data_set in site.data_sets:
        server = site.hosts.get(data_set.server)
        if server is not None and server.role == STORAGE_ROLE and server.name not in reported \
                and not storage_addresses(site, server):
            reported.add(server.name)
            yield Finding("data_set_network", "error", data_set.loc, _key(data_set, "server"),
                          f"{server.name} has no address on the storage network {network.name} ({network.prefix}) "
                          f"to serve from: give one of its fabric ports an address there in its host_vars")
        locs = data_set.client_locs or (data_set.loc,) * len(data_set.clients)
        for client, loc in zip(data_set.clients, locs):
            yield from _client_findings(site, data_set, client, loc, network, reported)


def _client_findings(site: Site, data_set: DataSet, client: str, loc: Loc, network, reported: set[str]):
    host = site.hosts.get(client)
    if host is None:
        what = "a switch" if client in site.switches else "no host of the site"
        yield Finding("data_set_network", "error", loc, _key(data_set, "clients"),
                      f"'{client}' is {what}; a data set's clients are the site's server hosts")
    elif client not in reported and not storage_addresses(site, host):
        reported.add(client)
        yield Finding("data_set_network", "error", loc, _key(data_set, "clients"),
                      f"{client} has no address on the storage network {network.name} ({network.prefix}): it "
                      f"could not reach the export; give one of its fabric ports an address there, or drop it "
                      f"from the clients")
