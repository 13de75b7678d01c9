"""`GpuPlatform`: the platform stage under Pulumi: the CLI's one apply, plus protected namespaces.

    GpuPlatform lab-platform
    ├── Provider lab-platform-k8s          (kubeconfig: a secret Output of the bootstrap;
    │                                       cluster_identifier rackform-<site>)
    ├── Namespace lab-platform-namespace-<ns>   (each operator's and each tenant's; protected, retained)
    └── Playbook lab-platform-apply        (stage "platform": kubectl apply -k + helm upgrade --install
                                            + kubectl apply -k after-releases, from build/<site>/platform/)

The platform is applied one way from both front doors: `lab-platform-apply` is the same
dynamic `Playbook` resource as the Ansible stages, so `create`/`update` call
`rackform.run.stages.run_stages` for the `platform` stage, which runs
`rackform.run.platform_apply.apply_platform` exactly as `rackform deploy --stage platform`
does and records the stage in state/<site>.json. It diffs on the platform stage's digest
(`rackform.pipeline.stage_digests`: a hash of the rendered platform/ files).

pulumi-kubernetes is kept for what Pulumi alone adds: the namespaces that hold the
operators and the tenants' workloads, registered `protect` (`pulumi destroy`, or a tenant
taken out of the design, stops at them) and `retain_on_delete` (even an unprotected delete
only forgets them). They are the dicts `rackform.k8s.manifests` renders into
platform/manifests/, applied with the CLI's field manager (`rackform`) so that kubectl
and Pulumi own the same fields instead of fighting over them. The provider has a fixed
`cluster_identifier`: an unknown kubeconfig (a preview while the kubernetes stage is
pending) or a rotated one updates the provider, never replaces it or its namespaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from providers.playbook import Playbook, PlaybookArgs

from rackform.k8s.manifests import Manifest, component_namespace, installed_components, tenant_namespace
from rackform.k8s.platform import PlatformDesign
from rackform.k8s.versions import Matrix
from rackform.model.site import Site

@dataclass(frozen=True, slots=True)
class GpuPlatformArgs:
    site: Site
    design: PlatformDesign
    matrix: Matrix
    kubeconfig: pulumi.Input[str]
    """The cluster's admin kubeconfig: a secret Output of the bootstrap (the provider's only input from it)."""
    apply: PlaybookArgs
    """The platform stage's Playbook inputs (stage "platform", its digest, the hosts lost so far)."""
    after: Sequence[pulumi.Resource]
    """The bootstrap (the kubernetes-stage Playbook) and whatever else the stage waits for."""


def cluster_identifier(site: str) -> str:
    """Stable per site: the provider is replaced only if this changes, never for a new kubeconfig."""
    return f"rackform-{site}"


def platform_namespaces(design: PlatformDesign, matrix: Matrix) -> list[Manifest]:
    """The namespaces Pulumi protects: each installed operator component's, then each tenant's,
    as rackform.k8s.manifests renders them (one per name)."""
    found: dict[str, Manifest] = {}
    for manifest in [*(component_namespace(name, matrix) for name in installed_components(design)),
                     *(tenant_namespace(tenant) for tenant in design.tenants)]:
        found.setdefault(manifest["metadata"]["name"], manifest)
    return list(found.values())


class GpuPlatform(pulumi.ComponentResource):
    """The platform stage: its protected namespaces and the Playbook that applies build/<site>/platform/."""

    def __init__(self, name: str, args: GpuPlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rackform:index:GpuPlatform", name, None, opts)
        after = list(args.after)
        self.kubeconfig = pulumi.Output.secret(args.kubeconfig)
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig, cluster_identifier=cluster_identifier(args.site.name),
            enable_server_side_apply=True, upsert_existing_objects=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )
        self.namespaces: dict[str, k8s.core.v1.Namespace] = {
            manifest["metadata"]["name"]: k8s.core.v1.Namespace(
                f"{name}-namespace-{manifest['metadata']['name']}", metadata=manifest["metadata"],
                opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=after,
                                            protect=True, retain_on_delete=True))
            for manifest in platform_namespaces(args.design, args.matrix)
        }
        self.apply = Playbook(
            f"{name}-apply", args.apply,
            pulumi.ResourceOptions(parent=self, depends_on=[*after, *self.namespaces.values()], protect=True),
        )
        self.register_outputs({"namespaces": sorted(self.namespaces), "digest": self.apply.digest})

    def resource_count(self) -> int:
        """This component, its provider, its namespaces and its Playbook."""
        return 3 + len(self.namespaces)
