"""The platform stage under Pulumi's mocks, built the way the program builds it (SiteCluster
with the real stage digests): one Playbook applies build/<site>/platform/ as `rackform deploy`
does, and pulumi-kubernetes holds only the protected namespaces.

What the engine receives is read from the mock monitor's RegisterResource requests: the
inputs, the dependencies, and the `protect` / `retainOnDelete` flags the engine enforces on
`pulumi destroy`. The engine's enforcement itself cannot run here (no Pulumi CLI): these tests
show the flags reach it, not that it honours them.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pulumi
import pytest
from google.protobuf import json_format
from platform_validation import problems
from pulumi.runtime.mocks import MockMonitor

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from components.platform import cluster_identifier  # noqa: E402
from components.site import SiteCluster, SiteClusterArgs  # noqa: E402
from components.stages import stage_digests  # noqa: E402

from rackform.k8s.manifests import component_namespace, installed_components, tenant_namespace  # noqa: E402
from rackform.k8s.platform import load_platform  # noqa: E402
from rackform.k8s.versions import load_matrix  # noqa: E402
from rackform.pipeline import load_and_check  # noqa: E402
from rackform.render.project import render_files  # noqa: E402
from rackform.k8s.manifests import FIELD_MANAGER, PULUMI_FIELD_MANAGER  # noqa: E402

KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\n"
SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")
"""How the Pulumi SDK marks a secret value in a RegisterResource request (rpc._special_secret_sig)."""
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
"""How the Pulumi SDK sends an unknown value (rpc.UNKNOWN)."""
PLAYBOOK = "pulumi-python:dynamic/rackform:Playbook"
NAMESPACE = "kubernetes:core/v1:Namespace"
PROVIDER = "pulumi:providers:kubernetes"


class Recorder(MockMonitor):
    def __init__(self, mocks):
        super().__init__(mocks)
        self.registered: list[dict] = []

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        state = self.resources[response.urn].state if response.urn in self.resources else {}
        self.registered.append({
            "type": request.type, "name": request.name, "parent": request.parent.rsplit("::", 1)[-1],
            "inputs": state, "sent": json_format.MessageToDict(request.object),
            "dependencies": [urn.rsplit("::", 1)[-1] for urn in request.dependencies],
            "provider": request.provider.rsplit("::", 1)[0].rsplit("::", 1)[-1],  # "<urn>::<id>"
            "protect": request.HasField("protect") and request.protect,
            "retain_on_delete": request.HasField("retainOnDelete") and request.retainOnDelete,
        })
        return response

    def named(self, name: str) -> dict:
        return next(r for r in self.registered if r["name"] == name)

    def by_type(self, type_: str) -> list[dict]:
        return [r for r in self.registered if r["type"] == type_]


class StageMocks(pulumi.runtime.Mocks):
    """Echo the inputs; the kubernetes stage reports `kubeconfig` (None: unknown in a preview)."""

    def __init__(self, kubeconfig: str | None):
        self.kubeconfig = kubeconfig

    def new_resource(self, args):
        outputs = dict(args.inputs)
        if args.typ == PLAYBOOK:
            outputs["failed_hosts"] = []
            outputs.pop("kubeconfig", None)
            if self.kubeconfig is not None and args.inputs.get("stage") == "kubernetes":
                outputs["kubeconfig"] = self.kubeconfig
        return f"{args.name}-id", outputs

    def call(self, args):
        return {}, None


def build(*, preview: bool, kubeconfig: str | None) -> Recorder:
    monitor = Recorder(StageMocks(kubeconfig))
    asyncio.set_event_loop(asyncio.new_event_loop())
    pulumi.runtime.settings.ROOT.set(None)
    pulumi.runtime.set_all_config({})
    pulumi.runtime.set_mocks(monitor.mocks, project="rackform", stack="lab", preview=preview, monitor=monitor)
    site, _ = load_and_check("lab", REPO)

    @pulumi.runtime.test
    def program():
        SiteCluster(site.name, SiteClusterArgs(site=site, root=str(REPO), stage_digests=stage_digests(site),
                                               bare_metal_nodes=False))

    program()
    return monitor


@pytest.fixture(scope="module")
def up() -> Recorder:
    """`pulumi up` after the kubernetes stage fetched a kubeconfig."""
    return build(preview=False, kubeconfig=KUBECONFIG)


@pytest.fixture(scope="module")
def preview() -> Recorder:
    """`pulumi preview` of a new site: the kubernetes stage pending, its kubeconfig unknown."""
    return build(preview=True, kubeconfig=None)


def rendered_namespaces() -> dict[str, dict]:
    site, _ = load_and_check("lab", REPO)
    design, matrix = load_platform(site), load_matrix(REPO)
    manifests = [*(component_namespace(name, matrix) for name in installed_components(design)),
                 *(tenant_namespace(tenant) for tenant in design.tenants)]
    return {m["metadata"]["name"]: m for m in manifests}


def platform_children(monitor: Recorder) -> list[dict]:
    return [r for r in monitor.registered if r["parent"] == "lab-platform"]


# ---------------------------------------------------------------- one apply, the CLI's


def test_the_platform_stage_is_a_playbook_of_the_platform_stage_with_the_clis_digest(up):
    """The digest `rackform deploy` records for the platform (rackform.pipeline.stage_digests)."""
    site, _ = load_and_check("lab", REPO)
    from rackform.pipeline import stage_digests as recorded_digests

    apply = up.named("lab-platform-apply")
    assert (apply["type"], apply["parent"]) == (PLAYBOOK, "lab-platform")
    assert {key: apply["inputs"][key] for key in ("site", "stage", "root", "digest")} == {
        "site": "lab", "stage": "platform", "root": str(REPO),
        "digest": recorded_digests(render_files(site))["platform"]}


def test_the_platform_contains_a_provider_its_namespaces_and_the_playbook_only(up):
    kinds = sorted({r["type"] for r in platform_children(up)})
    assert kinds == sorted([PROVIDER, NAMESPACE, PLAYBOOK])


def test_no_helm_release_nor_other_kubernetes_object_is_a_pulumi_resource(up):
    """helm and kubectl, driven by the platform Playbook, install them: one owner per object."""
    assert [r["name"] for r in up.registered if r["type"].startswith("kubernetes:") and r["type"] != NAMESPACE] == []


def test_the_platform_playbook_waits_for_the_bootstrap_and_every_namespace(up):
    namespaces = {r["name"] for r in up.by_type(NAMESPACE)}
    assert set(up.named("lab-platform-apply")["dependencies"]) == {"lab-kubernetes"} | namespaces


def test_verify_waits_for_the_platform_playbook(up):
    assert up.named("lab-verify")["dependencies"] == ["lab-platform-apply"]


def test_the_platform_playbook_takes_the_hosts_lost_before_it(up):
    """Its left_out is the kubernetes stage's failed_hosts, as `rackform deploy` carries them."""
    assert up.named("lab-platform-apply")["inputs"]["left_out"] == []
    assert up.named("lab-platform-apply")["inputs"]["last"] is False


