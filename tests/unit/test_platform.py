"""The platform design file and the plain manifests rendered from it, validated offline
with kubernetes-validate --strict for each site's Kubernetes version; the one custom
kind the platform creates itself (the tenants' NetworkAttachmentDefinitions) against
the CRD schema the repo carries (tests/unit/platform_validation.py). The operators'
own custom resources come from their Helm charts and are not checked here."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest
from platform_validation import problems

from rackform.k8s.manifests import (
    DASHBOARD_PANELS,
    gpu_dashboard,
    helm_releases,
    platform_manifests,
    storage_classes,
)
from rackform.k8s.platform import PlatformDesign, load_platform
from rackform.k8s.versions import load_matrix
from rackform.model.loader import load_site
from rackform.model.source import SourceError

REPO = Path(__file__).resolve().parents[2]
SITES = ("lab", "reference", "campus")


def manifests_of(site_name: str) -> tuple[str, list[dict]]:
    site = load_site(site_name, REPO)
    return site.kubernetes.version, platform_manifests(site, load_platform(site), load_matrix(REPO))


LAB_RELEASES = "  releases: [kueue]\n"
LAB_MIRROR = "mirror:\n  host: mgmt-1\n"


@pytest.fixture()
def full_lab(lab_files):
    """The lab as a real site would have it: every platform release, and no site mirror (so the
    kubernetes stage installs Multus, whose attachments the tenants get)."""
    lab_files.edit("topologies/platform/lab.yaml", LAB_RELEASES, "")
    lab_files.edit("topologies/sites/lab.yaml", LAB_MIRROR, "")
    site = lab_files.load()
    return site, platform_manifests(site, load_platform(site), load_matrix(REPO))


@pytest.mark.parametrize("site_name", SITES)
def test_every_manifest_validates_strictly(site_name):
    version, manifests = manifests_of(site_name)
    assert [problem for manifest in manifests for problem in problems(manifest, version)] == []


def test_every_manifest_of_a_full_site_validates_strictly(full_lab):
    site, manifests = full_lab
    assert [problem for manifest in manifests for problem in problems(manifest, site.kubernetes.version)] == []


@pytest.mark.parametrize(("change", "expected"), [
    (lambda nad: {**nad, "spec": {**nad["spec"], "master": "fab0"}}, "Additional properties"),
    (lambda nad: {**nad, "spec": {}}, "'config' is a required property"),
    (lambda nad: {**nad, "metadata": {**nad["metadata"], "label": {}}}, "metadata"),
])
def test_attachment_schema_check_refuses_what_the_crd_refuses(full_lab, change, expected):
    """The CRD check is worth something: an unknown or missing field, bad metadata."""
    site, manifests = full_lab
    version = site.kubernetes.version
    attachment = next(m for m in manifests if m["kind"] == "NetworkAttachmentDefinition")
    assert problems(attachment, version) == []
    assert expected in " ".join(problems(change(attachment), version))


def test_tenants_get_rdma_attachments_only_with_the_shared_device_plugin(full_lab):
    site, _ = full_lab
    design = load_platform(site)
    for network, expected in (("rdma_shared", 8), ("sriov", 0)):
        manifests = platform_manifests(site, replace(design, network=network), load_matrix(REPO))
        attachments = [m for m in manifests if m["kind"] == "NetworkAttachmentDefinition"
                       and m["metadata"]["namespace"] == "research"]
        assert (network, len(attachments)) == (network, expected)


def test_no_attachments_where_the_site_mirror_carries_no_multus():
    """The lab's mirror carries no Multus: its CRD never exists there, so no tenant gets attachments."""
    _version, manifests = manifests_of("lab")
    assert [m for m in manifests if m["kind"] == "NetworkAttachmentDefinition"] == []


def test_operator_namespaces_admit_privileged_pods_and_tenants_are_restricted(full_lab):
    _site, manifests = full_lab
    enforced = {m["metadata"]["name"]: m["metadata"]["labels"].get("pod-security.kubernetes.io/enforce")
                for m in manifests if m["kind"] == "Namespace"}
    assert (enforced["gpu-operator"], enforced["nvidia-network-operator"], enforced["research"]) == (
        "privileged", "privileged", "restricted")


def test_a_tenant_namespace_enforces_audits_and_warns_at_its_level():
    _version, manifests = manifests_of("lab")
    labels = next(m["metadata"]["labels"] for m in manifests if m["kind"] == "Namespace"
                  and m["metadata"]["name"] == "inference")
    assert {key: value for key, value in labels.items() if key.startswith("pod-security")} == {
        f"pod-security.kubernetes.io/{mode}{suffix}": value
        for mode in ("enforce", "audit", "warn") for suffix, value in (("", "restricted"), ("-version", "latest"))}


