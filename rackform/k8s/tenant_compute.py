"""What a tenant's pods may take besides GPUs: a ResourceQuota on CPU, memory and pods, and a
LimitRange that gives a container without requests the defaults, so the quota counts it.

    ResourceQuota compute-quota   requests.cpu, requests.memory, pods: the tenant's `cpu_cores`,
                                  `memory_gb`, `pods`, else its share of the GPU servers (below)
    LimitRange container-defaults a container without requests gets 100m CPU and 128Mi (a quota on
                                  requests refuses a pod that names none); no default limits

Kueue counts GPUs only (rackform.k8s.queues), and a GPU's guarantee is kept by preemption; CPU,
memory and pods have no queue to take them back. So the defaults split the GPU servers, where
the tenants' pods run (the control plane is tainted), without overlap: each tenant gets the CPU,
memory and pod slots that come with its guaranteed GPUs, plus an equal part of those of the GPUs
nobody is guaranteed. The defaults of all tenants add up to the servers' own, so no tenant's pods
can take the CPU that another's guaranteed GPUs need. A tenant that borrows GPUs runs the borrowed
pods within its own CPU and memory; a site whose jobs need more names `cpu_cores` and `memory_gb`.

Why no default limits: a LimitRange's default memory limit is put on a container that asks for
more memory than that limit and names no limit of its own, which the API server then refuses
(its request over its limit); and a default CPU limit throttles training jobs. Limits stay the
tenant's choice; requests are what the scheduler places by and what the quota bounds.

Numbers from the catalog: a block's node cpu_cores and memory_gb (topologies/blocks/*.yaml);
pod slots at the kubelet's default maxPods, 110 a node (doc: Kubernetes KubeletConfiguration).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rackform.k8s.platform import PlatformDesign, Tenant
from rackform.k8s.queues import idle_gpus, site_gpus
from rackform.model.site import Site

Manifest = dict[str, Any]
COMPUTE_QUOTA = "compute-quota"
LIMIT_RANGE = "container-defaults"
DEFAULT_CPU_REQUEST = "100m"
DEFAULT_MEMORY_REQUEST = "128Mi"
"""What a container that names no requests asks for: enough for a sidecar or a small service,
and what lets the quota count it."""
PODS_PER_NODE = 110
"""The kubelet's default maxPods."""
FLOOR = {"cpu_cores": 1, "memory_gb": 1, "pods": 10}
"""The least a tenant gets by default: a tenant with no guarantee, on a site whose guarantees
take every GPU, still runs a few small pods."""


@dataclass(frozen=True, slots=True)
class Compute:
    cpu_cores: int
    memory_gb: int
    pods: int


def gpu_servers_capacity(site: Site) -> Compute:
    """The CPU cores, memory (GB) and pod slots of the site's GPU servers together."""
    nodes = [host.block.node for host in site.hosts.values()
             if host.block.node is not None and host.block.node.gpus is not None]
    return Compute(sum(node.cpu_cores for node in nodes), sum(node.memory_gb for node in nodes),
                   PODS_PER_NODE * len(nodes))


def gpu_share(site: Site, design: PlatformDesign, tenant: Tenant) -> float:
    """The tenant's part of the GPU servers, 0 to 1: its guaranteed GPUs plus an equal part of
    the GPUs nobody is guaranteed, over every GPU; an equal part where the site has no GPU."""
    total = site_gpus(site)
    if total == 0:
        return 1 / len(design.tenants)
    return (tenant.gpus + idle_gpus(site, design) / len(design.tenants)) / total


def tenant_compute(site: Site, design: PlatformDesign, tenant: Tenant) -> Compute:
    """The tenant's CPU, memory and pod bounds: its own where the design names them, else its share."""
    share, capacity = gpu_share(site, design, tenant), gpu_servers_capacity(site)

    def bound(name: str) -> int:
        named = getattr(tenant, name)
        return named if named is not None else max(FLOOR[name], int(getattr(capacity, name) * share))

    return Compute(bound("cpu_cores"), bound("memory_gb"), bound("pods"))


def _meta(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "labels": {"app.kubernetes.io/managed-by": "rackform"}, "namespace": namespace}


def compute_manifests(site: Site, design: PlatformDesign, tenant: Tenant) -> list[Manifest]:
    """The tenant's compute quota and its containers' default requests."""
    compute = tenant_compute(site, design, tenant)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta(COMPUTE_QUOTA, tenant.name),
             "spec": {"hard": {"requests.cpu": str(compute.cpu_cores), "requests.memory": f"{compute.memory_gb}G",
                               "pods": str(compute.pods)}}}
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": _meta(LIMIT_RANGE, tenant.name),
              "spec": {"limits": [{"type": "Container",
                                   "defaultRequest": {"cpu": DEFAULT_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST}}]}}
    return [quota, limits]
