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

from rackform.k8s import site_mirror
from rackform.k8s.alerts import DCGM_COUNTERS_NEEDED, NODE_EXPORTER_TEXTFILE_DIR, alert_rules
from rackform.k8s.cni import multus_left_out
from rackform.k8s.data_sets import claim_protection, tenant_data_set_manifests
from rackform.k8s.gpu_sharing import GPU_RESOURCE, gpu_operator_values, merge_values, sharing_manifests
from rackform.k8s.platform import PlatformDesign, Tenant
from rackform.k8s.queues import gpu_ceiling, kueue_configuration, queue_manifests, site_gpus
from rackform.k8s.rdma import fabric_interfaces, rdma_attachments
from rackform.k8s.tenant_admission import PRIORITY_CLASSES_ANNOTATION, tenant_admission
from rackform.k8s.tenant_compute import compute_manifests
from rackform.model.versions import Matrix
from rackform.model.site import Site

Manifest = dict[str, Any]
DASHBOARD_LABEL = "grafana_dashboard"
PLATFORM_COMPONENTS = ("kube_prometheus_stack", "network_operator", "gpu_operator", "training_operator", "kueue")
"""Helm releases the platform installs, in install order; Calico belongs to the bootstrap. A site's
platform file may install fewer (`releases:`)."""
SITE_MIRROR_CHARTS = "site-mirror"
"""The chart repository alias of the charts the site mirror's bundle carries (built here, from
their modules): it resolves to the mirror's /charts/ unless the platform file maps it."""
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


FIELD_MANAGER = "rackform"
"""Who applies the platform's objects (kubectl --server-side --field-manager, rackform.run.platform_apply)."""
PULUMI_FIELD_MANAGER = "pulumi.com/patchFieldManager"
"""The annotation pulumi-kubernetes takes its field manager from. Under Pulumi the namespaces are
also stack resources (protected): with the same manager as kubectl's, the two applies own the
same fields and neither undoes the other (without it in the rendered files, each kubectl apply
would drop the annotation and every preview would show the namespaces updated)."""


def namespace(name: str, labels: dict[str, str] | None = None) -> Manifest:
    metadata = _meta(name, labels=labels)
    metadata["annotations"] = {PULUMI_FIELD_MANAGER: FIELD_MANAGER}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


# ------------------------------------------------------------------ tenants


POD_SECURITY_LABEL = "pod-security.kubernetes.io"
POD_SECURITY_REASON = "rackform.io/pod-security-reason"
"""Annotation on a tenant namespace whose level the design loosened: the design's reason, visible in the cluster."""
WRITE_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
READ_VERBS = ("get", "list", "watch")
TENANT_WORKLOADS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Claims too: a tenant's own, of a class the site names (`storage_classes:`). Its data sets'
    # claims are the platform's: a deleted one would leave its Retain volume Released, bound to
    # the old claim's uid, and the claim the next apply makes Pending. RBAC cannot tell them
    # apart by label, so an admission policy refuses that delete (rackform.k8s.data_sets
    # claim_protection).
    # Services: ClusterIP only, which an admission policy holds (rackform.k8s.tenant_admission).
    # No Endpoints or EndpointSlices: written by hand, they send a service's traffic to any
    # address (CVE-2021-25740); the control plane derives them from the services' selectors.
    ("", ("pods", "pods/log", "pods/exec", "pods/attach", "pods/portforward", "services",
          "configmaps", "secrets", "persistentvolumeclaims", "serviceaccounts")),
    ("apps", ("deployments", "statefulsets", "replicasets")),
    ("batch", ("jobs", "cronjobs")),
    ("kubeflow.org", ("*",)),
    ("policy", ("poddisruptionbudgets",)),
)
"""What a tenant admin runs and changes in its namespace. No daemonsets: nodes are shared."""
TENANT_READ_ONLY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("", ("events", "resourcequotas", "limitranges", "endpoints")),
    ("discovery.k8s.io", ("endpointslices",)),
    ("networking.k8s.io", ("networkpolicies",)),
    ("rbac.authorization.k8s.io", ("roles", "rolebindings")),
    ("kueue.x-k8s.io", ("localqueues", "workloads")),
    ("k8s.cni.cncf.io", ("network-attachment-definitions",)),
)
"""What a tenant admin may see but not change: its quotas, limits, policies, its own bindings, its queue,
its services' endpoints."""