# ---------------------------------------------------------------- the protected namespaces


def test_the_namespaces_are_exactly_the_installed_components_and_tenants(up):
    assert {r["inputs"]["metadata"]["name"] for r in up.by_type(NAMESPACE)} == set(rendered_namespaces())


def test_each_namespace_is_the_rendered_one_with_the_clis_field_manager(up):
    """The very objects platform/manifests/ holds (kubectl applies those), whose annotation gives
    pulumi-kubernetes the same Server-Side Apply field manager as kubectl's."""
    rendered = rendered_namespaces()
    for r in up.by_type(NAMESPACE):
        metadata = dict(r["inputs"]["metadata"])
        assert metadata["annotations"][PULUMI_FIELD_MANAGER] == FIELD_MANAGER == "rackform"
        assert metadata == rendered[metadata["name"]]["metadata"]


def test_a_loosened_tenant_keeps_its_pod_security_reason(lab_files):
    """The tenant's own annotation travels beside the field manager's."""
    from components.platform import platform_namespaces

    lab_files.edit("topologies/platform/lab.yaml", "{name: inference, gpus: 4, borrow: 0, admins: [carol]}",
                   "{name: inference, gpus: 4, borrow: 0, admins: [carol], "
                   "pod_security: {level: baseline, reason: device plugin debugging}}")
    site = lab_files.load()
    design = load_platform(site)
    sent = {m["metadata"]["name"]: m for m in platform_namespaces(design, load_matrix(REPO))}
    assert sent["inference"]["metadata"]["annotations"] == {
        "rackform.io/pod-security-reason": "device plugin debugging", PULUMI_FIELD_MANAGER: FIELD_MANAGER}


