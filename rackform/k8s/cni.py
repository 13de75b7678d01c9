"""The cluster network, applied by the kubeadm role right after `kubeadm init`.

site.kubernetes.cni picks the pod network:

- kube-router: a DaemonSet on every node that routes the pod prefix between the nodes
  (each node's podCIDR, allocated by the controller manager) and enforces NetworkPolicy
  with iptables and ipsets; kube-proxy stays. Its CNI configuration (bridge, host-local,
  portmap: the plugins of the kubernetes-cni package) is a ConfigMap its init container
  copies into /etc/cni/net.d with `cp` (the image needs one). The image is the carried
  release's (topologies/versions.yaml, kubernetes.carried).
- calico: the tigera-operator, whose own manifest comes from the site's mirror at the
  pinned release; what rackform renders is the `Installation` that gives Calico the site's
  pod prefix.

Multus (thin plugin) attaches the secondary RDMA networks: one NetworkAttachmentDefinition
per fabric port of the GPU blocks, a macvlan on that port (rackform/k8s/rdma.py, which the
platform's tenant namespaces share).

Every image is named in the site mirror's registry when the site has one
(rackform.k8s.site_mirror.image). Versions come from topologies/versions.yaml. The
manifests land in group_vars `k8s_cluster/cni.yml` as `kube_cni_manifests`
(file name -> list of objects), so the kubernetes stage's digest covers them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import json

from rackform.k8s.rdma import NAD_GROUP, nad_crd, rdma_attachments
from rackform.k8s.site_mirror import image
from rackform.model.versions import Matrix, load_matrix
from rackform.model.site import Site

# Its own alias, as in the other k8s modules: the platform's manifests (rackform.k8s.manifests)
# ask this module whether Multus is installed, so it must not import them.
Manifest = dict[str, Any]

MULTUS_NAMESPACE = "kube-system"
MULTUS_IMAGE = "multus-cni"
"""The image's name in the site mirror's registry."""
MULTUS_PUBLISHED = "k8snetworkplumbingwg/multus-cni"
"""Its published name, for a site without a mirror."""
KUBE_ROUTER_NAMESPACE = "kube-system"
KUBE_ROUTER_IMAGE = "kube-router"
KUBE_ROUTER_PUBLISHED = "cloudnativelabs/kube-router"
KUBE_ROUTER_DEFAULT_TAG = "v2.1.0"
"""The tag when the site's release is not one the mirror carries (checks refuse that on a mirror site)."""
KUBE_ROUTER_CNI_FILE = "/etc/cni/net.d/10-kuberouter.conflist"
KUBE_ROUTER_BRIDGE = "kube-bridge"
KUBE_ROUTER_HEALTH_PORT = 20244
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
    return [nad_crd(), *_multus_rbac(), _multus_daemonset(image(site, MULTUS_IMAGE, version, MULTUS_PUBLISHED))]


# ------------------------------------------------------------------ kube-router


def kube_router_tag(site: Site, matrix: Matrix) -> str:
    """The kube-router image tag the site's carried release pins."""
    carried = matrix.carried.get(site.kubernetes.version)
    pinned = carried.images.get(KUBE_ROUTER_IMAGE) if carried is not None else None
    return pinned.version if pinned is not None else KUBE_ROUTER_DEFAULT_TAG


def _kube_router_cni_conf() -> str:
    """The CNI chain kube-router fills in: a bridge with host-local addresses from the node's podCIDR."""
    conf = {
        "cniVersion": "0.3.1", "name": "kube-router",
        "plugins": [
            {"name": "kubernetes", "type": "bridge", "bridge": KUBE_ROUTER_BRIDGE, "isDefaultGateway": True,
             "hairpinMode": True, "ipam": {"type": "host-local"}},
            {"type": "portmap", "capabilities": {"portMappings": True, "snat": True}},
        ],
    }
    # One key a line (indent=0): the rendered YAML shows it as a block.
    return json.dumps(conf, indent=0, sort_keys=True) + "\n"


