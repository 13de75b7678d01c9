"""`GpuPlatform`: the GPU platform on a bootstrapped cluster, as pulumi-kubernetes resources.

    GpuPlatform lab-platform
    ├── Provider lab-platform-k8s        (kubeconfig: a secret Output of the bootstrap)
    ├── Namespace / StorageClass / ConfigMap / tenant objects (rackform.k8s.manifests)
    └── Release kube-prometheus-stack, network-operator, gpu-operator, training-operator

Everything depends on `after` (the kubernetes-stage Playbook): nothing talks to the
API server before kubeadm has made one. The objects are the dicts that
rackform.k8s.manifests renders and the releases are `helm_releases`: the same data
`rackform render` writes under build/<site>/platform/, so the CLI and Pulumi paths
install the same thing. Each Release has its stable Helm name, the site's chart
repository and depends on the releases it needs (the GPU Operator's ServiceMonitor
needs kube-prometheus-stack's CRDs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from rackform.k8s.manifests import HelmRelease, Manifest, helm_releases, platform_manifests
from rackform.k8s.platform import PlatformDesign
from rackform.k8s.versions import Matrix
from rackform.model.site import Site

# kind -> (resource class, top-level fields besides metadata)
RESOURCE_KINDS: dict[str, tuple[type[pulumi.CustomResource], tuple[str, ...]]] = {
    "Namespace": (k8s.core.v1.Namespace, ()),
    "ConfigMap": (k8s.core.v1.ConfigMap, ("data",)),
    "ResourceQuota": (k8s.core.v1.ResourceQuota, ("spec",)),
    "StorageClass": (k8s.storage.v1.StorageClass,
                     ("provisioner", "parameters", "reclaim_policy", "volume_binding_mode",
                      "allow_volume_expansion", "mount_options")),
    "Role": (k8s.rbac.v1.Role, ("rules",)),
    "RoleBinding": (k8s.rbac.v1.RoleBinding, ("role_ref", "subjects")),
    "NetworkPolicy": (k8s.networking.v1.NetworkPolicy, ("spec",)),
}
CUSTOM_KINDS = {"NetworkAttachmentDefinition"}
"""Custom resources the platform creates itself (their CRD comes with the kubernetes stage)."""


@dataclass(frozen=True, slots=True)
class GpuPlatformArgs:
    site: Site
    design: PlatformDesign
    matrix: Matrix
    kubeconfig: pulumi.Input[str]
    """The cluster's admin kubeconfig: a secret Output of the bootstrap."""
    after: Sequence[pulumi.Resource]
    """The bootstrap (the kubernetes-stage Playbook)."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def resource_name(manifest: Manifest) -> str:
    meta = manifest["metadata"]
    return "-".join(filter(None, (manifest["kind"].lower(), meta.get("namespace"), meta["name"])))


class GpuPlatform(pulumi.ComponentResource):
    """GPU Operator, Network Operator, training operator, monitoring, storage classes, tenants."""

    def __init__(self, name: str, args: GpuPlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rackform:index:GpuPlatform", name, None, opts)
        after = list(args.after)
        self.kubeconfig = pulumi.Output.secret(args.kubeconfig)
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig,
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )
        self._after = after
        manifests = platform_manifests(args.site, args.design, args.matrix)
        namespaces = [m for m in manifests if m["kind"] == "Namespace"]
        self.namespaces = {m["metadata"]["name"]: self._object(name, m, []) for m in namespaces}
        self.objects = {
            resource_name(m): self._object(name, m, self._namespace_of(m)) for m in manifests if m["kind"] != "Namespace"
        }
        self.releases: dict[str, k8s.helm.v3.Release] = {}
        installed: dict[str, k8s.helm.v3.Release] = {}
        for release in helm_releases(args.site, args.design, args.matrix):  # install order: needs come first
            installed[release.name] = self._release(name, release, [installed[need] for need in release.needs])
            self.releases[release.component] = installed[release.name]
        self.register_outputs({"releases": {c: r.version for c, r in self.releases.items()},
                               "objects": len(self.namespaces) + len(self.objects)})

    def resource_count(self) -> int:
        """This component, its provider and everything it creates."""
        return 2 + len(self.namespaces) + len(self.objects) + len(self.releases)

    def _opts(self, depends_on: list[pulumi.Resource]) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[*self._after, *depends_on])

    def _namespace_of(self, manifest: Manifest) -> list[pulumi.Resource]:
        ns = manifest["metadata"].get("namespace")
        return [self.namespaces[ns]] if ns in self.namespaces else []

    def _object(self, name: str, manifest: Manifest, depends_on: list[pulumi.Resource]) -> pulumi.CustomResource:
        if manifest["kind"] in CUSTOM_KINDS:
            return k8s.apiextensions.CustomResource(
                f"{name}-{resource_name(manifest)}", api_version=manifest["apiVersion"], kind=manifest["kind"],
                metadata=manifest["metadata"], spec=manifest["spec"], opts=self._opts(depends_on))
        cls, fields = RESOURCE_KINDS[manifest["kind"]]
        inputs = {field: manifest[_camel(field)] for field in fields if _camel(field) in manifest}
        return cls(f"{name}-{resource_name(manifest)}", metadata=manifest["metadata"], **inputs,
                   opts=self._opts(depends_on))

    def _release(self, name: str, release: HelmRelease, needs: list[k8s.helm.v3.Release]) -> k8s.helm.v3.Release:
        return k8s.helm.v3.Release(
            f"{name}-{release.name}",
            k8s.helm.v3.ReleaseArgs(
                name=release.name, chart=release.chart_name, version=release.version,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=release.repository),
                namespace=release.namespace, create_namespace=False, values=release.values,
                atomic=True, timeout=release.timeout_s,
            ),
            opts=self._opts([self.namespaces[release.namespace], *needs]),
        )