def tenant_role_rules() -> list[dict[str, Any]]:
    """Run workloads; read (never write) quotas, limit ranges, network policies, RBAC and queues."""
    def rules(groups, verbs):
        return [{"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
                for group, resources in groups]
    return rules(TENANT_WORKLOADS, WRITE_VERBS) + rules(TENANT_READ_ONLY, READ_VERBS)


def tenant_namespace(tenant: Tenant) -> Manifest:
    """The namespace with its Pod Security level enforced (and audited and warned) at `latest`."""
    labels = {"rackform.io/tenant": tenant.name}
    for mode in ("enforce", "audit", "warn"):
        labels[f"{POD_SECURITY_LABEL}/{mode}"] = tenant.pod_security
        labels[f"{POD_SECURITY_LABEL}/{mode}-version"] = "latest"
    manifest = namespace(tenant.name, labels)
    if tenant.pod_security_reason:
        manifest["metadata"]["annotations"][POD_SECURITY_REASON] = tenant.pod_security_reason
    # Always present, empty for none: the priority-class policy reads it (rackform.k8s.tenant_admission).
    manifest["metadata"]["annotations"][PRIORITY_CLASSES_ANNOTATION] = ",".join(tenant.priority_classes)
    return manifest


def tenant_manifests(tenant: Tenant, attachments: list[Manifest] | None = None, total_gpus: int | None = None,
                     compute: list[Manifest] | None = None) -> list[Manifest]:
    """A tenant's namespace, GPU quota, its `compute` quota and container defaults
    (rackform.k8s.tenant_compute), admin Role + RoleBinding, network policies and its copies
    of the RDMA attachments (`attachments`, built for its namespace).

    The GPU quota is the tenant's ceiling: its guarantee plus what it may borrow (its Kueue
    queue admits up to that; rackform.k8s.queues), within the site's `total_gpus`.
    """
    ns = tenant.name
    role = f"{ns}-admin"
    ceiling = tenant.gpus if total_gpus is None else gpu_ceiling(tenant, total_gpus)
    return [
        tenant_namespace(tenant),
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta("gpu-quota", ns),
         "spec": {"hard": {f"requests.{GPU_RESOURCE}": str(ceiling)}}},
        *(compute or []),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(role, ns),
         "rules": tenant_role_rules()},
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


def tenant_attachments(site: Site, design: PlatformDesign, tenant: Tenant, matrix: Matrix | None = None) -> list[Manifest]:
    """The RDMA rails in the tenant's namespace; only with the RDMA shared device plugin, whose
    resource the attachments name (SR-IOV networks are the SR-IOV operator's own objects), and
    only where the kubernetes stage installs Multus, whose CRD they are."""
    if matrix is not None and site.kubernetes is not None and multus_left_out(site, matrix):
        return []
    return rdma_attachments(site, tenant.name) if design.network == "rdma_shared" else []


# ------------------------------------------------------------------ storage


DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def storage_classes(design: PlatformDesign) -> list[Manifest]:
    """The StorageClasses the design names (`storage_classes:`), for provisioners the site
    installs itself; none otherwise. rackform names no provisioner of its own: a class for a
    driver nobody installed would leave every claim of it Pending. The data sets' volumes need
    no class (rackform.k8s.data_sets); rackform.checks.platform warns about all-flash storage
    hosts with no class to carve volumes from them."""
    classes = []
    for chosen in design.storage_classes:
        metadata = _meta(chosen.name)
        if chosen.default:
            metadata["annotations"] = {DEFAULT_CLASS_ANNOTATION: "true"}
        storage_class: Manifest = {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": metadata,
            "provisioner": chosen.provisioner, "reclaimPolicy": chosen.reclaim_policy,
            "volumeBindingMode": chosen.volume_binding_mode,
        }
        if chosen.parameters:
            storage_class["parameters"] = dict(chosen.parameters)
        classes.append(storage_class)
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


DCGM_METRICS_CONFIG = "dcgm-metrics"
DCGM_METRICS_FILE = "dcgm-metrics.csv"
DCGM_COLLECTORS_PATH = f"/etc/dcgm-exporter/{DCGM_METRICS_FILE}"
"""Where the GPU Operator mounts `dcgmExporter.config.name`'s ConfigMap in the exporter, and the
variable that points dcgm-exporter at it (doc: GPU Operator, custom DCGM metrics, as recalled)."""
DCGM_EXTRA_COUNTERS = (
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
)
"""What the dashboard plots and a site watches besides the alerts' counters (dcgm-exporter's names)."""