def test_a_pod_security_exception_carries_its_reason_into_the_cluster(lab_files):
    lab_files.edit("topologies/platform/lab.yaml", "borrow: 0, admins: [carol]}",
                   "borrow: 0, admins: [carol], pod_security: {level: baseline, reason: Triton needs host ports}}")
    site = lab_files.load()
    manifests = platform_manifests(site, load_platform(site), load_matrix(REPO))
    namespace = next(m for m in manifests if m["kind"] == "Namespace" and m["metadata"]["name"] == "inference")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert namespace["metadata"]["annotations"]["rackform.io/pod-security-reason"] == "Triton needs host ports"


def tenant_rules() -> dict[tuple[str, str], set[str]]:
    _version, manifests = manifests_of("lab")
    role = next(m for m in manifests if m["kind"] == "Role" and m["metadata"]["namespace"] == "inference")
    return {(group, resource): set(rule["verbs"]) for rule in role["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"]}


@pytest.mark.parametrize(("group", "resource"), [
    ("", "resourcequotas"), ("", "limitranges"), ("networking.k8s.io", "networkpolicies"),
    ("rbac.authorization.k8s.io", "roles"), ("rbac.authorization.k8s.io", "rolebindings"),
    ("kueue.x-k8s.io", "localqueues"),
])
def test_a_tenant_admin_only_reads_what_holds_the_tenant_in(group, resource):
    assert tenant_rules()[(group, resource)] == {"get", "list", "watch"}


def test_a_tenant_admin_runs_workloads_but_no_wildcards_and_no_daemonsets():
    rules = tenant_rules()
    assert {"create", "delete"} <= rules[("", "pods")] and {"create", "delete"} <= rules[("batch", "jobs")]
    # Its own claims (of a class the site names); the data sets' claims are kept by an admission
    # policy instead (tests/unit/test_k8s_data_sets.py).
    assert {"create", "update", "patch", "delete"} <= rules[("", "persistentvolumeclaims")]
    assert not any("*" in verbs or {"escalate", "bind", "impersonate"} & verbs for verbs in rules.values())
    assert ("apps", "daemonsets") not in rules and ("", "*") not in rules


def test_strict_validation_rejects_an_unknown_field():
    """The check above is worth something: strict mode refuses what the API would drop."""
    _version, manifests = manifests_of("lab")
    quota = next(m for m in manifests if m["kind"] == "ResourceQuota")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({**quota, "spec": {**quota["spec"], "gpus": 8}}, "1.36.3", strict=True)


def test_lab_tenants_come_from_the_platform_file():
    assert [t.name for t in load_platform(load_site("lab", REPO)).tenants] == ["research", "inference"]


def test_charts_come_from_the_site_mirror_else_from_a_host_that_never_resolves(lab_files):
    lab_files.edit("topologies/platform/lab.yaml", LAB_RELEASES, "")
    lab_files.edit("topologies/platform/lab.yaml", "versions: {}",
                   "versions: {}\n  helm_repositories: {nvidia: https://helm-mirror.example.com/nvidia/}")
    site = lab_files.load()
    releases = {r.name: r for r in helm_releases(site, load_platform(site), load_matrix(REPO))}
    assert (releases["gpu-operator"].repository, releases["gpu-operator"].repository_set) == (
        "https://helm-mirror.example.com/nvidia", True)
    assert (releases["training-operator"].repository, releases["training-operator"].repository_set) == (
        "https://helm-repository-not-set.invalid/kubeflow", False)
    assert (releases["kueue"].repository, releases["kueue"].repository_set) == (
        "http://10.10.0.11:8080/charts", True), "the site mirror's own charts need no entry"


