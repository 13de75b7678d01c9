"""The cluster network (rackform/k8s/cni.py): kube-router, Calico and Multus manifests rendered
from the site design, validated offline. Built-in kinds (CRD, RBAC, DaemonSet ...) go through
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
from rackform.render.project import render_files

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
    assert (cni["calico_version"], cni["multus_version"], cni["kube_router_version"]) == ("v3.30.0", "v4.2.0", "v2.1.0")


def daemonset_images(manifests: list[dict]) -> dict[str, list[str]]:
    return {m["metadata"]["name"]: [c["image"] for key in ("initContainers", "containers")
                                    for c in m["spec"]["template"]["spec"].get(key, [])]
            for m in manifests if m["kind"] == "DaemonSet"}


def test_every_image_comes_from_the_site_mirror_at_the_pinned_release():
    _, manifests = cni_of("lab")
    assert daemonset_images(manifests) == {"kube-router": ["10.10.0.11:5000/kube-router:v2.1.0"] * 2}


def test_a_mirror_without_multus_leaves_multus_and_the_rdma_networks_out_and_validate_says_so(lab_files):
    from rackform.checks.runner import run_checks

    assert list(cni_group_vars(lab_files.load())["kube_cni_manifests"]) == ["kube-router.yaml"]
    warnings = [f for f in run_checks(lab_files.load()) if f.check == "mirror_carries_multus"]
    assert [f.severity for f in warnings] == ["warning"] and "carries no multus-cni image" in warnings[0].message


def test_a_site_without_a_mirror_names_the_published_images(lab_files):
    lab_files.edit_site("mirror:\n  host: mgmt-1\n", "")
    manifests = [m for ms in cni_group_vars(lab_files.load())["kube_cni_manifests"].values() for m in ms]
    assert daemonset_images(manifests) == {
        "kube-router": ["cloudnativelabs/kube-router:v2.1.0"] * 2,
        "kube-multus-ds": ["k8snetworkplumbingwg/multus-cni:v4.2.0"] * 2,
    }


def test_kube_router_routes_and_enforces_policy_but_leaves_services_to_kube_proxy():
    _, manifests = cni_of("lab")
    daemonset = next(m for m in manifests if m["kind"] == "DaemonSet" and m["metadata"]["name"] == "kube-router")
    args = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--run-router", "--run-firewall", "--run-service-proxy=false"} <= set(args)


def test_kube_router_cni_chain_uses_the_kubernetes_cni_plugins():
    _, manifests = cni_of("lab")
    config = next(m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"] == "kube-router-cfg")
    chain = json.loads(config["data"]["cni-conf.json"])
    assert [plugin["type"] for plugin in chain["plugins"]] == ["bridge", "portmap"]
    assert chain["plugins"][0]["ipam"] == {"type": "host-local"}


def test_kube_router_may_read_what_it_enforces():
    _, manifests = cni_of("lab")
    role = next(m for m in manifests if m["kind"] == "ClusterRole" and m["metadata"]["name"] == "kube-router")
    assert {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
            "verbs": ["get", "list", "watch"]} in role["rules"]


def test_calico_is_still_a_choice(lab_files):
    lab_files.edit("topologies/profiles/kubernetes.yaml", "  cni: kube-router", "  cni: calico")
    lab_files.edit_site("mirror:\n  host: mgmt-1\n", "")
    files = list(cni_group_vars(lab_files.load())["kube_cni_manifests"])
    assert files == ["calico.yaml", "multus.yaml", "rdma-networks.yaml"]


def test_one_rdma_attachment_per_gpu_fabric_port():
    names = [m["metadata"]["name"] for m in rdma_attachments(load_site("lab", REPO))]
    assert names == [f"rdma-fab{n}" for n in range(8)]


def test_rdma_attachment_is_a_macvlan_on_its_port_with_pod_addresses_in_the_upper_half():
    site = load_site("lab", REPO)
    config = json.loads(rdma_attachments(site)[1]["spec"]["config"])
    fabric = next(n.prefix for n in site.networks.values() if n.purpose == "compute_fabric")
    upper = list(IPv4Network(fabric).subnets(prefixlen_diff=1))[-1]
    assert (config["type"], config["master"], IPv4Address(config["ipam"]["range_start"]) in upper) == ("macvlan", "fab1", True)


def test_crd_comes_before_the_attachments_that_need_it(lab_files):
    lab_files.edit_site("mirror:\n  host: mgmt-1\n", "")
    files = list(cni_group_vars(lab_files.load())["kube_cni_manifests"])
    assert files.index("multus.yaml") < files.index("rdma-networks.yaml")


def test_cni_manifests_are_rendered_into_the_cluster_group_vars():
    cni = yaml.safe_load(render_files(load_site("lab", REPO))["inventory/group_vars/k8s_cluster/cni.yml"])
    assert list(cni["kube_cni_manifests"]) == ["kube-router.yaml"]


def test_kubeadm_role_applies_the_cni_after_init_on_the_first_node_only():
    tasks = yaml.safe_load((REPO / "roles/kubeadm/tasks/control_plane.yml").read_text())
    names = [task["name"] for task in tasks]
    cni = tasks[names.index("Apply the cluster network (Calico, Multus) on the first control-plane node")]
    init = tasks[names.index("Initialise the cluster")]  # a block: its rescue masks the join secrets
    assert [task["name"] for task in init["block"]] == ["Initialise the cluster on the first control-plane node"]
    assert (names.index(init["name"]) < names.index(cni["name"]), init["when"], cni["when"]) == (
        True, "inventory_hostname == kubeadm_init_host", "inventory_hostname == kubeadm_init_host")


def test_a_stopped_bootstrap_says_the_cni_was_skipped():
    report = next(t for t in yaml.safe_load((REPO / "roles/kubeadm/tasks/stop.yml").read_text())
                  if t["name"] == "Report that the Kubernetes bootstrap stopped")
    assert "CNI SKIPPED" in report["ansible.builtin.debug"]["msg"]
