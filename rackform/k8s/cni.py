"""The cluster network, applied by the kubeadm role right after `kubeadm init`.

Calico (site.kubernetes.cni) through the tigera-operator: the operator's own
manifest comes from the site's mirror at the pinned release; what rackform renders
is the `Installation` that gives Calico the site's pod prefix. Multus (thin plugin)
attaches the secondary RDMA networks: one NetworkAttachmentDefinition per fabric
port of the GPU blocks, a macvlan on that port (rackform/k8s/rdma.py, which the
platform's tenant namespaces share).

Versions come from topologies/versions.yaml (components calico, multus). The
manifests land in group_vars `k8s_cluster/cni.yml` as `kube_cni_manifests`
(file name -> list of objects), so the kubernetes stage's digest covers them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rackform.k8s.manifests import Manifest
from rackform.k8s.rdma import NAD_GROUP, nad_crd, rdma_attachments
from rackform.k8s.versions import Matrix, load_matrix
from rackform.model.site import Site

MULTUS_NAMESPACE = "kube-system"
MULTUS_IMAGE = "k8snetworkplumbingwg/multus-cni"
"""Image path without a registry: the site's mirror is prepended (kubeadm_image_registry)."""
CALICO_BLOCK_SIZE = 26
"""Addresses per node block of the pod prefix (Calico's default /26)."""


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "rackform"}}
    if namespace:
        meta["namespace"] = namespace
    return meta


# ------------------------------------------------------------------ Calico


def calico_manifests(site: Site) -> list[Manifest]:
    """The operator's Installation and APIServer: pod prefix from the site, node addresses on management."""
    kube = site.kubernetes
    management = [str(n.prefix) for n in site.networks.values() if n.purpose == "management"]
    network: dict[str, Any] = {
        "ipPools": [{"cidr": str(kube.pod_prefix), "blockSize": CALICO_BLOCK_SIZE,
                     "encapsulation": "VXLANCrossSubnet", "natOutgoing": "Enabled", "nodeSelector": "all()"}],
    }
    if management:
        # Nodes have several addresses (management, fabric): BGP/VXLAN peer on management.
        network["nodeAddressAutodetectionV4"] = {"cidrs": management}
    return [
        {"apiVersion": "operator.tigera.io/v1", "kind": "Installation", "metadata": _meta("default"),
         "spec": {"calicoNetwork": network}},
        {"apiVersion": "operator.tigera.io/v1", "kind": "APIServer", "metadata": _meta("default"), "spec": {}},
    ]


# ------------------------------------------------------------------ Multus


def _multus_rbac() -> list[Manifest]:
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta("multus", MULTUS_NAMESPACE)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta("multus"),
         "rules": [
             {"apiGroups": [NAD_GROUP], "resources": ["*"], "verbs": ["*"]},
             {"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "update"]},
             {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": _meta("multus"),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "multus"},
         "subjects": [{"kind": "ServiceAccount", "name": "multus", "namespace": MULTUS_NAMESPACE}]},
    ]


def _multus_daemonset(image: str) -> Manifest:
    labels = {"app": "multus", "name": "multus"}
    host_paths = {"cni": "/etc/cni/net.d", "cnibin": "/opt/cni/bin"}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta("kube-multus-ds", MULTUS_NAMESPACE),
        "spec": {
            "selector": {"matchLabels": {"name": "multus"}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostNetwork": True, "serviceAccountName": "multus", "terminationGracePeriodSeconds": 10,
                    "tolerations": [{"operator": "Exists", "effect": "NoSchedule"},
                                    {"operator": "Exists", "effect": "NoExecute"}],
                    "initContainers": [{
                        "name": "install-multus-binary", "image": image,
                        "command": ["/install_multus", "-d", "/host/opt/cni/bin", "-t", "thin"],
                        "securityContext": {"privileged": True},
                        "volumeMounts": [{"name": "cnibin", "mountPath": "/host/opt/cni/bin", "mountPropagation": "Bidirectional"}],
                    }],
                    "containers": [{
                        "name": "kube-multus", "image": image, "command": ["/thin_entrypoint"],
                        "args": ["--multus-conf-file=auto", "--multus-autoconfig-dir=/host/etc/cni/net.d",
                                 "--cni-conf-dir=/host/etc/cni/net.d"],
                        "resources": {"requests": {"cpu": "100m", "memory": "50Mi"},
                                      "limits": {"cpu": "100m", "memory": "50Mi"}},
                        "securityContext": {"privileged": True},
                        "volumeMounts": [{"name": "cni", "mountPath": "/host/etc/cni/net.d"},
                                         {"name": "cnibin", "mountPath": "/host/opt/cni/bin"}],
                    }],
                    "volumes": [{"name": name, "hostPath": {"path": path}} for name, path in host_paths.items()],
                },
            },
        },
    }


def multus_manifests(site: Site, version: str) -> list[Manifest]:
    return [nad_crd(), *_multus_rbac(), _multus_daemonset(f"{MULTUS_IMAGE}:{version}")]


# ------------------------------------------------------------------ everything


def cni_manifests(site: Site, matrix: Matrix) -> dict[str, list[Manifest]]:
    """File name -> objects, in the order the kubeadm role applies them (CRDs before their objects)."""
    files: dict[str, list[Manifest]] = {}
    if site.kubernetes.cni == "calico":
        files["calico.yaml"] = calico_manifests(site)
    files["multus.yaml"] = multus_manifests(site, matrix.components["multus"].default)
    attachments = rdma_attachments(site)
    if attachments:
        files["rdma-networks.yaml"] = attachments
    return files


def matrix_root(site: Site) -> Path:
    """The site's repo (load_matrix falls back to the matrix rackform ships)."""
    return site.site_path.parent.parent.parent


def cni_group_vars(site: Site) -> dict[str, Any]:
    """group_vars k8s_cluster/cni.yml; empty for a site without Kubernetes."""
    if site.kubernetes is None:
        return {}
    matrix = load_matrix(matrix_root(site))
    return {
        # Kubespray's names for the pinned releases.
        "calico_version": matrix.components["calico"].default,
        "multus_version": matrix.components["multus"].default,
        "kube_cni_manifests": cni_manifests(site, matrix),
    }
