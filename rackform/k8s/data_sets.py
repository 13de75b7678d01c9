"""The site's data sets as Kubernetes sees them: one static NFS PersistentVolume and one claim each.

A data set (`data_sets:` in the site file, rackform.model.site.DataSet) is served by its
storage host over NFSv4 at the pseudo path `/<name>` (the storage role's export). Here it
becomes:

- a PersistentVolume `<tenant>.<name>` (cluster-scoped: the tenant in the name keeps two
  tenants' data sets of one name apart, and the dot, which no tenant or data set name may
  hold, keeps `a-b` + `c` apart from `a` + `b-c`), reserved by `claimRef` for the claim below,
  so no other namespace's claim can bind it;
- a PersistentVolumeClaim `<name>` in the owning tenant's namespace, bound to that volume by
  `volumeName`: a job mounts its data set by the claim's name;
- once per site with data sets, a ValidatingAdmissionPolicy and its binding that refuse
  anyone but the platform and the control plane's controllers deleting such a claim, or
  taking its data-set label off (which would let it be deleted): the tenant admin otherwise
  creates and deletes claims of its own (rackform.k8s.manifests TENANT_WORKLOADS).

No provisioner is involved (static binding, storageClassName ""), so the claims bind on any
cluster; a pod's mount is the kubelet's, with the node's kernel NFS client (docs/storage.md).
"""

from __future__ import annotations

from typing import Any

from rackform.model.site import DataSet, Site
from rackform.model.storage_network import NFS_RDMA_PORT, serves_nfs_over_rdma, serving_address

Manifest = dict[str, Any]
NFS_VERSION = "4.1"
"""NFSv4 only (the exports are NFSv4 pseudo paths); 4.1 for sessions, which NFS over RDMA and
trunking build on."""
CLAIM_REQUEST = "1Gi"
"""What each claim requests. A bound claim's request cannot change unless a StorageClass allows
expansion (none does here), so it is the least every volume satisfies, not the data set's size:
the design may grow or shrink a data set and only the volume's capacity follows. `kubectl get
pvc` shows the volume's capacity either way."""
DATA_SET_LABEL = "rackform.io/data-set"
TENANT_LABEL = "rackform.io/tenant"
ACCESS_MODES = {"ro": "ReadOnlyMany", "rw": "ReadWriteMany"}


def volume_name(data_set: DataSet) -> str:
    """The PersistentVolume's name: a DNS subdomain, unique across tenants."""
    return f"{data_set.tenant}.{data_set.name}"


def pseudo_path(data_set: DataSet) -> str:
    """Where the data set is in its server's NFSv4 namespace (the export's Pseudo / fsid=0 path)."""
    return f"/{data_set.name}"


def mount_options(site: Site, data_set: DataSet) -> list[str]:
    """nfsvers 4.1, hard (a job blocks through a server restart instead of reading an error),
    and RDMA on port 20049 where the server serves NFS over RDMA."""
    options = [f"nfsvers={NFS_VERSION}", "hard"]
    server = site.hosts.get(data_set.server)
    if server is not None and serves_nfs_over_rdma(server):
        options += ["proto=rdma", f"port={NFS_RDMA_PORT}"]
    return options


def _meta(name: str, data_set: DataSet, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "rackform",
                                                     TENANT_LABEL: data_set.tenant, DATA_SET_LABEL: data_set.name}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def persistent_volume(site: Site, data_set: DataSet, server_address: str) -> Manifest:
    access = ACCESS_MODES[data_set.mode]
    return {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": _meta(volume_name(data_set), data_set),
        "spec": {
            "capacity": {"storage": f"{data_set.size_gb}Gi"},
            "accessModes": [access],
            # Retain: deleting the claim (or the volume) never touches the data on the server.
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": mount_options(site, data_set),
            "nfs": {"server": server_address, "path": pseudo_path(data_set),
                    **({"readOnly": True} if data_set.mode == "ro" else {})},
            # Reserved for the tenant's claim: without it any namespace's claim naming this
            # volume could bind it first. claimRef is granular under server-side apply: the
            # binder adds uid and resourceVersion beside these two fields without a conflict.
            "claimRef": {"namespace": data_set.tenant, "name": data_set.name},
        },
    }


def persistent_volume_claim(data_set: DataSet) -> Manifest:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": _meta(data_set.name, data_set, data_set.tenant),
        "spec": {
            "accessModes": [ACCESS_MODES[data_set.mode]],
            # "" (not absent): a default StorageClass must not be given this claim to provision.
            "storageClassName": "",
            "volumeName": volume_name(data_set),
            "resources": {"requests": {"storage": CLAIM_REQUEST}},
        },
    }


def servable(site: Site, tenants: set[str]) -> list[tuple[DataSet, str]]:
    """Data sets the platform can give a volume: of a platform tenant, on a server with an
    address on the storage network (validate refuses the others). (data set, server address)."""
    found = []
    for data_set in site.data_sets:
        server = site.hosts.get(data_set.server)
        address = serving_address(site, server) if server is not None else None
        if data_set.tenant in tenants and address is not None:
            found.append((data_set, str(address.ip)))
    return found