def test_every_namespace_sent_validates_strictly_for_the_site_kubernetes_version(up):
    version = load_and_check("lab", REPO)[0].kubernetes.version
    sent = [dict(r["inputs"]) for r in up.by_type(NAMESPACE)]
    assert sent and {(o["apiVersion"], o["kind"]) for o in sent} == {("v1", "Namespace")}
    assert [problem for obj in sent for problem in problems(obj, version)] == []


def test_the_namespaces_go_through_the_platform_provider(up):
    assert {r["provider"] for r in up.by_type(NAMESPACE)} == {"lab-platform-k8s"}


# ---------------------------------------------------------------- pulumi destroy


def test_destroy_stops_at_the_namespaces_and_the_platform_playbook(up):
    """`protect` reaches the engine for each namespace and the platform Playbook: `pulumi destroy`
    (and an up that would delete one: a tenant taken out of the design) refuses to delete them."""
    protected = {r["name"] for r in up.registered if r["protect"]}
    assert protected == {r["name"] for r in up.by_type(NAMESPACE)} | {"lab-platform-apply"}


def test_an_unprotected_delete_only_forgets_them(up):
    """`retainOnDelete`: after `pulumi state unprotect`, deleting one leaves the namespace (and its
    workloads) and the applied platform on the cluster; the Playbook's own delete does nothing."""
    for r in [*up.by_type(NAMESPACE), up.named("lab-platform-apply")]:
        assert r["retain_on_delete"], r["name"]


def test_the_other_stages_are_retained_but_not_protected(up):
    stages = [r for r in up.by_type(PLAYBOOK) if r["name"] != "lab-platform-apply"]
    assert stages and all(r["retain_on_delete"] and not r["protect"] for r in stages)


# ---------------------------------------------------------------- the provider and the kubeconfig


def is_secret(sent: object) -> bool:
    return isinstance(sent, dict) and sent.get(SECRET_SIG[0]) == SECRET_SIG[1]


def test_the_provider_gets_the_kubeconfig_as_a_secret(up):
    sent = up.named("lab-platform-k8s")["sent"]["kubeconfig"]
    assert (is_secret(sent), sent.get("value")) == (True, KUBECONFIG)


def test_the_provider_has_a_stable_cluster_identifier_ssa_and_adopts_existing_namespaces(up):
    sent = up.named("lab-platform-k8s")["sent"]  # a provider's inputs travel as strings
    assert (sent["clusterIdentifier"], sent["enableServerSideApply"], sent["upsertExistingObjects"]) == (
        cluster_identifier("lab"), "true", "true") == ("rackform-lab", "true", "true")


def test_the_provider_depends_on_the_bootstrap(up):
    assert "lab-kubernetes" in up.named("lab-platform-k8s")["dependencies"]


def _has_unknown(value: object) -> bool:
    if isinstance(value, dict):
        return any(_has_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_unknown(v) for v in value)
    return value == UNKNOWN


def test_in_a_preview_with_the_kubeconfig_unknown_only_the_provider_is_unknown(preview):
    """Nothing in the platform but the provider reads the kubeconfig: the namespaces and the
    platform Playbook are fully known, so the engine has no reason to replace them."""
    assert _has_unknown(preview.named("lab-platform-k8s")["sent"]["kubeconfig"])
    assert [r["name"] for r in platform_children(preview)
            if r["type"] != PROVIDER and _has_unknown(r["sent"])] == []


def test_in_that_preview_the_provider_still_has_its_cluster_identifier(preview):
    """pulumi-kubernetes replaces a provider only when clusterIdentifier changes: never for an
    unknown or rotated kubeconfig, so never its namespaces."""
    assert preview.named("lab-platform-k8s")["sent"]["clusterIdentifier"] == "rackform-lab"
