"""`SiteCluster`: a whole site as one component, its building blocks and stages as children.

    SiteCluster lab
    ├── HciBlock lab-hci-1, StorageBlock lab-stor-1, DgxNode lab-gpu-1 ...
    ├── SwitchGroup lab-compute-leaf-r1, lab-compute-spine, lab-oob-r1
    └── Playbook lab-provision -> lab-fabric -> lab-os -> lab-kubernetes -> lab-verify

One component per block and per switch group keeps a site's resource count in the
hundreds (Pulumi previews slow down past about a thousand resources).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from components.blocks import BlockArgs, BuildingBlock, block_args, component_for
from components.stages import stage_chain
from components.switches import SwitchGroup, switch_groups
from rackform.model.site import Site

RESOURCE_WARNING_COUNT = 1000
"""Above this many resources a stack's preview takes minutes: say so."""


@dataclass(frozen=True, slots=True)
class SiteClusterArgs:
    site: Site
    """The loaded, checked site (from `rackform.pipeline.load_and_check`)."""
    root: str
    """Repo root the stage providers read the design from and render into."""
    stage_digests: Mapping[str, str]
    """Stage name -> digest of the rendered files it reads (`components.stages.stage_digests`)."""


class SiteCluster(pulumi.ComponentResource):
    """A site: its placed blocks, its switch groups and the stage chain that deploys them."""

    site: pulumi.Output[str]
    racks: pulumi.Output[list[str]]
    hosts: pulumi.Output[int]
    power_w: pulumi.Output[int]
    gpu_count: pulumi.Output[int]
    stages: pulumi.Output[list[str]]

    def __init__(self, name: str, args: SiteClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rackform:index:SiteCluster", name, None, opts)
        site = args.site
        placed = {device.name: block_args(site, device) for device in site.devices() if device.switch is None}
        self.blocks = self._create_blocks(name, site, placed)
        self.switch_groups = self._create_switch_groups(name, site)
        hardware = [*self.blocks.values(), *self.switch_groups.values()]
        self.playbooks = stage_chain(name, site.name, args.root, args.stage_digests, hardware, self)
        self._warn_if_large(name)
        outputs = {
            "site": site.name,
            "racks": [rack.name for rack in site.racks],
            "hosts": len(site.hosts),
            "power_w": sum(device.power_w(site.power_basis) for device in site.devices()),
            "gpu_count": sum(block.gpu_count for block in placed.values()),
            "stages": list(self.playbooks),
        }
        for key, value in outputs.items():
            setattr(self, key, pulumi.Output.from_input(value))
        self.register_outputs(outputs)

    def _create_blocks(self, name: str, site: Site, placed: dict[str, BlockArgs]) -> dict[str, BuildingBlock]:
        """One component per placed non-switch device, its class chosen by block category."""
        return {
            device.name: component_for(device.block.category)(
                f"{name}-{device.name}", placed[device.name], pulumi.ResourceOptions(parent=self)
            )
            for device in site.devices()
            if device.name in placed
        }

    def _create_switch_groups(self, name: str, site: Site) -> dict[str, SwitchGroup]:
        return {
            group: SwitchGroup(f"{name}-{group}", args, pulumi.ResourceOptions(parent=self))
            for group, args in switch_groups(site).items()
        }

    def resource_count(self) -> int:
        return 1 + len(self.blocks) + len(self.switch_groups) + len(self.playbooks)

    def _warn_if_large(self, name: str) -> None:
        count = self.resource_count()
        if count > RESOURCE_WARNING_COUNT:
            pulumi.log.warn(
                f"{name}: {count} resources; previews slow down past {RESOURCE_WARNING_COUNT}",
                resource=self,
            )
