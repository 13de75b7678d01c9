"""The RDMA rails as pods see them: Multus NetworkAttachmentDefinitions on the GPU fabric ports.

The kubernetes stage applies the CRD and one attachment per port in `default`
(rackform/k8s/cni.py); the platform gives each tenant namespace its own copy
(rackform/k8s/manifests.py), so tenant pods reference `rdma-fab0` in their own
namespace. Both come from `rdma_attachments`, so the configs cannot differ.
"""

from __future__ import annotations

import json
from ipaddress import IPv4Network
from typing import Any

from rackform.model.site import Site

NAD_GROUP = "k8s.cni.cncf.io"
NAD_KIND = "NetworkAttachmentDefinition"
RDMA_FABRICS = ("compute_fabric", "storage_fabric")
RDMA_SHARED_RESOURCE = "rdma/rdma_shared_device_a"
"""The resource the Network Operator's RDMA shared device plugin advertises (helm values)."""

NAD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {"type": "object", "required": ["config"], "properties": {"config": {"type": "string"}}},
        "status": {"type": "object", "properties": {"state": {"type": "string"}, "observation": {"type": "string"}}},
    },
}
"""openAPIV3Schema of NetworkAttachmentDefinition v1, without its descriptions.

Source: the Kubernetes Network Plumbing Working Group's CRD,
k8snetworkplumbingwg/network-attachment-definition-client, artifacts/networks-crd.yaml
(commit 6fd0897f). The CRD the kubernetes stage applies carries this schema, and the
tests validate every rendered attachment against it (tests/unit/test_platform_render.py)."""


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "rackform"}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def fabric_interfaces(site: Site) -> list[str]:
    """Fabric port names of the GPU blocks: what the RDMA shared device plugin exposes."""
    names: dict[str, None] = {}
    for block in {host.block.name: host.block for host in site.hosts_in_role("gpu")}.values():
        for port in block.node.ports if block.node else []:
            if port.role == "fabric":
                names.update(dict.fromkeys(port.pattern.format(n=n) for n in range(port.count)))
    return list(names)


def nad_crd() -> dict[str, Any]:
    """The NetworkAttachmentDefinition CRD as the Network Plumbing WG publishes it."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": _meta(f"network-attachment-definitions.{NAD_GROUP}"),
        "spec": {
            "group": NAD_GROUP, "scope": "Namespaced",
            "names": {"plural": "network-attachment-definitions", "singular": "network-attachment-definition",
                      "kind": NAD_KIND, "shortNames": ["net-attach-def"]},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": NAD_SCHEMA}}],
        },
    }


def _pod_range(prefix: IPv4Network) -> tuple[str, str]:
    """Pods take the upper half of the fabric prefix; hosts are addressed from the bottom."""
    upper = list(prefix.subnets(prefixlen_diff=1))[-1] if prefix.prefixlen < 31 else prefix
    return str(upper.network_address + 1), str(upper.broadcast_address - 1)


def rdma_attachments(site: Site, namespace: str = "default") -> list[dict[str, Any]]:
    """One macvlan NetworkAttachmentDefinition per GPU fabric port (an RDMA rail) in `namespace`.

    Every namespace's copy names the same whereabouts range, so addresses come from one
    pool cluster-wide and never collide between tenants.
    """
    fabrics = [n for n in site.networks.values() if n.purpose in RDMA_FABRICS]
    if not fabrics:
        return []
    prefix = fabrics[0].prefix
    start, end = _pod_range(prefix)
    attachments = []
    for port in fabric_interfaces(site):
        config = {"cniVersion": "0.3.1", "name": f"rdma-{port}", "type": "macvlan", "master": port, "mode": "bridge",
                  "ipam": {"type": "whereabouts", "range": str(prefix), "range_start": start, "range_end": end}}
        attachments.append({
            "apiVersion": f"{NAD_GROUP}/v1", "kind": NAD_KIND,
            "metadata": {**_meta(f"rdma-{port}", namespace),
                         "annotations": {"k8s.v1.cni.cncf.io/resourceName": RDMA_SHARED_RESOURCE}},
            # One key a line (indent=0): YAML files show it as a readable block.
            "spec": {"config": json.dumps(config, indent=0, sort_keys=True)},
        })
    return attachments
