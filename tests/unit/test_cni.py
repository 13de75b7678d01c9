"""The cluster network (rackform/k8s/cni.py): Calico and Multus manifests rendered from
the site design, validated offline. Built-in kinds (CRD, RBAC, DaemonSet ...) go through
kubernetes-validate --strict for the site's Kubernetes version; custom resources
(Calico's Installation/APIServer, NetworkAttachmentDefinition) have no schema in
kubernetes-validate and the repo holds no CRD schema for Calico, so they are checked
structurally only (apiVersion, kind, name, and for attachments the CNI config JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from ipaddress import IPv4Address, IPv4Network

import kubernetes_validate
import pytest
import yaml

from rackform.k8s.cni import calico_manifests, cni_group_vars, rdma_attachments
from rackform.model.loader import load_site
from rackform.render import render_files

REPO = Path(__file__).resolve().parents[2]
SITES = ("lab", "reference", "campus")
CUSTOM_GROUPS = ("operator.tigera.io/", "k8s.cni.cncf.io/")


def cni_of(site_name: str) -> tuple[str, list[dict]]:
    site = load_site(site_name, REPO)
    files = cni_group_vars(site)["kube_cni_manifests"]
    return site.kubernetes.version, [manifest for manifests in files.values() for manifest in manifests]


def is_custom(manifest: dict) -> bool:
    return manifest["apiVersion"].startswith(CUSTOM_GROUPS)


@pytest.mark.parametrize("site_name", SITES)
def test_built_in_cni_objects_validate_strictly(site_name):
    version, manifests = cni_of(site_name)
    failures = []
    for manifest in (m for m in manifests if not is_custom(m)):
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            failures.append(f"{manifest['kind']}/{manifest['metadata']['name']}: {error.message}")
    assert failures == []


@pytest.mark.parametrize("site_name", SITES)
def test_custom_resources_are_well_formed(site_name):
    _, manifests = cni_of(site_name)
    malformed = [m for m in manifests if is_custom(m)
                 and not (m["apiVersion"].count("/") == 1 and m["kind"] and m["metadata"]["name"] and "spec" in m)]
    assert malformed == []


def test_strict_validation_catches_a_bad_daemonset_field():
    version, manifests = cni_of("lab")
    daemonset = next(m for m in manifests if m["kind"] == "DaemonSet")
    broken = {**daemonset, "spec": {**daemonset["spec"], "replicas": 3}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def test_calico_pool_is_the_site_pod_prefix():
    site = load_site("lab", REPO)
    installation = calico_manifests(site)[0]
    assert installation["spec"]["calicoNetwork"]["ipPools"][0]["cidr"] == str(site.kubernetes.pod_prefix)


def test_cni_versions_come_from_the_matrix():
    cni = cni_group_vars(load_site("lab", REPO))
    assert (cni["calico_version"], cni["multus_version"]) == ("v3.29.1", "v4.1.3")


def test_multus_image_is_pinned_to_the_matrix_release():
    _, manifests = cni_of("lab")
    daemonset = next(m for m in manifests if m["kind"] == "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v4.1.3")


def test_one_rdma_attachment_per_gpu_fabric_port():
    names = [m["metadata"]["name"] for m in rdma_attachments(load_site("lab", REPO))]
    assert names == [f"rdma-fab{n}" for n in range(8)]


def test_rdma_attachment_is_a_macvlan_on_its_port_with_pod_addresses_in_the_upper_half():
    site = load_site("lab", REPO)
    config = json.loads(rdma_attachments(site)[1]["spec"]["config"])
    fabric = next(n.prefix for n in site.networks.values() if n.purpose == "compute_fabric")
    upper = list(IPv4Network(fabric).subnets(prefixlen_diff=1))[-1]
    assert (config["type"], config["master"], IPv4Address(config["ipam"]["range_start"]) in upper) == ("macvlan", "fab1", True)


def test_crd_comes_before_the_attachments_that_need_it():
    files = list(cni_group_vars(load_site("lab", REPO))["kube_cni_manifests"])
    assert files.index("multus.yaml") < files.index("rdma-networks.yaml")


def test_cni_manifests_are_rendered_into_the_cluster_group_vars():
    cni = yaml.safe_load(render_files(load_site("lab", REPO))["inventory/group_vars/k8s_cluster/cni.yml"])
    assert list(cni["kube_cni_manifests"]) == ["calico.yaml", "multus.yaml", "rdma-networks.yaml"]


def test_kubeadm_role_applies_the_cni_after_init_on_the_first_node_only():
    tasks = yaml.safe_load((REPO / "roles/kubeadm/tasks/control_plane.yml").read_text())
    names = [task["name"] for task in tasks]
    cni = tasks[names.index("Apply the cluster network (Calico, Multus) on the first control-plane node")]
    assert (names.index("Initialise the cluster on the first control-plane node") < names.index(cni["name"]),
            cni["when"]) == (True, "inventory_hostname == kubeadm_init_host")


def test_a_stopped_bootstrap_says_the_cni_was_skipped():
    report = next(t for t in yaml.safe_load((REPO / "roles/kubeadm/tasks/stop.yml").read_text())
                  if t["name"] == "Report that the Kubernetes bootstrap stopped")
    assert "CNI SKIPPED" in report["ansible.builtin.debug"]["msg"]