def tenant_data_set_manifests(site: Site, tenant: str, tenants: set[str]) -> list[Manifest]:
    """A tenant's data sets: each one's volume, then its claim (after the tenant's namespace)."""
    return [manifest for data_set, address in servable(site, tenants) if data_set.tenant == tenant
            for manifest in (persistent_volume(site, data_set, address), persistent_volume_claim(data_set))]


# ------------------------------------------------------------------ the claims' protection


CLAIM_PROTECTION = "rackform-data-set-claims"
"""The ValidatingAdmissionPolicy (and its binding) that keeps the data sets' claims the platform's."""
PLATFORM_GROUPS = ("system:masters", "kubeadm:cluster-admins")
"""Who applies the platform: kubectl with the kubeadm admin kubeconfig the kubernetes stage fetches
(admin.conf: user kubernetes-admin, group kubeadm:cluster-admins since kubeadm 1.29; super-admin.conf:
group system:masters). The same identity deletes a claim by hand (docs/storage.md)."""
CONTROLLER_MANAGER = "system:kube-controller-manager"
KUBE_SYSTEM_SERVICE_ACCOUNTS = "system:serviceaccount:kube-system:"
"""The controller manager's controllers, each under its own service account in kube-system
(kubeadm runs it with --use-service-account-credentials): the namespace controller deletes a
pruned tenant's claims, the PV binder and pvc-protection controllers update them."""


def _label(value: str) -> str:
    """CEL: `value`'s data-set label, '' where it has none."""
    return (f"has({value}.metadata.labels) && '{DATA_SET_LABEL}' in {value}.metadata.labels"
            f" ? {value}.metadata.labels['{DATA_SET_LABEL}'] : ''")


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def claim_protection_policy() -> Manifest:
    """Refuses deleting a data set's claim, and taking its label off or changing it (the label is
    what marks it: without it the claim could be deleted next), to anyone but the platform and
    the control plane's controllers. Only UPDATE and DELETE: the platform creates the claims, and
    a GitOps tool applying the rendered claims (rackform gitops) neither deletes them nor changes
    their label. The objectSelector keeps every other claim out of the policy (for DELETE it is
    matched against the claim as it is; for UPDATE against it before or after the change)."""
    label_was = "variables.dataSet"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": CLAIM_PROTECTION, "labels": {"app.kubernetes.io/managed-by": "rackform"}},
        "spec": {
            # An expression that cannot be evaluated refuses rather than lets the claim go.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE", "DELETE"],
                                   "resources": ["persistentvolumeclaims"]}],
                "objectSelector": {"matchExpressions": [{"key": DATA_SET_LABEL, "operator": "Exists"}]},
            },
            # Each must hold for the policy to apply: whoever makes one false is let through.
            "matchConditions": [
                {"name": "not-the-platform",
                 "expression": "!has(request.userInfo.groups) || "
                               f"!request.userInfo.groups.exists(group, group in {_cel_list(PLATFORM_GROUPS)})"},
                {"name": "not-the-controller-manager",
                 "expression": f"request.userInfo.username != '{CONTROLLER_MANAGER}'"},
                {"name": "not-a-kube-system-controller",
                 "expression": f"!request.userInfo.username.startsWith('{KUBE_SYSTEM_SERVICE_ACCOUNTS}')"},
            ],
            "variables": [{"name": "dataSet", "expression": _label("oldObject")}],
            "validations": [
                {"expression": "request.operation != 'DELETE'", "reason": "Forbidden",
                 "message": "the claim of a data set belongs to the platform (rackform)",
                 "messageExpression": f"'the claim of data set ' + {label_was} + ' belongs to the platform "
                                      "(rackform): take the data set out of the site design, then a cluster "
                                      "admin deletes the claim'"},
                {"expression": f"request.operation != 'UPDATE' || {label_was} == '' || ({_label('object')}) == "
                               f"{label_was}",
                 "reason": "Forbidden",
                 "message": f"the label {DATA_SET_LABEL} of a data set's claim belongs to the platform (rackform)",
                 "messageExpression": f"'the label {DATA_SET_LABEL} on the claim of data set ' + {label_was} + "
                                      "' belongs to the platform (rackform): it stays as the site design has it'"},
            ],
        },
    }


def claim_protection(site: Site, tenants: set[str]) -> list[Manifest]:
    """The policy and its binding (Deny), where the platform gives any data set a claim; nothing
    otherwise, so a site without data sets applies exactly what it did before them."""
    if not servable(site, tenants):
        return []
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": CLAIM_PROTECTION, "labels": {"app.kubernetes.io/managed-by": "rackform"}},
        "spec": {"policyName": CLAIM_PROTECTION, "validationActions": ["Deny"]},
    }
    return [claim_protection_policy(), binding]
