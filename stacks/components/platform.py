"""`GpuPlatform`: the platform stage under Pulumi, the CLI's one apply and nothing beside it.

    GpuPlatform lab-platform
    └── Playbook lab-platform-apply   (stage "platform": kubectl apply -k + helm upgrade --install
                                       + kubectl apply -k after-releases, from build/<site>/platform/)

The platform is applied one way from both front doors: `lab-platform-apply` is the same
dynamic `Playbook` resource as the Ansible stages, so `create`/`update` call
`rackform.run.stages.run_stages` for the `platform` stage, which runs
`rackform.run.platform_apply.apply_platform` exactly as `rackform deploy --stage platform`
does and records the stage in state/<site>.json. It diffs on the platform stage's digest
(`rackform.pipeline.stage_digests`: a hash of the rendered platform/ files).

One writer for the platform's namespaces: the operators' and tenants' namespaces are among
the manifests that apply writes (`rackform.k8s.manifests`), and no Pulumi resource writes them
too. Earlier versions also registered them through pulumi-kubernetes; that needed the
`pulumi-resource-kubernetes` plugin, which an air-gapped site cannot download and which cannot
be built from its served Go module, so the stack would stop at it. What the namespaces needed
from Pulumi, that `pulumi destroy` never deletes them, the Playbook gives: it is `protect`ed
(destroy stops at it and names `pulumi state unprotect`, the opt-in) and its delete only
forgets the stage (`retain_on_delete`): namespaces, releases and workloads stay.

The cluster's admin kubeconfig is the component's secret output (the stack exports it), for
users' own stacks that apply their workloads with pulumi-kubernetes through a StackReference
(examples/workloads/).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
from providers.playbook import Playbook, PlaybookArgs

from rackform.model.site import Site


@dataclass(frozen=True, slots=True)
class GpuPlatformArgs:
    site: Site
    kubeconfig: pulumi.Input[str]
    """The cluster's admin kubeconfig: a secret Output of the bootstrap ('' before one was fetched)."""
    apply: PlaybookArgs
    """The platform stage's Playbook inputs (stage "platform", its digest, the hosts lost so far)."""
    after: Sequence[pulumi.Resource]
    """The bootstrap (the kubernetes-stage Playbook) and whatever else the stage waits for."""


class GpuPlatform(pulumi.ComponentResource):
    """The platform stage: the Playbook that applies build/<site>/platform/, and the cluster's kubeconfig."""

    def __init__(self, name: str, args: GpuPlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rackform:index:GpuPlatform", name, None, opts)
        self.kubeconfig = pulumi.Output.secret(args.kubeconfig)
        self.apply = Playbook(
            f"{name}-apply", args.apply,
            pulumi.ResourceOptions(parent=self, depends_on=list(args.after), protect=True),
        )
        self.register_outputs({"digest": self.apply.digest})

    def resource_count(self) -> int:
        """This component and its Playbook."""
        return 2
