"""The GPU platform component under Pulumi's mocks: what it creates, its dependency on
the bootstrap, the kubeconfig secret where it reaches the Kubernetes provider, Helm
releases with stable names, repositories and order that match the rendered release
files, and every object it sends to the API server valid for the site's Kubernetes
version (kubernetes-validate --strict; custom resources against their CRD schema)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from google.protobuf import json_format
from platform_validation import problems
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
from rackform.render.platform_files import platform_files  # noqa: E402

KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\n"
PLAIN_KINDS = {"Namespace", "ConfigMap", "ResourceQuota", "StorageClass", "Role", "RoleBinding", "NetworkPolicy",
               "NetworkAttachmentDefinition"}
SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")
"""How the Pulumi SDK marks a secret value in a RegisterResource request (rpc._special_secret_sig)."""
RELEASE = "kubernetes:helm.sh/v3:Release"


class Recorder(MockMonitor):
    def __init__(self, mocks):
        super().__init__(mocks)
        self.registered: list[dict] = []

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        state = self.resources[response.urn].state if response.urn in self.resources else {}
        self.registered.append({"type": request.type, "name": request.name, "inputs": state,
                                "sent": json_format.MessageToDict(request.object),
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
        # The control for the secrecy test: a provider given the kubeconfig as a plain string.
        k8s.Provider("control-plain-k8s", kubeconfig=KUBECONFIG)

    program()
    return result


def registered(built: Built, type_prefix: str) -> list[dict]:
    return [r for r in built.monitor.registered if r["type"].startswith(type_prefix)]


def test_one_helm_release_per_platform_component(built):
    charts = sorted(r["inputs"]["chart"] for r in registered(built, RELEASE))
    matrix = load_matrix(REPO)
    assert charts == sorted(matrix.components[name].chart.split("/")[1] for name in PLATFORM_COMPONENTS)


def test_helm_releases_pin_the_matrix_versions(built):
    matrix = load_matrix(REPO)
    pinned = {r["inputs"]["chart"]: r["inputs"]["version"] for r in registered(built, RELEASE)}
    assert pinned == {matrix.components[n].chart.split("/")[1]: matrix.components[n].default for n in PLATFORM_COMPONENTS}


def test_releases_are_the_rendered_release_files(built):
    """One source: what Pulumi installs is what `rackform render` writes for the CLI and GitOps."""
    files = platform_files(load_site("lab", REPO))
    for release in registered(built, RELEASE):
        inputs = release["inputs"]
        record = yaml.safe_load(files[f"platform/helm/{inputs['name']}/release.yaml"])
        values = yaml.safe_load(files[f"platform/helm/{inputs['name']}/values.yaml"])
        assert (inputs["chart"], inputs["repositoryOpts"]["repo"], inputs["version"], inputs["namespace"],
                inputs["values"], inputs["timeout"]) == (record["chart"], record["repository"], record["version"],
                                                         record["namespace"], values, record["timeout_s"])


def test_releases_have_stable_helm_names(built):
    assert {r["name"]: r["inputs"]["name"] for r in registered(built, RELEASE)} == {
        f"lab-platform-{name}": name
        for name in ("kube-prometheus-stack", "network-operator", "gpu-operator", "training-operator")}


def test_the_gpu_operator_waits_for_the_servicemonitor_crd_and_ofed_releases(built):
    gpu = next(r for r in registered(built, RELEASE) if r["name"] == "lab-platform-gpu-operator")
    assert {"lab-platform-kube-prometheus-stack", "lab-platform-network-operator"} <= set(gpu["dependencies"])


def test_gpu_operator_release_enables_driver_toolkit_device_plugin_and_dcgm(built):
    release = next(r for r in registered(built, RELEASE) if r["name"].endswith("gpu-operator"))
    values = release["inputs"]["values"]
    assert [values[key]["enabled"] for key in ("driver", "toolkit", "devicePlugin", "dcgmExporter")] == [True] * 4


def provider(built: Built, name: str) -> dict:
    return next(r for r in built.monitor.registered if r["type"] == "pulumi:providers:kubernetes" and r["name"] == name)


def is_secret(sent: object) -> bool:
    return isinstance(sent, dict) and sent.get(SECRET_SIG[0]) == SECRET_SIG[1]


def test_the_provider_depends_on_the_bootstrap(built):
    assert "lab-kubernetes" in provider(built, "lab-platform-k8s")["dependencies"]


def test_every_platform_resource_depends_on_the_bootstrap(built):
    resources = [r for r in built.monitor.registered if r["type"].startswith("kubernetes:")]
    assert resources and [r["name"] for r in resources if "lab-kubernetes" not in r["dependencies"]] == []


def test_the_kubeconfig_reaches_the_kubernetes_provider_as_a_secret(built):
    """What the engine receives in the provider's RegisterResource request, not our own Output."""
    sent = provider(built, "lab-platform-k8s")["sent"]["kubeconfig"]
    assert (is_secret(sent), sent.get("value")) == (True, KUBECONFIG)


def test_a_plain_kubeconfig_would_be_seen(built):
    """The control: the same check reads a provider given a plain string as not secret."""
    sent = provider(built, "control-plain-k8s")["sent"]["kubeconfig"]
    assert (is_secret(sent), sent) == (False, KUBECONFIG)


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
    assert len(objects) >= 10 and {o["kind"] for o in objects} == PLAIN_KINDS
    assert [problem for obj in objects for problem in problems(obj, version)] == []