def dcgm_metrics(namespace_name: str) -> Manifest:
    """The counters dcgm-exporter exports: the ones the dashboard plots and every one the alert
    rules read, among them the ECC and NVLink error counters its own default list leaves out
    (rackform.k8s.alerts.DCGM_COUNTERS_NEEDED). The list replaces the exporter's default."""
    needed = [(name, "counter" if name.endswith("_TOTAL") else "gauge", f"{name.removeprefix('DCGM_FI_DEV_')}.")
              for name, _default in DCGM_COUNTERS_NEEDED]
    lines = [f"{name}, {kind}, {help_text}" for name, kind, help_text in (*DCGM_EXTRA_COUNTERS, *needed)]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(DCGM_METRICS_CONFIG, namespace_name),
            "data": {DCGM_METRICS_FILE: "\n".join(lines) + "\n"}}


# ------------------------------------------------------------------ Helm releases


def helm_values(component: str, site: Site, design: PlatformDesign, version: str = "") -> dict[str, Any]:
    if component == "gpu_operator":
        base = {"driver": {"enabled": True, "rdma": {"enabled": True}}, "toolkit": {"enabled": True},
                "devicePlugin": {"enabled": True},
                "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True},
                                 "config": {"name": DCGM_METRICS_CONFIG},
                                 "env": [{"name": "DCGM_EXPORTER_COLLECTORS", "value": DCGM_COLLECTORS_PATH}]}}
        return merge_values(base, gpu_operator_values(design.gpu_sharing))
    if component == "network_operator":
        rdma_shared = design.network == "rdma_shared"
        values: dict[str, Any] = {"deployCR": True, "sriovNetworkOperator": {"enabled": not rdma_shared},
                                  "rdmaSharedDevicePlugin": {"deploy": rdma_shared}}
        if rdma_shared:
            values["rdmaSharedDevicePlugin"]["resources"] = [
                {"name": "rdma_shared_device_a", "ifNames": fabric_interfaces(site)}]
        return values
    if component == "kueue":
        return kueue_values(site, version)
    if component == "kube_prometheus_stack":
        return {"grafana": {"sidecar": {"dashboards": {"enabled": True, "label": DASHBOARD_LABEL}}},
                "prometheus": {"prometheusSpec": {"serviceMonitorSelectorNilUsesHelmValues": False}},
                "prometheus-node-exporter": {"extraArgs": NODE_EXPORTER_ARGS,
                                             "extraHostVolumeMounts": [NODE_EXPORTER_TEXTFILE_MOUNT]}}
    return {}


NODE_EXPORTER_TEXTFILE_MOUNT = {"name": "rackform-textfile", "hostPath": NODE_EXPORTER_TEXTFILE_DIR,
                                "mountPath": "/textfile", "readOnly": True, "type": "DirectoryOrCreate"}
"""The folder where each control-plane node's timer writes the expiry of kubeadm's certificates
(role kubeadm, rackform.k8s.alerts), mounted into node-exporter (chart values
prometheus-node-exporter.extraHostVolumeMounts); created empty where no timer writes (workers)."""
NODE_EXPORTER_ARGS = [
    # A list in our values replaces the chart's: kube-prometheus-stack (values.yaml at 70.0.0) gives
    # two filesystem arguments. Its mount-point one is kept (the same mount points, its regex
    # written shorter: /dev, /proc, /sys, docker's and the kubelet's volumes); its fs-types one
    # is the same list as node_exporter's own Linux default (collector/filesystem_linux.go), so it
    # is left to that default. The rendered list must stay within the 160 characters a line that
    # ansible-lint allows (rackform.render.yamltext writes a flat list on one line).
    "--collector.filesystem.mount-points-exclude=^/(dev|proc|sys|var/lib/(docker|kubelet)/.+)($|/)",
    f"--collector.textfile.directory={NODE_EXPORTER_TEXTFILE_MOUNT['mountPath']}",
]
"""node-exporter's extra arguments (chart values prometheus-node-exporter.extraArgs)."""


KUEUE_IMAGE = "kueue"
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
"""Where Kueue's controller (and its admission webhook) runs: on the control plane, never on a
GPU node, whose capacity is for jobs and whose maintenance or failure must not stop the queues
(or every job submission, which goes through the webhook)."""


def kueue_values(site: Site, chart_version: str) -> dict[str, Any]:
    """The Kueue chart's values: its controller from the site mirror, on the control plane, its
    configuration ours.

    The chart as the module carries it names a moving staging tag (`release-0.17`, pulled
    Always): the image is pinned to the release's own tag, `v<chart version>`, as the site
    mirror's bundle pushes it, with the bundle's digest (`<tag>@<digest>`: the chart joins
    repository and tag with a colon), and pulled only when the node lacks it."""
    manager: dict[str, Any] = {"nodeSelector": {CONTROL_PLANE_ROLE: ""},
                               "tolerations": [{"key": CONTROL_PLANE_ROLE, "operator": "Exists", "effect": "NoSchedule"}]}
    registry = site_mirror.registry(site)
    if registry is not None:
        manager["manager"] = {"image": {
            "repository": f"{registry}/{KUEUE_IMAGE}", "tag": site_mirror.pinned_tag(site, KUEUE_IMAGE, f"v{chart_version}"),
            "pullPolicy": "IfNotPresent"}}
    return {"managerConfig": {"controllerManagerConfigYaml": kueue_configuration()}, "controllerManager": manager}


