"""The data sets on the Kubernetes side: a static NFS PersistentVolume per data set, reserved for
a claim of the same name in the owning tenant's namespace (rackform/k8s/data_sets.py), and the
admission policy that keeps those claims the platform's, where the platform applies them
(rendered files, gitops), validated strictly; the storage network they are served on
(rackform/model/storage_network.py); the platform file's storage classes and the warning about
all-flash storage hosts with none.

The policy's decisions are the API server's own code's (tests/unit/vap_support.py runs
k8s.io/apiserver's policy code on them); its selection of claims is checked by shape, and the
whole against the lab's API server (tests/lab/test_platform_lab.py)."""

from __future__ import annotations

from ipaddress import IPv4Interface, IPv4Network
from pathlib import Path

import pytest
import yaml
from platform_validation import problems
from vap_support import Request, decide

from rackform.checks.platform import platform_storage_classes
from rackform.commands.gitops import gitops_files
from rackform.k8s.data_sets import (
    CLAIM_PROTECTION,
    CLAIM_REQUEST,
    CONTROLLER_MANAGER,
    DATA_SET_LABEL,
    KUBE_SYSTEM_SERVICE_ACCOUNTS,
    PLATFORM_GROUPS,
    volume_name,
)
from rackform.k8s.manifests import platform_manifests, storage_classes
from rackform.k8s.platform import load_platform
from rackform.k8s.versions import load_matrix
from rackform.model.loader import load_site
from rackform.model.schema import StoragePlacement
from rackform.model.site import DataSet
from rackform.model.source import Loc, SourceError
from rackform.model.storage_network import serving_address, storage_addresses, storage_network
from rackform.render.platform_files import platform_files

REPO = Path(__file__).resolve().parents[2]
LAB_PLATFORM = "topologies/platform/lab.yaml"


def data_set(name: str, tenant: str = "research", mode: str = "ro", size_gb: int = 500,
             server: str = "stor-1") -> DataSet:
    return DataSet(name=name, tenant=tenant, size_gb=size_gb, mode=mode, server=server,
                   path=f"/srv/data-sets/{name}", clients=("gpu-1", "gpu-2"), loc=Loc("topologies/sites/lab.yaml", 1))


def lab_with(*data_sets: DataSet, storage: StoragePlacement | None = None):
    """The shipped lab with exactly these data sets (and stor-1 placed as `storage`): (site, manifests)."""
    site = load_site("lab", REPO)
    site.data_sets = list(data_sets)
    if storage is not None:
        site.hosts["stor-1"].device.storage = storage
    return site, platform_manifests(site, load_platform(site), load_matrix(REPO))


def of_kind(manifests: list[dict], kind: str) -> dict[str, dict]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


# ---------------------------------------------------------------- the volume and its claim


def test_each_data_set_is_a_volume_reserved_for_a_claim_of_its_name_in_the_tenant_namespace():
    _site, manifests = lab_with(data_set("imagenet"))
    volume = of_kind(manifests, "PersistentVolume")["research.imagenet"]
    claim = of_kind(manifests, "PersistentVolumeClaim")["imagenet"]
    assert volume["spec"]["claimRef"] == {"namespace": "research", "name": "imagenet"}
    assert claim["metadata"]["namespace"] == "research"
    assert claim["spec"]["volumeName"] == "research.imagenet"
    assert volume["spec"]["storageClassName"] == claim["spec"]["storageClassName"] == ""


def test_the_volume_is_the_server_s_nfsv4_pseudo_path_at_its_storage_address():
    _site, manifests = lab_with(data_set("imagenet"))
    volume = of_kind(manifests, "PersistentVolume")["research.imagenet"]["spec"]
    # stor-1's fab0 on the lab's compute fabric (the lab has no storage_fabric network)
    assert volume["nfs"] == {"server": "10.20.1.14", "path": "/imagenet", "readOnly": True}
    assert volume["capacity"] == {"storage": "500Gi"}
    assert volume["persistentVolumeReclaimPolicy"] == "Retain"


