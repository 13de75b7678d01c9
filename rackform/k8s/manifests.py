"""The platform's Kubernetes objects as plain dicts, and its Helm releases as data.

One source for every consumer: `rackform render` writes them under
build/<site>/platform/ (rackform/render/platform_files.py), `rackform deploy --stage
platform` applies those files (rackform/run/platform_apply.py), the Pulumi component
(stacks/components/platform.py) creates the same objects and releases, and the tests
validate the dicts with kubernetes-validate --strict for the site's Kubernetes version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rackform.k8s.platform import PlatformDesign, Tenant
from rackform.k8s.rdma import fabric_interfaces, rdma_attachments
from rackform.k8s.versions import Matrix
from rackform.model.site import Host, Site

Manifest = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"
DASHBOARD_LABEL = "grafana_dashboard"
NFS_PROVISIONER = "nfs.csi.k8s.io"
"""csi-driver-nfs (kubernetes-csi); installed with the storage stack, not by this module."""
NVMEOF_PROVISIONER = "nvmeof.csi.k8s.io"
"""Placeholder name for an NVMe-oF CSI driver (estimate: the seed names no driver)."""
PLATFORM_COMPONENTS = ("kube_prometheus_stack", "network_operator", "gpu_operator", "training_operator")
"""Helm releases the platform installs, in install order; Calico belongs to the bootstrap."""
RELEASE_NEEDS: dict[str, tuple[str, ...]] = {
    # dcgmExporter.serviceMonitor in the GPU Operator's values is a ServiceMonitor, a CRD that
    # kube-prometheus-stack installs; the driver with rdma.enabled loads nvidia-peermem against
    # the OFED driver the Network Operator deploys (doc: GPU Operator GPUDirect RDMA guide, as recalled).
    "gpu_operator": ("kube_prometheus_stack", "network_operator"),
}
"""Component -> the components whose releases must be installed first."""
PRIVILEGED_COMPONENTS = ("gpu_operator", "network_operator", "kube_prometheus_stack")
"""Namespaces whose pods need host access (drivers, OFED, node-exporter): Pod Security `privileged`
(doc: the GPU Operator install guide labels its namespace so where admission is enforced)."""
REPOSITORY_NOT_SET = "https://helm-repository-not-set.invalid"
"""Repository base of a chart whose alias the site's platform file maps to no mirror: a host
that never resolves (.invalid, RFC 6761), so an install fails visibly and `rackform deploy`
refuses before starting instead of reaching some ambient repository."""
RELEASE_TIMEOUT_S = 900


@dataclass(frozen=True, slots=True)
class HelmRelease:
    component: str
    chart: str
    """`<repository alias>/<chart>`, as the matrix names it."""
    version: str
    namespace: str
    repository: str
    """The chart repository URL (`helm --repo`, Pulumi repository_opts.repo)."""
    values: dict[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    """Release names installed (and ready) before this one."""
    timeout_s: int = RELEASE_TIMEOUT_S

    @property
    def name(self) -> str:
        """The stable Helm release name: `gpu-operator`, not a generated one."""
        return release_name(self.component)

    @property
    def chart_name(self) -> str:
        return self.chart.split("/", 1)[-1]

    @property
    def repository_alias(self) -> str:
        return self.chart.split("/", 1)[0]

    @property
    def repository_set(self) -> bool:
        """False while the site names no mirror for this chart's repository alias."""
        return not self.repository.startswith(REPOSITORY_NOT_SET)


def release_name(component: str) -> str:
    return component.replace("_", "-")


def _meta(name: str, namespace: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "rackform", **(labels or {})}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def namespace(name: str, labels: dict[str, str] | None = None) -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(name, labels=labels)}


# ------------------------------------------------------------------ tenants


def tenant_manifests(tenant: Tenant, attachments: list[Manifest] | None = None) -> list[Manifest]:
    """A tenant's namespace, GPU quota, admin Role + RoleBinding, network policies and its
    copies of the RDMA attachments (`attachments`, built for its namespace)."""
    ns = tenant.name
    role = f"{ns}-admin"
    return [
        namespace(ns, {"rackform.io/tenant": ns}),
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta("gpu-quota", ns),
         "spec": {"hard": {f"requests.{GPU_RESOURCE}": str(tenant.gpus)}}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(role, ns),
         "rules": [{"apiGroups": ["", "apps", "batch", "kubeflow.org"], "resources": ["*"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(role, ns),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user} for user in tenant.admins]},
        *tenant_network_policies(ns),
        *(attachments or []),
    ]


CLUSTER_DNS_PORT = 53


def tenant_network_policies(ns: str) -> list[Manifest]:
    """Deny by default, then let the tenant's pods reach each other (a multi-node job's
    rendezvous and NCCL bootstrap run over the pod network) and the cluster DNS. Nothing
    from or to other namespaces; the RDMA rails are secondary networks, outside these."""
    same_namespace = [{"podSelector": {}}]
    cluster_dns = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta("default-deny", ns),
         "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta("allow-same-namespace", ns),
         "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                  "ingress": [{"from": same_namespace}], "egress": [{"to": same_namespace}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta("allow-cluster-dns", ns),
         "spec": {"podSelector": {}, "policyTypes": ["Egress"],
                  "egress": [{"to": cluster_dns, "ports": [{"protocol": protocol, "port": CLUSTER_DNS_PORT}
                                                           for protocol in ("UDP", "TCP")]}]}},
    ]


def tenant_attachments(site: Site, design: PlatformDesign, tenant: Tenant) -> list[Manifest]:
    """The RDMA rails in the tenant's namespace; only with the RDMA shared device plugin, whose
    resource the attachments name (SR-IOV networks are the SR-IOV operator's own objects)."""
    return rdma_attachments(site, tenant.name) if design.network == "rdma_shared" else []


