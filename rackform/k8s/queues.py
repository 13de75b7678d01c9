"""GPU quotas and fair share: the tenants' Kueue queues (the Run:AI seed's GPU pools).

    ResourceFlavor gpu                 the site's GPUs (one flavor: every GPU block)
    ClusterQueue <tenant>              nominalQuota: the tenant's guaranteed GPUs; borrowingLimit: its `borrow`
    ClusterQueue <cohort>-idle         the GPUs no tenant is guaranteed: anyone may borrow them, nobody owns them
    LocalQueue <tenant>/gpu            where the tenant's jobs go (label kueue.x-k8s.io/queue-name: gpu)

Every ClusterQueue is in one cohort, so a tenant borrows what the others leave idle.
When the owner comes back, Kueue reclaims its quota by preempting the borrowers'
workloads (`reclaimWithinCohort: Any`); inside one queue a higher priority preempts a
lower one. Kueue counts GPUs only: every other resource is excluded in its
configuration (`KUEUE_EXCLUDED_PREFIXES`), so a job's CPU and memory requests never make
it inadmissible (a queue must cover every resource a workload requests otherwise).

The ResourceQuota of a tenant's namespace (rackform.k8s.manifests) is the hard ceiling
beside this: guarantee plus borrowing limit, so a pod that bypasses the queue still
cannot hold more.

Field names: sigs.k8s.io/kueue v0.17.0 apis/kueue/v1beta2 (clusterqueue_types.go,
localqueue_types.go, resourceflavor_types.go), read from the pinned module.
"""

from __future__ import annotations

from typing import Any

from rackform.k8s.platform import PlatformDesign, Tenant
from rackform.k8s.gpu_sharing import GPU_RESOURCE
from rackform.model.site import Site

KUEUE_API = "kueue.x-k8s.io/v1beta2"
GPU_FLAVOR = "gpu"
LOCAL_QUEUE = "gpu"
"""The LocalQueue every tenant namespace has: a job names it in kueue.x-k8s.io/queue-name."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COHORT = "gpus"
IDLE_QUEUE = f"{COHORT}-idle"
KUEUE_EXCLUDED_PREFIXES = ("cpu", "memory", "ephemeral-storage", "hugepages-", "rdma/", "pods")
"""Resources Kueue does not count (Configuration resources.excludeResourcePrefixes)."""
MANAGED = {"app.kubernetes.io/managed-by": "rackform"}

Manifest = dict[str, Any]


def site_gpus(site: Site) -> int:
    """Every GPU of the site's servers (the blocks' gpus.count per node)."""
    return sum(host.block.node.gpus.count for host in site.hosts.values()
               if host.block.node is not None and host.block.node.gpus is not None)


def gpu_ceiling(tenant: Tenant, total_gpus: int) -> int:
    """The most GPUs the tenant may ever hold: its guarantee plus what it may borrow, within the site."""
    borrow = total_gpus if tenant.borrow is None else tenant.borrow
    return max(tenant.gpus, min(total_gpus, tenant.gpus + borrow))


def idle_gpus(site: Site, design: PlatformDesign) -> int:
    """GPUs no tenant is guaranteed (never negative: validate refuses over-committed guarantees)."""
    return max(0, site_gpus(site) - sum(tenant.gpus for tenant in design.tenants))


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(MANAGED)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _gpu_quota(nominal: int, borrowing_limit: int | None) -> dict[str, Any]:
    quota: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": str(nominal)}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = str(borrowing_limit)
    return {"coveredResources": [GPU_RESOURCE], "flavors": [{"name": GPU_FLAVOR, "resources": [quota]}]}


def cluster_queue(name: str, nominal: int, borrowing_limit: int | None, namespace: str | None) -> Manifest:
    spec: dict[str, Any] = {
        "cohortName": COHORT,
        "resourceGroups": [_gpu_quota(nominal, borrowing_limit)],
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority",
                       "borrowWithinCohort": {"policy": "Never"}},
    }
    if namespace is not None:
        # Only the tenant's own namespace may queue here (a LocalQueue elsewhere pointing at it is inactive).
        spec["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": _meta(name), "spec": spec}


def tenant_queues(tenant: Tenant) -> list[Manifest]:
    return [
        cluster_queue(tenant.name, tenant.gpus, tenant.borrow, tenant.name),
        {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": _meta(LOCAL_QUEUE, tenant.name),
         "spec": {"clusterQueue": tenant.name}},
    ]


def queue_manifests(site: Site, design: PlatformDesign) -> list[Manifest]:
    """The flavor, one ClusterQueue + LocalQueue per tenant, and the idle pool; empty without tenants."""
    if not design.tenants:
        return []
    flavor = {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": _meta(GPU_FLAVOR), "spec": {}}
    idle = idle_gpus(site, design)
    # The idle pool lends what nobody is guaranteed and borrows nothing itself; no LocalQueue names it.
    pool = [cluster_queue(IDLE_QUEUE, idle, 0, None)] if idle else []
    return [flavor, *pool, *(manifest for tenant in design.tenants for manifest in tenant_queues(tenant))]


def kueue_configuration() -> str:
    """Kueue's controller configuration (the chart's managerConfig.controllerManagerConfigYaml)."""
    excluded = "".join(f"\n    - \"{prefix}\"" for prefix in KUEUE_EXCLUDED_PREFIXES)
    return f"""\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
metrics:
  bindAddress: :8443
webhook:
  port: 9443
leaderElection:
  leaderElect: true
  resourceName: c1f6bfd2.kueue.x-k8s.io
internalCertManagement:
  enable: true
resources:
  excludeResourcePrefixes:{excluded}
integrations:
  frameworks:
    - "batch/job"
    - "kubeflow.org/pytorchjob"
"""