@pytest.mark.parametrize(("mode", "access", "read_only"), [("ro", "ReadOnlyMany", True), ("rw", "ReadWriteMany", None)])
def test_the_mode_sets_access_and_read_only(mode, access, read_only):
    _site, manifests = lab_with(data_set("scratch", mode=mode))
    volume = of_kind(manifests, "PersistentVolume")["research.scratch"]["spec"]
    claim = of_kind(manifests, "PersistentVolumeClaim")["scratch"]["spec"]
    assert volume["accessModes"] == claim["accessModes"] == [access]
    assert volume["nfs"].get("readOnly") is read_only


@pytest.mark.parametrize(("storage", "options"), [
    (StoragePlacement(nfs_server="ganesha"), ["nfsvers=4.1", "hard"]),
    (StoragePlacement(nfs_server="kernel", nfs_rdma=False), ["nfsvers=4.1", "hard"]),
    (StoragePlacement(nfs_server="kernel", nfs_rdma=True), ["nfsvers=4.1", "hard", "proto=rdma", "port=20049"]),
])
def test_rdma_mount_options_only_where_the_server_serves_nfs_over_rdma(storage, options):
    _site, manifests = lab_with(data_set("imagenet"), storage=storage)
    assert of_kind(manifests, "PersistentVolume")["research.imagenet"]["spec"]["mountOptions"] == options


def test_two_tenants_data_sets_of_one_name_do_not_collide():
    _site, manifests = lab_with(data_set("shared", tenant="research"), data_set("shared", tenant="inference"))
    volumes = [m for m in manifests if m["kind"] == "PersistentVolume"]
    claims = [m for m in manifests if m["kind"] == "PersistentVolumeClaim"]
    assert sorted(v["metadata"]["name"] for v in volumes) == ["inference.shared", "research.shared"]
    assert sorted((c["metadata"]["namespace"], c["spec"]["volumeName"]) for c in claims) == [
        ("inference", "inference.shared"), ("research", "research.shared")]


def test_a_dot_keeps_hyphenated_names_apart():
    """`a-b` + `c` and `a` + `b-c` would both be `a-b-c` with a hyphen; no name may hold a dot."""
    assert volume_name(data_set("c", tenant="a-b")) != volume_name(data_set("b-c", tenant="a"))


def test_a_claim_requests_the_least_so_a_size_change_only_moves_the_volume():
    """A bound claim's request cannot change without an expanding StorageClass (kube-apiserver refuses it)."""
    _site, small = lab_with(data_set("imagenet", size_gb=10))
    _site, large = lab_with(data_set("imagenet", size_gb=900))
    assert of_kind(small, "PersistentVolumeClaim") == of_kind(large, "PersistentVolumeClaim")
    assert of_kind(large, "PersistentVolumeClaim")["imagenet"]["spec"]["resources"] == {
        "requests": {"storage": CLAIM_REQUEST}}
    assert of_kind(large, "PersistentVolume")["research.imagenet"]["spec"]["capacity"] == {"storage": "900Gi"}


def test_the_claim_comes_after_its_tenant_namespace():
    _site, manifests = lab_with(data_set("imagenet", tenant="inference"))
    order = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    assert order.index(("Namespace", "inference")) < order.index(("PersistentVolumeClaim", "imagenet"))


def test_a_data_set_of_no_platform_tenant_gets_no_volume():
    """validate refuses it (rackform.checks.storage); the platform renders nothing half-made meanwhile."""
    _site, manifests = lab_with(data_set("orphan", tenant="nobody"))
    assert of_kind(manifests, "PersistentVolume") == of_kind(manifests, "PersistentVolumeClaim") == {}


@pytest.mark.parametrize("storage", [StoragePlacement(nfs_server="ganesha"), StoragePlacement(nfs_server="kernel")])
def test_volumes_and_claims_validate_strictly(storage):
    site, manifests = lab_with(data_set("imagenet"), data_set("scratch", mode="rw"), storage=storage)
    found = [m for m in manifests if m["kind"] in ("PersistentVolume", "PersistentVolumeClaim")]
    assert len(found) == 4
    assert [p for m in found for p in problems(m, site.kubernetes.version)] == []