def test_the_lab_installs_only_the_release_its_mirror_carries():
    site = load_site("lab", REPO)
    (kueue,) = helm_releases(site, load_platform(site), load_matrix(REPO))
    assert (kueue.name, kueue.chart, kueue.namespace, kueue.needs) == ("kueue", "site-mirror/kueue", "kueue-system", ())
    assert kueue.values["controllerManager"]["manager"]["image"] == {
        "repository": "10.10.0.11:5000/kueue", "tag": "v0.17.0", "pullPolicy": "IfNotPresent"}
    # on the control plane: a GPU node's maintenance or failure never stops the queues' webhook
    assert kueue.values["controllerManager"]["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert kueue.values["controllerManager"]["tolerations"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]


def test_releases_install_in_a_fixed_order_with_the_gpu_operator_after_its_crd_and_ofed_providers(full_lab):
    site, _ = full_lab
    releases = helm_releases(site, load_platform(site), load_matrix(REPO))
    order = [r.name for r in releases]
    assert order == ["kube-prometheus-stack", "network-operator", "gpu-operator", "training-operator", "kueue"]
    assert all(order.index(need) < order.index(r.name) for r in releases for need in r.needs)
    assert next(r.needs for r in releases if r.name == "gpu-operator") == ("kube-prometheus-stack", "network-operator")


def test_a_site_without_platform_file_gets_defaults_and_no_tenants():
    assert load_platform(load_site("reference", REPO)) == PlatformDesign()


def test_tenant_quota_is_the_guarantee_plus_what_it_may_borrow():
    """16 GPUs in the lab: research (8, borrows any) may hold all 16, inference (4, borrows none) 4."""
    _version, manifests = manifests_of("lab")
    quotas = {m["metadata"]["namespace"]: m["spec"]["hard"] for m in manifests
              if m["kind"] == "ResourceQuota" and m["metadata"]["name"] == "gpu-quota"}
    assert quotas == {"research": {"requests.nvidia.com/gpu": "16"}, "inference": {"requests.nvidia.com/gpu": "4"}}


def tenant_policies(namespace: str) -> dict[str, dict]:
    _version, manifests = manifests_of("lab")
    return {m["metadata"]["name"]: m["spec"] for m in manifests
            if m["kind"] == "NetworkPolicy" and m["metadata"]["namespace"] == namespace}


def test_tenant_network_policy_denies_all_by_default():
    assert tenant_policies("research")["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_tenant_pods_reach_each_other_and_nothing_else_in_the_cluster():
    """A multi-node job's rendezvous runs over the pod network: within the namespace only
    (a peer without a namespaceSelector means the policy's own namespace)."""
    allowed = tenant_policies("research")["allow-same-namespace"]
    assert allowed["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert allowed["egress"] == [{"to": [{"podSelector": {}}]}]


def test_tenant_pods_resolve_names_through_the_cluster_dns_only():
    dns = tenant_policies("inference")["allow-cluster-dns"]
    assert dns["policyTypes"] == ["Egress"] and "ingress" not in dns
    (rule,) = dns["egress"]
    assert rule["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                           "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
    assert sorted((port["protocol"], port["port"]) for port in rule["ports"]) == [("TCP", 53), ("UDP", 53)]


def test_tenant_admins_are_bound_to_the_tenant_role():
    _version, manifests = manifests_of("lab")
    binding = next(m for m in manifests if m["kind"] == "RoleBinding" and m["metadata"]["namespace"] == "research")
    assert [s["name"] for s in binding["subjects"]] == ["alice", "bob"]


@pytest.mark.parametrize("site_name", SITES)
def test_no_storage_class_names_a_provisioner_the_design_did_not(site_name):
    """The placeholder NVMe-oF and never-installed NFS classes are gone: a site's classes are its design's."""
    site = load_site(site_name, REPO)
    assert storage_classes(load_platform(site)) == []
    assert [m for m in manifests_of(site_name)[1] if m["kind"] == "StorageClass"] == []


def test_gpu_dashboard_plots_memory_temperature_and_utilisation():
    dashboard = json.loads(gpu_dashboard("monitoring")["data"]["gpus.json"])
    assert [p["targets"][0]["expr"] for p in dashboard["panels"]] == [metric for _title, metric in DASHBOARD_PANELS]


@pytest.mark.parametrize(("network", "shared", "sriov"), [("rdma_shared", True, False), ("sriov", False, True)])
def test_network_operator_mode_follows_the_site(network, shared, sriov):
    site = load_site("lab", REPO)
    values = next(r.values for r in helm_releases(site, PlatformDesign(network=network), load_matrix(REPO))
                  if r.component == "network_operator")
    assert (values["rdmaSharedDevicePlugin"]["deploy"], values["sriovNetworkOperator"]["enabled"]) == (shared, sriov)


def test_rdma_shared_plugin_exposes_the_gpu_fabric_ports():
    site = load_site("lab", REPO)
    values = next(r.values for r in helm_releases(site, PlatformDesign(), load_matrix(REPO))
                  if r.component == "network_operator")
    assert values["rdmaSharedDevicePlugin"]["resources"][0]["ifNames"] == [f"fab{n}" for n in range(8)]


@pytest.mark.parametrize(("old", "new", "key"), [
    ("network: rdma_shared", "network: infiniband", "platform.network"),
    ("name: research", "name: Research_Team", "platform.tenants[0].name"),
    ("gpus: 8", "gpus: -1", "platform.tenants[0].gpus"),
    ("gpus: 8,", "gpus: 8, borrow: -2,", "platform.tenants[0].borrow"),
    ("gpus: 8,", "gpus: 8, quota: 9,", "platform.tenants[0].quota"),
    ("gpus: 8,", "gpus: 8, pod_security: {level: privileged},", "platform.tenants[0].pod_security.reason"),
    ("gpus: 8,", "gpus: 8, pod_security: {level: root, reason: x},", "platform.tenants[0].pod_security.level"),
    ("gpus: 8,", "gpus: 8, cpu_cores: 0,", "platform.tenants[0].cpu_cores"),
    ("gpus: 8,", "gpus: 8, cpu_cores: 2.5,", "platform.tenants[0].cpu_cores"),
    ("gpus: 8,", "gpus: 8, memory_gb: 64Gi,", "platform.tenants[0].memory_gb"),
    ("gpus: 8,", "gpus: 8, pods: -1,", "platform.tenants[0].pods"),
    ("gpus: 8,", "gpus: 8, pods: true,", "platform.tenants[0].pods"),
    ("gpus: 8,", "gpus: 8, priority_classes: batch-high,", "platform.tenants[0].priority_classes"),
    ("gpus: 8,", "gpus: 8, priority_classes: [Batch_High],", "platform.tenants[0].priority_classes[0]"),
    ("gpus: 8,", "gpus: 8, priority_classes: [batch, system-node-critical],", "platform.tenants[0].priority_classes[1]"),
    ("releases: [kueue]", "releases: kueue", "platform.releases"),
    ("tenants:", "tenant:", "platform.tenant"),
    ("versions: {}", "versions: {}\n  helm_repositories: {nvidia: oci://mirror/nvidia}", "platform.helm_repositories.nvidia"),
    ("versions: {}", "versions: {}\n  helm_repositories: [nvidia]", "platform.helm_repositories"),
    ("versions: {}", "versions: {}\n  storage_classes: {name: fast}", "platform.storage_classes"),
    ("versions: {}", "versions: {}\n  storage_classes: [{name: fast}]", "platform.storage_classes[0]"),
    ("versions: {}", "versions: {}\n  storage_classes: [{name: Fast, provisioner: a.b}]", "platform.storage_classes[0].name"),
    ("versions: {}", "versions: {}\n  storage_classes: [{name: fast, provisioner: 'a b'}]",
     "platform.storage_classes[0].provisioner"),
    ("versions: {}", "versions: {}\n  storage_classes: [{name: fast, provisioner: a.b, size: 1}]",
     "platform.storage_classes[0].size"),
    ("versions: {}", "versions: {}\n  storage_classes: [{name: fast, provisioner: a.b, parameters: {rdma: true}}]",
     "platform.storage_classes[0].parameters.rdma"),
    ("versions: {}", "versions: {}\n  storage_classes: [{name: fast, provisioner: a.b, reclaim_policy: Recycle}]",
     "platform.storage_classes[0].reclaim_policy"),
    ("versions: {}", "versions: {}\n  storage_classes: [{name: fast, provisioner: a.b}, {name: fast, provisioner: c.d}]",
     "platform.storage_classes[1].name"),
    ("versions: {}", "versions: {}\n  storage_classes: [{name: a, provisioner: a.b, default: true},"
                     " {name: b, provisioner: c.d, default: true}]", "platform.storage_classes"),
])
def test_bad_platform_file_names_file_line_and_key(lab_files, old, new, key):
    lab_files.edit("topologies/platform/lab.yaml", old, new)
    with pytest.raises(SourceError) as raised:
        load_platform(lab_files.load())
    assert (raised.value.loc.path, raised.value.loc.line > 0, raised.value.key) == ("topologies/platform/lab.yaml", True, key)


def test_the_gpu_exporter_exports_every_counter_the_alerts_read(full_lab):
    """Three alerts read counters dcgm-exporter leaves out by default: the rendered counters
    list enables them, and the GPU Operator's exporter is pointed at it."""
    from rackform.k8s.alerts import DCGM_COUNTERS_NEEDED, alert_rules

    site, manifests = full_lab
    csv = next(m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"] == "dcgm-metrics")
    exported = [line.split(",")[0] for line in csv["data"]["dcgm-metrics.csv"].splitlines()]
    read = {name for name, _default in DCGM_COUNTERS_NEEDED}
    expressions = " ".join(rule["expr"] for group in alert_rules("monitoring")["spec"]["groups"] for rule in group["rules"])
    assert {name for name in read if name in expressions} <= set(exported)
    assert read <= set(exported) and len(exported) == len(set(exported))
    gpu = next(r for r in helm_releases(site, load_platform(site), load_matrix(REPO)) if r.component == "gpu_operator")
    exporter = gpu.values["dcgmExporter"]
    assert exporter["config"] == {"name": "dcgm-metrics"}
    assert exporter["env"] == [{"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/dcgm-exporter/dcgm-metrics.csv"}]
