"""The stage chain: one resource per stage, in `rackform.pipeline.STAGES` order.

Every stage runs through a `Playbook` (the dynamic provider calling the stage runner
`rackform deploy` uses): the Ansible stages directly; the `platform` stage (no playbook:
kubectl and helm) inside whatever `platform` makes from the kubernetes-stage Playbook and
the stage's PlaybookArgs (the GpuPlatform component, whose `apply` is that Playbook).
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
    platform: Callable[[Playbook, PlaybookArgs, list[pulumi.Resource]], pulumi.Resource] | None = None,
    waits: Mapping[str, Sequence[pulumi.Resource]] | None = None,
) -> dict[str, pulumi.Resource]:
    """Create the stage resources, each depending on the previous one and on `waits[stage]`.

    `platform` gets the Playbook before it (the bootstrap, holding the kubeconfig), the
    platform stage's PlaybookArgs and what it must wait for, and returns a component whose
    `apply` is the stage's Playbook; without it (a site without Kubernetes) the platform
    stage is left out.
    """
    stages: dict[str, pulumi.Resource] = {}
    previous: list[pulumi.Resource] = []
    lost: pulumi.Input[list[str]] = []  # hosts failed so far: the last Playbook's failed_hosts
    last = ANSIBLE_STAGES[-1].name
    for stage in STAGES:
        if stage.playbook is None and (platform is None or not previous or not isinstance(previous[-1], Playbook)):
            continue
        if stage.playbook is not None and stage.name not in digests:
            continue  # a stage the site gives nothing to do (rackform.pipeline.stage_not_applicable)
        args = PlaybookArgs(site=site_name, stage=stage.name, root=root, digest=digests[stage.name],
                            left_out=lost, last=stage.name == last)
        after = [*previous, *(waits or {}).get(stage.name, ())]
        if stage.playbook is None:
            component = platform(previous[-1], args, after)
            stages[stage.name], playbook = component, component.apply
        else:
            playbook = Playbook(f"{name}-{stage.name}", args, pulumi.ResourceOptions(parent=parent, depends_on=after))
            stages[stage.name] = playbook
        previous, lost = [playbook], playbook.failed_hosts
    return stages