def test_the_shipped_lab_data_sets_are_rendered_in_the_tenant_file():
    site = load_site("lab", REPO)
    assert site.data_sets, "the lab's site file declares data sets"
    files = platform_files(site)
    tenant_file = [obj for obj in yaml.safe_load_all(files["platform/manifests/tenant-research.yaml"]) if obj]
    volumes = {obj["metadata"]["name"] for obj in tenant_file if obj["kind"] == "PersistentVolume"}
    claims = {obj["metadata"]["name"] for obj in tenant_file if obj["kind"] == "PersistentVolumeClaim"}
    research = [d for d in site.data_sets if d.tenant == "research"]
    assert volumes == {f"research.{d.name}" for d in research} and claims == {d.name for d in research}
    assert not any(path.endswith(("persistentvolumes.yaml", "storage-classes.yaml")) for path in files)


# ---------------------------------------------------------------- the claims' protection


ADMISSION_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def claim_policies(manifests: list[dict]) -> list[dict]:
    """The claims' policy and binding (the tenants' own policies, rackform.k8s.tenant_admission, are
    beside them: tests/unit/test_tenant_hardening.py)."""
    return [m for m in manifests if m["kind"] in ADMISSION_KINDS and m["metadata"]["name"] == CLAIM_PROTECTION]


def protection(manifests: list[dict]) -> tuple[dict, dict]:
    policy, binding = claim_policies(manifests)
    assert (policy["kind"], binding["kind"]) == ADMISSION_KINDS
    return policy, binding


def test_one_policy_denies_for_every_data_set_claim_of_the_site():
    _site, manifests = lab_with(data_set("imagenet"), data_set("shared", tenant="inference"))
    policy, binding = protection(manifests)
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == CLAIM_PROTECTION
    assert binding["spec"] == {"policyName": CLAIM_PROTECTION, "validationActions": ["Deny"]}
    assert "namespace" not in policy["metadata"] and "namespace" not in binding["metadata"]  # cluster-scoped


def test_a_site_without_data_sets_gets_no_policy():
    """It applies what it did before data sets; the policy comes with the first claim."""
    _site, manifests = lab_with()
    assert claim_policies(manifests) == []
    _site, manifests = lab_with(data_set("orphan", tenant="nobody"))  # no claim rendered: no policy either
    assert claim_policies(manifests) == []


def test_the_policy_selects_the_claims_the_platform_renders_and_only_update_and_delete():
    """Creating claims stays free (tenants make their own; GitOps tools apply the platform's)."""
    _site, manifests = lab_with(data_set("imagenet"))
    constraints = protection(manifests)[0]["spec"]["matchConstraints"]
    assert constraints["resourceRules"] == [{"apiGroups": [""], "apiVersions": ["v1"],
                                             "operations": ["UPDATE", "DELETE"],
                                             "resources": ["persistentvolumeclaims"]}]
    assert constraints["objectSelector"] == {"matchExpressions": [{"key": DATA_SET_LABEL, "operator": "Exists"}]}
    claim = of_kind(manifests, "PersistentVolumeClaim")["imagenet"]
    assert claim["metadata"]["labels"][DATA_SET_LABEL] == "imagenet"


def test_the_platform_and_the_control_plane_s_controllers_are_let_through():
    """kubectl with kubeadm's admin.conf (group kubeadm:cluster-admins) or super-admin.conf
    (system:masters) applies the platform; the namespace controller deletes a pruned tenant's
    claims under a kube-system service account."""
    _site, manifests = lab_with(data_set("imagenet"))
    conditions = {c["name"]: c["expression"] for c in protection(manifests)[0]["spec"]["matchConditions"]}
    assert PLATFORM_GROUPS == ("system:masters", "kubeadm:cluster-admins")
    assert all(f"'{group}'" in conditions["not-the-platform"] for group in PLATFORM_GROUPS)
    assert conditions["not-the-controller-manager"] == f"request.userInfo.username != '{CONTROLLER_MANAGER}'"
    assert conditions["not-a-kube-system-controller"] == (
        f"!request.userInfo.username.startsWith('{KUBE_SYSTEM_SERVICE_ACCOUNTS}')")


