"""The storage network: where data sets are served and read (docs/storage.md).

A site's `storage_fabric` network if it has one, else its `compute_fabric` network. A host's
addresses on it are the fabric port addresses inside that network's prefix. Both the storage
role (its exports) and the platform (its PersistentVolumes) read them here, so the server a
pod mounts and the clients an export admits cannot disagree.
"""

from __future__ import annotations

from ipaddress import IPv4Interface

from rackform.model.schema import Network, StoragePlacement
from rackform.model.site import Host, Site

STORAGE_PURPOSES = ("storage_fabric", "compute_fabric")
"""Which network carries storage traffic, in order of preference."""
NFS_RDMA_PORT = 20049
"""The port NFS over RDMA listens on (IANA service name `nfsrdma`)."""


def storage_network(site: Site) -> Network | None:
    """The site's storage_fabric network, else its compute_fabric network, else None."""
    for purpose in STORAGE_PURPOSES:
        network = site.network_for(purpose)
        if network is not None:
            return network
    return None


def storage_addresses(site: Site, host: Host) -> dict[str, IPv4Interface]:
    """The host's fabric port addresses on the storage network, sorted by port name (empty
    when the site has no such network or the host no address on it)."""
    network = storage_network(site)
    if network is None:
        return {}
    return {port: interface for port, interface in sorted(host.fabric_addresses.items())
            if interface.ip in network.prefix}


def serving_address(site: Site, host: Host) -> IPv4Interface | None:
    """Where a storage host serves its data sets: its first storage address by port name."""
    return next(iter(storage_addresses(site, host).values()), None)


def storage_placement(host: Host) -> StoragePlacement:
    """How the host serves NFS: its device's `storage:` placement, else the defaults."""
    return host.device.storage or StoragePlacement()


def serves_nfs_over_rdma(host: Host) -> bool:
    """Whether clients mount the host's data sets over RDMA (port 20049): kernel nfsd with
    `nfs_rdma` on (StoragePlacement). A Ganesha server is mounted over TCP: rackform renders
    no RDMA transport for it."""
    placement = storage_placement(host)
    return placement.nfs_server == "kernel" and placement.nfs_rdma
