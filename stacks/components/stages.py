"""The stage chain: one resource per stage, in `rackform.pipeline.STAGES` order.

Ansible stages are `Playbook`s; the `platform` stage (no playbook) is whatever
`platform` makes from the kubernetes-stage Playbook (the GpuPlatform component).
Each stage depends on the one before (and on what `waits` adds for it), so `pulumi up`
runs them in the pipeline's order. Hosts a stage loses (its `failed_hosts`) are the next
stage's `left_out`, as `rackform deploy` leaves them out; the last stage fails `pulumi
up` when any host failed, and a stage that cannot run to its end stops the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pulumi
from providers.playbook import Playbook, PlaybookArgs

from rackform.model.site import Site
from rackform.pipeline import STAGES, Stage

ANSIBLE_STAGES: tuple[Stage, ...] = tuple(stage for stage in STAGES if stage.playbook)


def stage_digests(site: Site) -> dict[str, str]:
    """Render the site's project once (in memory) and hash what each stage reads: the
    digests `rackform deploy` records (rackform.pipeline.stage_digests)."""
    from rackform.pipeline import stage_digests as digests_of
    from rackform.render.project import render_files

    return digests_of(render_files(site))


def stage_chain(
    name: str,
    site_name: str,
    root: str,
    digests: Mapping[str, str],
    parent: pulumi.Resource,
    platform: Callable[[Playbook], pulumi.Resource] | None = None,
    waits: Mapping[str, Sequence[pulumi.Resource]] | None = None,
) -> dict[str, pulumi.Resource]:
    """Create the stage resources, each depending on the previous one and on `waits[stage]`.

    `platform` gets the Playbook before it (the bootstrap, holding the kubeconfig);
    without it (a site without Kubernetes) the platform stage is left out.
    """
    stages: dict[str, pulumi.Resource] = {}
    previous: list[pulumi.Resource] = []
    lost: pulumi.Input[list[str]] = []  # hosts failed so far: the last Playbook's failed_hosts
    last = ANSIBLE_STAGES[-1].name
    for stage in STAGES:
        if stage.playbook is None:
            if platform is not None and isinstance(previous[-1], Playbook):
                stages[stage.name] = platform(previous[-1])
                previous = [stages[stage.name]]
            continue
        args = PlaybookArgs(site=site_name, stage=stage.name, root=root, digest=digests[stage.name],
                            left_out=lost, last=stage.name == last)
        opts = pulumi.ResourceOptions(parent=parent, depends_on=[*previous, *(waits or {}).get(stage.name, ())])
        playbook = Playbook(f"{name}-{stage.name}", args, opts)
        stages[stage.name] = playbook
        previous, lost = [playbook], playbook.failed_hosts
    return stages