def test_deleting_is_refused_with_the_data_set_s_name_and_the_label_may_not_go():
    _site, manifests = lab_with(data_set("imagenet"))
    spec = protection(manifests)[0]["spec"]
    (variable,) = spec["variables"]
    assert variable["name"] == "dataSet" and f"oldObject.metadata.labels['{DATA_SET_LABEL}']" in variable["expression"]
    delete, label = spec["validations"]
    assert delete["expression"] == "request.operation != 'DELETE'" and delete["reason"] == "Forbidden"
    assert delete["messageExpression"].startswith("'the claim of data set ' + variables.dataSet + ")
    assert "belongs to the platform (rackform)" in delete["messageExpression"]
    assert label["expression"].startswith("request.operation != 'UPDATE' || variables.dataSet == '' || ")
    assert f"object.metadata.labels['{DATA_SET_LABEL}']" in label["expression"]
    assert spec["failurePolicy"] == "Fail"


def claim_request(operation: str, user: str, groups: tuple[str, ...] = ("system:authenticated",),
                  labels_after: dict | None = None) -> Request:
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "imagenet", "namespace": "research", "labels": {DATA_SET_LABEL: "imagenet"}}}
    after = None if operation == "DELETE" else {**claim, "metadata": {**claim["metadata"], "labels": labels_after}}
    return Request(operation, "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", "research", after, user,
                   groups, old_object=claim)


def test_the_policy_s_decisions_as_the_api_server_makes_them():
    _site, manifests = lab_with(data_set("imagenet"))
    policy = protection(manifests)[0]
    deleted, unlabelled, relabelled, edited, by_admin, by_namespace_controller = decide(
        policy,
        claim_request("DELETE", "alice"),
        claim_request("UPDATE", "alice", labels_after={}),
        claim_request("UPDATE", "alice", labels_after={DATA_SET_LABEL: "other"}),
        claim_request("UPDATE", "alice", labels_after={DATA_SET_LABEL: "imagenet", "team": "vision"}),
        claim_request("DELETE", "kubernetes-admin", ("kubeadm:cluster-admins", "system:authenticated")),
        claim_request("DELETE", f"{KUBE_SYSTEM_SERVICE_ACCOUNTS}namespace-controller"))
    assert deleted.denied and deleted.messages == [
        "the claim of data set imagenet belongs to the platform (rackform): take the data set out of the site "
        "design, then a cluster admin deletes the claim"]
    assert [decision.errors for decision in (deleted, unlabelled, relabelled, edited)] == [[], [], [], []]
    assert unlabelled.denied and relabelled.denied and not edited.denied
    assert unlabelled.messages[0].startswith(f"the label {DATA_SET_LABEL} on the claim of data set imagenet")
    assert (by_admin.matched, by_namespace_controller.matched) == (False, False)


def test_the_policy_and_binding_validate_strictly():
    site, manifests = lab_with(data_set("imagenet"))
    found = claim_policies(manifests)
    assert len(found) == 2
    assert [p for m in found for p in problems(m, site.kubernetes.version)] == []


def test_the_policy_has_its_own_file_before_the_tenants_in_render_and_gitops():
    site = load_site("lab", REPO)
    for files, folder in ((platform_files(site), "platform/manifests"),
                          (gitops_files(site, "https://git.example.com/site.git", "main"), "manifests")):
        (kustomization,) = yaml.safe_load_all(files[f"{folder}/kustomization.yaml"])
        resources = kustomization["resources"]
        assert resources.index("admission-policies.yaml") < min(
            resources.index(name) for name in resources if name.startswith("tenant-"))
        found = [obj for obj in yaml.safe_load_all(files[f"{folder}/admission-policies.yaml"]) if obj]
        assert [obj["kind"] for obj in found if obj["metadata"]["name"] == CLAIM_PROTECTION] == list(ADMISSION_KINDS)


