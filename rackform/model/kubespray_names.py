"""Kubespray's names for the Kubernetes variables rackform renders, and the names they replaced.

rackform writes these variables itself (group_vars `k8s_cluster/`) from the site design, so
an inventory never sets them. An inventory that still sets a former name would pass it
through unread; it is refused instead, naming the new variable and the design key it comes
from, as Kubespray refuses its removed variables. Standard library only: the inventory
loader imports this.
"""

from __future__ import annotations

RENAMED_VARIABLES: dict[str, tuple[str, str]] = {
    "kube_pod_prefix": ("kube_pods_subnet", "kubernetes.pod_prefix"),
    "kube_service_prefix": ("kube_service_addresses", "kubernetes.service_prefix"),
    "kube_cni": ("kube_network_plugin", "kubernetes.cni"),
    "kube_api_vip": ("kube_vip_address", "kubernetes.api_vip"),
    "kube_cni_versions": ("calico_version, multus_version", "topologies/versions.yaml (calico, multus)"),
}
"""Former name -> (Kubespray's name, where rackform takes the value from)."""


def renamed_message(key: object) -> str | None:
    """The error for a former name, or None for any other variable."""
    if not isinstance(key, str) or key not in RENAMED_VARIABLES:
        return None
    new, source = RENAMED_VARIABLES[key]
    return f"renamed: use {new} (Kubespray's name); rackform writes it from {source}, so set that instead"
