"""GPU quotas and fair share: the tenants' Kueue queues (the Run:AI seed's GPU pools).

    ResourceFlavor gpu                 the site's GPUs (one flavor: every GPU block)
    ClusterQueue <tenant>              nominalQuota: the tenant's guaranteed GPUs; borrowingLimit: its `borrow`,
                                       at most (and by default) every GPU it is not guaranteed
    ClusterQueue <cohort>-idle         the GPUs no tenant is guaranteed: anyone may borrow them, nobody owns them
    LocalQueue <tenant>/gpu            where the tenant's jobs go (label kueue.x-k8s.io/queue-name: gpu)

Every ClusterQueue is in one cohort, so a tenant borrows what the others leave idle.
When the owner comes back, Kueue reclaims its quota by preempting the borrowers'
workloads (`reclaimWithinCohort: Any`); inside one queue a higher priority preempts a
lower one.

The borrowing ceiling. A tenant without `borrow` may borrow every GPU it is not guaranteed:
the idle pool's and the other tenants' guarantees. That ceiling keeps every guarantee because
each borrowed GPU comes back on demand: the idle pool's belong to nobody, and another tenant's
are reclaimed by preemption (RECLAIM_WITHIN_COHORT) the moment that tenant queues work within
its guarantee. It holds only while Kueue sees every GPU pod: a pod that bypassed the queue
would hold its GPUs without Kueue counting them, and nothing would take them back. So the
tenant namespaces admit GPU pods only from queued Jobs (rackform.k8s.tenant_admission). Kueue counts GPUs only: every other resource is excluded in its
configuration (`KUEUE_EXCLUDED_PREFIXES`), so a job's CPU and memory requests never make
it inadmissible (a queue must cover every resource a workload requests otherwise).

The ResourceQuota of a tenant's namespace (rackform.k8s.manifests) is the same ceiling
(guarantee plus borrowing limit) enforced by the API server, a second lock behind the queue.

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
RECLAIM_WITHIN_COHORT = "Any"
"""A queue with pending work within its guarantee preempts any workload of the cohort borrowing
from it, whatever its priority: what makes lending a guarantee safe (borrowing_limit)."""
KUEUE_EXCLUDED_PREFIXES = ("cpu", "memory", "ephemeral-storage", "hugepages-", "rdma/", "pods")
"""Resources Kueue does not count (Configuration resources.excludeResourcePrefixes)."""
MANAGED = {"app.kubernetes.io/managed-by": "rackform"}

Manifest = dict[str, Any]


def site_gpus(site: Site) -> int:
    """Every GPU of the site's servers (the blocks' gpus.count per node)."""
    return sum(host.block.node.gpus.count for host in site.hosts.values()
               if host.block.node is not None and host.block.node.gpus is not None)


def borrowing_limit(tenant: Tenant, total_gpus: int) -> int:
    """The most GPUs the tenant may borrow: its `borrow`, at most (and by default) every GPU it is
    not guaranteed. Lending the others' guarantees is safe only because the cohort reclaims them
    by preemption (RECLAIM_WITHIN_COHORT); without that the ceiling would have to stop at the idle pool."""
    lendable = max(0, total_gpus - tenant.gpus)
    return lendable if tenant.borrow is None else min(tenant.borrow, lendable)


def gpu_ceiling(tenant: Tenant, total_gpus: int) -> int:
    """The most GPUs the tenant may ever hold: its guarantee plus what it may borrow, within the site."""
    return tenant.gpus + borrowing_limit(tenant, total_gpus)


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
        "preemption": {"reclaimWithinCohort": RECLAIM_WITHIN_COHORT, "withinClusterQueue": "LowerPriority",
                       "borrowWithinCohort": {"policy": "Never"}},
    }
    if namespace is not None:
        # Only the tenant's own namespace may queue here (a LocalQueue elsewhere pointing at it is inactive).
        spec["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": _meta(name), "spec": spec}


def tenant_queues(tenant: Tenant, total_gpus: int) -> list[Manifest]:
    return [
        cluster_queue(tenant.name, tenant.gpus, borrowing_limit(tenant, total_gpus), tenant.name),
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
    total = site_gpus(site)
    return [flavor, *pool, *(manifest for tenant in design.tenants for manifest in tenant_queues(tenant, total))]


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