# ---------------------------------------------------------------- the storage network


def test_the_storage_network_is_the_storage_fabric_where_the_site_has_one():
    assert storage_network(load_site("lab", REPO)).purpose == "compute_fabric"
    reference = load_site("reference", REPO)
    assert storage_network(reference).prefix == IPv4Network("10.30.0.0/16")
    assert serving_address(reference, reference.hosts["stor-1"]) == IPv4Interface("10.30.1.41/24")


def test_storage_addresses_are_the_ports_on_that_network_sorted_by_port():
    site = load_site("lab", REPO)
    host = site.hosts["stor-1"]
    host.fabric_addresses = {"fab1": IPv4Interface("10.20.2.14/24"), "fab0": IPv4Interface("10.20.1.14/24"),
                             "fab9": IPv4Interface("192.0.2.1/24")}
    assert list(storage_addresses(site, host).items()) == [
        ("fab0", IPv4Interface("10.20.1.14/24")), ("fab1", IPv4Interface("10.20.2.14/24"))]
    assert serving_address(site, host) == IPv4Interface("10.20.1.14/24")


# ---------------------------------------------------------------- storage classes


def test_a_storage_class_the_design_names_is_rendered_with_its_parameters(lab_files):
    lab_files.edit(LAB_PLATFORM, "versions: {}", "versions: {}\n  storage_classes:\n"
                   "    - {name: nvme-fast, provisioner: nvmeof.example.com, parameters: {transport: rdma, replicas: 2},"
                   " reclaim_policy: Retain, default: true}")
    site = lab_files.load()
    (storage_class,) = storage_classes(load_platform(site))
    assert storage_class == {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "nvme-fast", "labels": {"app.kubernetes.io/managed-by": "rackform"},
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "nvmeof.example.com", "parameters": {"transport": "rdma", "replicas": "2"},
        "reclaimPolicy": "Retain", "volumeBindingMode": "WaitForFirstConsumer"}
    assert problems(storage_class, site.kubernetes.version) == []
    assert "platform/manifests/storage-classes.yaml" in platform_files(site)


def test_the_removed_nfs_export_key_says_what_replaces_it(lab_files):
    lab_files.edit(LAB_PLATFORM, "versions: {}", "versions: {}\n  nfs_export: /export/models")
    with pytest.raises(SourceError) as raised:
        load_platform(lab_files.load())
    assert (raised.value.loc.path, raised.value.loc.line, raised.value.key) == (LAB_PLATFORM, 6, "platform.nfs_export")
    assert "data_sets:" in raised.value.message and "storage_classes:" in raised.value.message


def test_all_flash_storage_hosts_without_a_class_are_warned_about_at_their_line():
    campus = load_site("campus", REPO)
    findings = list(platform_storage_classes(campus))
    flash = sorted((h for h in campus.hosts.values() if h.role == "storage" and h.block.name == "flash-hybrid"),
                   key=lambda h: h.name)
    assert flash and [(f.severity, f.loc) for f in findings] == [("warning", h.loc) for h in flash]
    assert all("CSI driver" in f.message and "storage_classes" in f.message for f in findings)


def test_no_warning_once_the_design_names_a_class_or_for_capacity_hosts(lab_files):
    assert list(platform_storage_classes(load_site("lab", REPO))) == []  # stor-1 is a Stor XL (HDD)
    lab_files.edit_site("block: stor-xl", "block: flash-hybrid")
    assert [f.severity for f in platform_storage_classes(lab_files.load())] == ["warning"]
    lab_files.edit(LAB_PLATFORM, "versions: {}", "versions: {}\n  storage_classes: [{name: fast, provisioner: a.b}]")
    assert list(platform_storage_classes(lab_files.load())) == []