# ------------------------------------------------------------------ storage


def _all_flash(host: Host) -> bool:
    node = host.block.node
    return node is not None and all(drives.media != "hdd" for drives in node.drives)


def storage_classes(site: Site, design: PlatformDesign) -> list[Manifest]:
    """NFS for models from each capacity (HDD-bearing) storage host; NVMe-oF from each all-flash one.

    The first NFS class is the cluster default: models and datasets are where jobs read from.
    """
    classes: list[Manifest] = []
    for host in sorted(site.hosts_in_role("storage"), key=lambda h: h.name):
        server = str(host.management_address or host.name)
        if _all_flash(host):
            classes.append({
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": _meta(f"nvmeof-{host.name}"),
                "provisioner": NVMEOF_PROVISIONER, "parameters": {"targetAddress": server, "transport": "rdma"},
                "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": True,
            })
        else:
            classes.append({
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": _meta(f"models-nfs-{host.name}"),
                "provisioner": NFS_PROVISIONER, "parameters": {"server": server, "share": design.nfs_export},
                "reclaimPolicy": "Retain", "volumeBindingMode": "Immediate", "mountOptions": ["nfsvers=4.1", "hard"],
            })
    nfs = [c for c in classes if c["provisioner"] == NFS_PROVISIONER]
    if nfs:
        nfs[0]["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    return classes


# ------------------------------------------------------------------ monitoring


DASHBOARD_PANELS = (
    ("GPU memory used (MiB)", "DCGM_FI_DEV_FB_USED"),
    ("GPU temperature (C)", "DCGM_FI_DEV_GPU_TEMP"),
    ("GPU utilisation (%)", "DCGM_FI_DEV_GPU_UTIL"),
)
"""Grafana panels from the DCGM exporter's metrics (dcgm-exporter default counters)."""


def gpu_dashboard(namespace_name: str) -> Manifest:
    """A ConfigMap Grafana's dashboard sidecar (kube-prometheus-stack) picks up by label."""
    panels = [
        {"id": index + 1, "type": "timeseries", "title": title, "datasource": "Prometheus",
         "gridPos": {"x": 0, "y": index * 8, "w": 24, "h": 8},
         "targets": [{"expr": f"{metric}", "legendFormat": "{{Hostname}} GPU {{gpu}}"}]}
        for index, (title, metric) in enumerate(DASHBOARD_PANELS)
    ]
    dashboard = {"title": "GPUs (DCGM)", "uid": "rackform-gpus", "schemaVersion": 39, "panels": panels}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta("gpu-dashboard", namespace_name, {DASHBOARD_LABEL: "1"}),
            # One key a line (indent=0): the rendered YAML shows it as a block, not one 1,000-character line.
            "data": {"gpus.json": json.dumps(dashboard, indent=0, sort_keys=True)}}


# ------------------------------------------------------------------ Helm releases


def helm_values(component: str, site: Site, design: PlatformDesign) -> dict[str, Any]:
    if component == "gpu_operator":
        return {"driver": {"enabled": True, "rdma": {"enabled": True}}, "toolkit": {"enabled": True},
                "devicePlugin": {"enabled": True},
                "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True}}}
    if component == "network_operator":
        rdma_shared = design.network == "rdma_shared"
        values: dict[str, Any] = {"deployCR": True, "sriovNetworkOperator": {"enabled": not rdma_shared},
                                  "rdmaSharedDevicePlugin": {"deploy": rdma_shared}}
        if rdma_shared:
            values["rdmaSharedDevicePlugin"]["resources"] = [
                {"name": "rdma_shared_device_a", "ifNames": fabric_interfaces(site)}]
        return values
    if component == "kube_prometheus_stack":
        return {"grafana": {"sidecar": {"dashboards": {"enabled": True, "label": DASHBOARD_LABEL}}},
                "prometheus": {"prometheusSpec": {"serviceMonitorSelectorNilUsesHelmValues": False}}}
    return {}


def repository_url(alias: str, design: PlatformDesign) -> str:
    """The site's mirror for a repository alias, else an unresolvable placeholder."""
    return design.helm_repositories.get(alias, f"{REPOSITORY_NOT_SET}/{alias}")


def helm_releases(site: Site, design: PlatformDesign, matrix: Matrix) -> list[HelmRelease]:
    """The platform's Helm releases in install order: what both the rendered values files and
    the Pulumi releases are built from, so the two cannot drift."""
    chosen = matrix.chosen(design.versions)
    releases = []
    for name in PLATFORM_COMPONENTS:
        component = matrix.components[name]
        releases.append(HelmRelease(
            name, component.chart, chosen[name], component.namespace,
            repository_url(component.chart.split("/", 1)[0], design), helm_values(name, site, design),
            tuple(release_name(need) for need in RELEASE_NEEDS.get(name, ())),
        ))
    return releases


# ------------------------------------------------------------------ everything


def component_namespace(name: str, matrix: Matrix) -> Manifest:
    labels = {"pod-security.kubernetes.io/enforce": "privileged"} if name in PRIVILEGED_COMPONENTS else None
    return namespace(matrix.components[name].namespace, labels)


def platform_manifests(site: Site, design: PlatformDesign, matrix: Matrix) -> list[Manifest]:
    """Every plain object the platform creates, namespaces first (others live in them)."""
    component_namespaces = [component_namespace(name, matrix) for name in PLATFORM_COMPONENTS]
    tenants = [manifest for tenant in design.tenants
               for manifest in tenant_manifests(tenant, tenant_attachments(site, design, tenant))]
    monitoring = matrix.components["kube_prometheus_stack"].namespace
    return [*component_namespaces, *storage_classes(site, design), gpu_dashboard(monitoring), *tenants]
