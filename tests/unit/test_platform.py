"""The platform design file and the plain manifests rendered from it, validated offline
with kubernetes-validate --strict for each site's pinned Kubernetes version.

The platform creates only core Kubernetes kinds; its custom resources come from the
operators' Helm charts, and the repo holds no CRD schemas to check them against."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest

from rackform.k8s.manifests import (
    DASHBOARD_PANELS,
    NFS_PROVISIONER,
    NVMEOF_PROVISIONER,
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


@pytest.mark.parametrize("site_name", SITES)
def test_every_manifest_validates_strictly(site_name):
    version, manifests = manifests_of(site_name)
    failures = []
    for manifest in manifests:
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            failures.append(f"{manifest['kind']}/{manifest['metadata']['name']}: {error.message}")
    assert failures == []


def test_strict_validation_rejects_an_unknown_field():
    """The check above is worth something: strict mode refuses what the API would drop."""
    _version, manifests = manifests_of("lab")
    quota = next(m for m in manifests if m["kind"] == "ResourceQuota")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({**quota, "spec": {**quota["spec"], "gpus": 8}}, "1.31.4", strict=True)


def test_lab_tenants_come_from_the_platform_file():
    assert [t.name for t in load_platform(load_site("lab", REPO)).tenants] == ["research", "inference"]


def test_a_site_without_platform_file_gets_defaults_and_no_tenants():
    assert load_platform(load_site("reference", REPO)) == PlatformDesign()


def test_tenant_quota_limits_gpu_requests():
    _version, manifests = manifests_of("lab")
    quotas = {m["metadata"]["namespace"]: m["spec"]["hard"] for m in manifests if m["kind"] == "ResourceQuota"}
    assert quotas == {"research": {"requests.nvidia.com/gpu": "8"}, "inference": {"requests.nvidia.com/gpu": "4"}}


def test_tenant_network_policy_denies_all_by_default():
    _version, manifests = manifests_of("lab")
    policy = next(m for m in manifests if m["kind"] == "NetworkPolicy")
    assert policy["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_tenant_admins_are_bound_to_the_tenant_role():
    _version, manifests = manifests_of("lab")
    binding = next(m for m in manifests if m["kind"] == "RoleBinding" and m["metadata"]["namespace"] == "research")
    assert [s["name"] for s in binding["subjects"]] == ["alice", "bob"]


@pytest.mark.parametrize(("site_name", "expected"), [
    ("lab", [NFS_PROVISIONER]),
    ("campus", [NVMEOF_PROVISIONER, NVMEOF_PROVISIONER, NFS_PROVISIONER]),
])
def test_storage_classes_follow_the_storage_blocks(site_name, expected):
    site = load_site(site_name, REPO)
    assert [c["provisioner"] for c in storage_classes(site, PlatformDesign())] == expected


def test_exactly_one_default_storage_class_and_it_is_nfs():
    site = load_site("campus", REPO)
    defaults = [c for c in storage_classes(site, PlatformDesign()) if c["metadata"].get("annotations")]
    assert [c["provisioner"] for c in defaults] == [NFS_PROVISIONER]


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
    ("tenants:", "tenant:", "platform.tenant"),
])
def test_bad_platform_file_names_file_line_and_key(lab_files, old, new, key):
    lab_files.edit("topologies/platform/lab.yaml", old, new)
    with pytest.raises(SourceError) as raised:
        load_platform(lab_files.load())
    assert (raised.value.loc.path, raised.value.loc.line > 0, raised.value.key) == ("topologies/platform/lab.yaml", True, key)
