"""Preflight checks: bandwidth (warnings). Storage can feed the GPUs it serves."""

from __future__ import annotations

from collections.abc import Iterator

from rackform.checks.registry import check
from rackform.checks.cabling import host_fabric_links
from rackform.checks.findings import Finding
from rackform.model.site import Site

# Training reads its data set over the fabric: below about a quarter of the GPU
# nodes' fabric bandwidth, storage becomes the bottleneck for data-heavy jobs.
MIN_STORAGE_TO_GPU_SHARE = 0.25


def cabled_fabric_gbps(site: Site) -> dict[str, int]:
    """Fabric bandwidth per host role: the sum of its cabled fabric links, each at the
    speed it trains at (the slower of host port and switch port)."""
    totals: dict[str, int] = {}
    for link in host_fabric_links(site):
        totals[link.host.role] = totals.get(link.host.role, 0) + link.speed_gbps
    return totals


@check
def storage_bandwidth(site: Site) -> Iterator[Finding]:
    """Warn when storage fabric bandwidth is under 25 % of the GPU nodes' aggregate."""
    totals = cabled_fabric_gbps(site)
    gpu_gbps, storage_gbps = totals.get("gpu", 0), totals.get("storage", 0)
    if gpu_gbps == 0 or storage_gbps >= gpu_gbps * MIN_STORAGE_TO_GPU_SHARE:
        return
    storage_hosts = sum(1 for host in site.hosts.values() if host.role == "storage")
    gpu_hosts = sum(1 for host in site.hosts.values() if host.role == "gpu")
    yield Finding(
        "storage_bandwidth", "warning", site.fabric_loc, "fabric",
        f"storage fabric bandwidth is {storage_gbps:,} Gb/s ({storage_hosts} storage host(s)) against "
        f"{gpu_gbps:,} Gb/s for {gpu_hosts} GPU node(s): {storage_gbps / gpu_gbps:.0%}, under "
        f"{MIN_STORAGE_TO_GPU_SHARE:.0%}; add storage nodes or cable more storage ports",
    )