def repository_url(alias: str, design: PlatformDesign, site: Site | None = None) -> str:
    """The site's mirror for a repository alias, else an unresolvable placeholder. The
    site mirror's own charts need no entry: the alias `site-mirror` is its /charts/."""
    if alias in design.helm_repositories:
        return design.helm_repositories[alias]
    if alias == SITE_MIRROR_CHARTS and site is not None:
        url = site_mirror.charts_url(site)
        if url is not None:
            return url
    return f"{REPOSITORY_NOT_SET}/{alias}"


def installed_components(design: PlatformDesign) -> tuple[str, ...]:
    """The platform components whose releases the site installs, in install order."""
    wanted = PLATFORM_COMPONENTS if design.releases is None else design.releases
    return tuple(name for name in PLATFORM_COMPONENTS if name in wanted)


def helm_releases(site: Site, design: PlatformDesign, matrix: Matrix) -> list[HelmRelease]:
    """The platform's Helm releases in install order: what both the rendered values files and
    the Pulumi releases are built from, so the two cannot drift."""
    chosen = matrix.chosen(design.versions)
    releases = []
    installed = installed_components(design)
    for name in installed:
        component = matrix.components[name]
        releases.append(HelmRelease(
            name, component.chart, chosen[name], component.namespace,
            repository_url(component.chart.split("/", 1)[0], design, site), helm_values(name, site, design, chosen[name]),
            tuple(release_name(need) for need in RELEASE_NEEDS.get(name, ()) if need in installed),
        ))
    return releases


# ------------------------------------------------------------------ everything


def component_namespace(name: str, matrix: Matrix) -> Manifest:
    labels = {"pod-security.kubernetes.io/enforce": "privileged"} if name in PRIVILEGED_COMPONENTS else None
    return namespace(matrix.components[name].namespace, labels)


def platform_manifests(site: Site, design: PlatformDesign, matrix: Matrix) -> list[Manifest]:
    """Every plain object the platform creates before its releases, namespaces first (others live in them)."""
    installed = installed_components(design)
    component_namespaces = [component_namespace(name, matrix) for name in installed]
    total_gpus = site_gpus(site)
    names = {tenant.name for tenant in design.tenants}
    # Each tenant's data sets after its namespace: a volume, then the claim in the namespace.
    tenants = [manifest for tenant in design.tenants
               for manifest in (*tenant_manifests(tenant, tenant_attachments(site, design, tenant, matrix), total_gpus,
                                                  compute_manifests(site, design, tenant)),
                                *tenant_data_set_manifests(site, tenant.name, names))]
    monitoring = [gpu_dashboard(matrix.components["kube_prometheus_stack"].namespace)] \
        if "kube_prometheus_stack" in installed else []
    gpu_namespace = matrix.components["gpu_operator"].namespace
    sharing = [*sharing_manifests(design.gpu_sharing, gpu_namespace), dcgm_metrics(gpu_namespace)] \
        if "gpu_operator" in installed else []
    # Cluster-scoped, so in a file of their own before the tenants' files. Within the one apply,
    # kustomize's kind order still puts the claims and pods' namespaces first: the first apply
    # leaves them unguarded for the seconds until the API server has loaded the policies (and a
    # queued job, until Kueue's webhook, installed after, suspends it).
    protection = claim_protection(site, names)
    admission = tenant_admission("kueue" in installed, matrix.components["training_operator"].namespace,
                                 matrix.components["kueue"].namespace) if design.tenants else []
    return [*component_namespaces, *storage_classes(design), *protection, *admission, *monitoring, *sharing, *tenants]


def after_release_manifests(site: Site, design: PlatformDesign, matrix: Matrix) -> list[Manifest]:
    """Objects of the releases' own kinds, applied once the releases installed their CRDs and
    webhooks: the GPU and node alert rules (kube-prometheus-stack's PrometheusRule) and the
    tenants' Kueue queues."""
    installed = installed_components(design)
    alerts = [alert_rules(matrix.components["kube_prometheus_stack"].namespace)] \
        if "kube_prometheus_stack" in installed else []
    return [*alerts, *(queue_manifests(site, design) if "kueue" in installed else [])]
