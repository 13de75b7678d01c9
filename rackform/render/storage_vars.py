"""The storage stage's host variables: who serves which data set, and who may read it.

Pure functions of the site (docs/storage.md). Each data set is served at its server's first
address on the storage network (rackform.model.storage_network) and exported to every
storage-network address of each of its clients, as /32s. Per host, into its host_vars:

- a server of data sets: `storage_nfs_server` (kernel | ganesha), `storage_nfs_rdma`,
  `storage_address` and `storage_exports` (one entry per data set it serves);
- a client of data sets: `storage_mounts` (what it may read, and where);
- any other host on the storage network: `storage_refused` (what verify expects it to be
  refused: a server must not answer a host outside a data set's list);
- all three: `storage_ports`, the fabric ports on the storage network, whose MTU verify
  compares with the fabric's host MTU (`fabric_host_mtu`: not written again here).

Hosts of a site without data sets, and hosts off the storage network, get nothing.
Data sets whose server or clients are not hosts with a storage address are left out: the
design checks name them (rackform.checks), and rendering never runs on a rejected design.
"""

from __future__ import annotations

import hashlib

from rackform.model.site import DataSet, Site
from rackform.model.storage_network import (
    serves_nfs_over_rdma,
    serving_address,
    storage_addresses,
    storage_placement,
)

MARKER_FILE = ".rackform-check"
"""A file the storage role writes into every data set's folder; verify reads it from each client."""
EXPORT_ID_MAX = 65535
"""NFS-Ganesha's Export_Id is 16 bits; 0 is its pseudo root. Kernel nfsd takes the same as fsid."""


def marker_content(name: str) -> str:
    """The marker file's fixed text: verify knows its sha256 without asking the server."""
    return f"rackform data set {name}\n"


def marker_sha256(name: str) -> str:
    return hashlib.sha256(marker_content(name).encode()).hexdigest()


def export_ids(names: list[str]) -> dict[str, int]:
    """Name -> export id (1..65535), derived from the name so that adding or removing another
    data set never renumbers this one: the id is part of every NFS file handle a client holds
    (Ganesha's Export_Id, the kernel's fsid), and a changed id turns a mounted data set stale.
    Two names whose hashes meet are told apart in name order (the later one takes the next
    free id): only removing one of such a pair can move the other."""
    ids: dict[str, int] = {}
    used: set[int] = set()
    for name in sorted(set(names)):
        candidate = 1 + int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % EXPORT_ID_MAX
        while candidate in used:
            candidate = candidate % EXPORT_ID_MAX + 1
        ids[name] = candidate
        used.add(candidate)
    return ids


def _client_networks(site: Site, data_set: DataSet) -> list[str]:
    return [f"{interface.ip}/32" for name in data_set.clients if name in site.hosts
            for interface in storage_addresses(site, site.hosts[name]).values()]


def storage_host_vars(site: Site) -> dict[str, dict]:
    """Host name -> its storage variables (only hosts that get any)."""
    if not site.data_sets:
        return {}
    served = [data_set for data_set in site.data_sets
              if data_set.server in site.hosts and serving_address(site, site.hosts[data_set.server]) is not None]
    by_server: dict[str, list[DataSet]] = {}
    for data_set in served:
        by_server.setdefault(data_set.server, []).append(data_set)

    found: dict[str, dict] = {}
    for server, data_sets in by_server.items():
        host = site.hosts[server]
        ids = export_ids([data_set.name for data_set in data_sets])
        found[server] = {
            "storage_nfs_server": storage_placement(host).nfs_server,
            # Kernel nfsd only (its RDMA listener, rdma=y on port 20049): what the volumes mount.
            "storage_nfs_rdma": serves_nfs_over_rdma(host),
            "storage_address": str(serving_address(site, host).ip),
            "storage_exports": [
                {
                    "name": data_set.name,
                    "tenant": data_set.tenant,
                    "size_gb": data_set.size_gb,
                    "mode": data_set.mode,
                    "path": data_set.path,
                    "pseudo": f"/{data_set.name}",
                    "export_id": ids[data_set.name],
                    "clients": _client_networks(site, data_set),
                    "marker_file": MARKER_FILE,
                    "marker": marker_content(data_set.name),
                }
                for data_set in data_sets
            ],
        }

    for data_set in served:
        address = str(serving_address(site, site.hosts[data_set.server]).ip)
        read = {
            "name": data_set.name,
            "server": data_set.server,
            "address": address,
            "pseudo": f"/{data_set.name}",
            "mode": data_set.mode,
            "marker_file": MARKER_FILE,
            "marker_sha256": marker_sha256(data_set.name),
        }
        clients = set(data_set.clients)
        for host in site.hosts.values():
            if host.name == data_set.server or not storage_addresses(site, host):
                continue
            key = "storage_mounts" if host.name in clients else "storage_refused"
            found.setdefault(host.name, {}).setdefault(key, []).append(dict(read))

    for name, values in found.items():
        values["storage_ports"] = list(storage_addresses(site, site.hosts[name]))
    return {name: found[name] for name in site.hosts if name in found}