def _kube_router_rbac() -> list[Manifest]:
    read = ["get", "list", "watch"]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta("kube-router", KUBE_ROUTER_NAMESPACE)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta("kube-router"),
         "rules": [
             {"apiGroups": [""], "resources": ["namespaces", "pods", "services", "nodes", "endpoints"], "verbs": read},
             {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": read},
             {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
             {"apiGroups": [""], "resources": ["services/status"], "verbs": ["update"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": _meta("kube-router"),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kube-router"},
         "subjects": [{"kind": "ServiceAccount", "name": "kube-router", "namespace": KUBE_ROUTER_NAMESPACE}]},
    ]


def _kube_router_daemonset(reference: str) -> Manifest:
    labels = {"k8s-app": "kube-router", "tier": "node"}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta("kube-router", KUBE_ROUTER_NAMESPACE),
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostNetwork": True, "priorityClassName": "system-node-critical",
                    "serviceAccountName": "kube-router",
                    "tolerations": [{"operator": "Exists", "effect": "NoSchedule"},
                                    {"operator": "Exists", "effect": "NoExecute"},
                                    {"key": "CriticalAddonsOnly", "operator": "Exists"}],
                    "initContainers": [{
                        # The chain without the node's subnet: kube-router adds its podCIDR when it starts.
                        "name": "install-cni", "image": reference,
                        "command": ["cp", "/etc/kube-router/cni-conf.json", KUBE_ROUTER_CNI_FILE],
                        "volumeMounts": [{"name": "cni-conf-dir", "mountPath": "/etc/cni/net.d"},
                                         {"name": "kube-router-cfg", "mountPath": "/etc/kube-router"}],
                    }],
                    "containers": [{
                        "name": "kube-router", "image": reference,
                        # Routes and NetworkPolicy; services stay kube-proxy's.
                        "args": ["--run-router", "--run-firewall", "--run-service-proxy=false",
                                 "--kubeconfig=/var/lib/kube-router/kubeconfig"],
                        "env": [
                            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "KUBE_ROUTER_CNI_CONF_FILE", "value": KUBE_ROUTER_CNI_FILE},
                        ],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": KUBE_ROUTER_HEALTH_PORT},
                                          "initialDelaySeconds": 10, "periodSeconds": 3},
                        "resources": {"requests": {"cpu": "250m", "memory": "250Mi"}},
                        "securityContext": {"privileged": True},
                        "volumeMounts": [
                            {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": True},
                            {"name": "cni-conf-dir", "mountPath": "/etc/cni/net.d"},
                            {"name": "kubeconfig", "mountPath": "/var/lib/kube-router", "readOnly": True},
                            {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
                        ],
                    }],
                    "volumes": [
                        {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}},
                        {"name": "cni-conf-dir", "hostPath": {"path": "/etc/cni/net.d"}},
                        {"name": "kube-router-cfg", "configMap": {"name": "kube-router-cfg"}},
                        # kubeadm's kube-proxy kubeconfig: the API through the control-plane
                        # endpoint, not through the service address kube-router's routes carry.
                        {"name": "kubeconfig", "configMap": {"name": "kube-proxy",
                                                             "items": [{"key": "kubeconfig.conf", "path": "kubeconfig"}]}},
                        {"name": "xtables-lock", "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}},
                    ],
                },
            },
        },
    }


def kube_router_manifests(site: Site, matrix: Matrix) -> list[Manifest]:
    """kube-router's RBAC, CNI configuration and DaemonSet."""
    reference = image(site, KUBE_ROUTER_IMAGE, kube_router_tag(site, matrix), KUBE_ROUTER_PUBLISHED)
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta("kube-router-cfg", KUBE_ROUTER_NAMESPACE),
              "data": {"cni-conf.json": _kube_router_cni_conf()}}
    return [*_kube_router_rbac(), config, _kube_router_daemonset(reference)]


# ------------------------------------------------------------------ everything


def cni_manifests(site: Site, matrix: Matrix) -> dict[str, list[Manifest]]:
    """File name -> objects, in the order the kubeadm role applies them (CRDs before their objects)."""
    files: dict[str, list[Manifest]] = {}
    if site.kubernetes.cni == "kube-router":
        files["kube-router.yaml"] = kube_router_manifests(site, matrix)
    if site.kubernetes.cni == "calico":
        files["calico.yaml"] = calico_manifests(site)
    if not multus_left_out(site, matrix):
        files["multus.yaml"] = multus_manifests(site, matrix.components["multus"].default)
        attachments = rdma_attachments(site)
        if attachments:
            files["rdma-networks.yaml"] = attachments
    return files


def multus_left_out(site: Site, matrix: Matrix) -> bool:
    """A site served by its mirror gets Multus (and the RDMA networks it attaches) only where the
    mirror carries Multus' image: otherwise its pods could never start (checks warn)."""
    if site.mirror is None:
        return False
    carried = matrix.carried.get(site.kubernetes.version)
    return carried is None or MULTUS_IMAGE not in carried.images


def matrix_root(site: Site) -> Path:
    """The site's repo (load_matrix falls back to the matrix rackform ships)."""
    return site.site_path.parent.parent.parent


def cni_group_vars(site: Site) -> dict[str, Any]:
    """group_vars k8s_cluster/cni.yml; empty for a site without Kubernetes."""
    if site.kubernetes is None:
        return {}
    matrix = load_matrix(matrix_root(site))
    values = {
        # Kubespray's names for the pinned releases.
        "calico_version": matrix.components["calico"].default,
        "multus_version": matrix.components["multus"].default,
        "kube_cni_manifests": cni_manifests(site, matrix),
    }
    if site.kubernetes.cni == "kube-router":
        values["kube_router_version"] = kube_router_tag(site, matrix)
    return values
