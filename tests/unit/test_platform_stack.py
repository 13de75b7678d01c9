"""The GPU platform component under Pulumi's mocks: what it creates, its dependency on
the bootstrap, the kubeconfig kept secret, and every object it sends to the API server
valid for the site's Kubernetes version (kubernetes-validate --strict)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import kubernetes_validate
import pulumi
import pytest
from pulumi.runtime.mocks import MockMonitor

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from components.platform import GpuPlatform, GpuPlatformArgs  # noqa: E402
from providers.playbook import Playbook, PlaybookArgs  # noqa: E402

from rackform.k8s.manifests import PLATFORM_COMPONENTS  # noqa: E402
from rackform.k8s.platform import load_platform  # noqa: E402
from rackform.k8s.versions import load_matrix  # noqa: E402
from rackform.model.loader import load_site  # noqa: E402

KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\n"
PLAIN_KINDS = {"Namespace", "ConfigMap", "ResourceQuota", "StorageClass", "Role", "RoleBinding", "NetworkPolicy"}


class Recorder(MockMonitor):
    def __init__(self, mocks):
        super().__init__(mocks)
        self.registered: list[dict] = []

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        state = self.resources[response.urn].state if response.urn in self.resources else {}
        self.registered.append({"type": request.type, "name": request.name, "inputs": state,
                                "dependencies": [urn.rsplit("::", 1)[-1] for urn in request.dependencies]})
        return response


class EchoMocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args):
        return {}, None


class Built:
    def __init__(self):
        self.monitor: Recorder | None = None
        self.kubeconfig_secret: bool | None = None
        self.platform: GpuPlatform | None = None


@pytest.fixture(scope="module")
def built() -> Built:
    result = Built()
    result.monitor = Recorder(EchoMocks())
    asyncio.set_event_loop(asyncio.new_event_loop())
    pulumi.runtime.settings.ROOT.set(None)
    pulumi.runtime.set_all_config({})
    pulumi.runtime.set_mocks(result.monitor.mocks, project="rackform", stack="lab", preview=False,
                             monitor=result.monitor)
    site = load_site("lab", REPO)

    @pulumi.runtime.test
    def program():
        bootstrap = Playbook("lab-kubernetes", PlaybookArgs(site="lab", stage="kubernetes", root=str(REPO),
                                                             digest="sha256:kubernetes"))
        args = GpuPlatformArgs(site=site, design=load_platform(site), matrix=load_matrix(REPO),
                               kubeconfig=pulumi.Output.secret(KUBECONFIG), after=[bootstrap])
        result.platform = GpuPlatform("lab-platform", args)
        return pulumi.Output.from_input(result.platform.kubeconfig.is_secret()).apply(
            lambda secret: setattr(result, "kubeconfig_secret", secret))

    program()
    return result


def registered(built: Built, type_prefix: str) -> list[dict]:
    return [r for r in built.monitor.registered if r["type"].startswith(type_prefix)]


def test_one_helm_release_per_platform_component(built):
    charts = sorted(r["inputs"]["chart"] for r in registered(built, "kubernetes:helm.sh/v3:Release"))
    matrix = load_matrix(REPO)
    assert charts == sorted(matrix.components[name].chart for name in PLATFORM_COMPONENTS)


def test_helm_releases_pin_the_matrix_versions(built):
    matrix = load_matrix(REPO)
    pinned = {r["inputs"]["chart"]: r["inputs"]["version"] for r in registered(built, "kubernetes:helm.sh/v3:Release")}
    assert pinned == {matrix.components[n].chart: matrix.components[n].default for n in PLATFORM_COMPONENTS}


def test_gpu_operator_release_enables_driver_toolkit_device_plugin_and_dcgm(built):
    release = next(r for r in registered(built, "kubernetes:helm.sh/v3:Release") if r["name"].endswith("gpu-operator"))
    values = release["inputs"]["values"]
    assert [values[key]["enabled"] for key in ("driver", "toolkit", "devicePlugin", "dcgmExporter")] == [True] * 4


def test_the_provider_depends_on_the_bootstrap(built):
    provider = next(r for r in built.monitor.registered if r["type"] == "pulumi:providers:kubernetes")
    assert "lab-kubernetes" in provider["dependencies"]


def test_every_platform_resource_depends_on_the_bootstrap(built):
    resources = [r for r in built.monitor.registered if r["type"].startswith("kubernetes:")]
    assert resources and [r["name"] for r in resources if "lab-kubernetes" not in r["dependencies"]] == []


def test_the_kubeconfig_stays_secret(built):
    assert built.kubeconfig_secret is True


def test_namespaced_objects_depend_on_their_namespace(built):
    quota = next(r for r in registered(built, "kubernetes:core/v1:ResourceQuota") if "research" in r["name"])
    assert "lab-platform-namespace-research" in quota["dependencies"]


def test_each_tenant_gets_namespace_quota_role_binding_and_default_deny(built):
    kinds = {r["type"].split(":")[-1] for r in built.monitor.registered if "-research-" in r["name"] + "-"}
    assert kinds >= {"Namespace", "ResourceQuota", "Role", "RoleBinding", "NetworkPolicy"}


def _as_manifest(registration: dict) -> dict:
    return {key: value for key, value in registration["inputs"].items()}


def test_every_object_sent_validates_strictly_for_the_site_kubernetes_version(built):
    version = load_site("lab", REPO).kubernetes.version
    objects = [_as_manifest(r) for r in built.monitor.registered if r["type"].split(":")[-1] in PLAIN_KINDS]
    assert len(objects) >= 10
    failures = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            failures.append(f"{obj['kind']} {obj['metadata']['name']}: {error.message}")
    assert failures == []
