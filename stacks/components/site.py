"""`SiteCluster`: a whole site as one component, its building blocks and stages as children.

    SiteCluster lab
    ├── HciBlock lab-hci-1, StorageBlock lab-stor-1, DgxNode lab-gpu-1 ...
    │   └── BareMetalNode lab-mgmt-1-bmc ...   (one per node with a BMC, after lab-provision)
    ├── SwitchGroup lab-compute-leaf-r1, lab-compute-spine, lab-oob-r1
    ├── Playbook lab-provision -> lab-fabric -> lab-os -> lab-kubernetes
    ├── GpuPlatform lab-platform   (the platform stage; components/platform.py)
    │   └── Playbook lab-platform-apply        (stage "platform": kubectl + helm, as `rackform deploy`)
    └── Playbook lab-verify        (after lab-platform-apply)

One component per block and per switch group, and one BareMetalNode per server, keep
a site's resource count in the hundreds (Pulumi previews slow down past about a
thousand resources).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from components.blocks import BlockArgs, BuildingBlock, block_args, component_for
from components.platform import GpuPlatform, GpuPlatformArgs
from components.stages import stage_chain
from components.switches import SwitchGroup, switch_groups
from providers.baremetal import BareMetalNode, BareMetalNodeArgs
from providers.playbook import Playbook, PlaybookArgs

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
    bare_metal_nodes: bool = True
    """One BareMetalNode per server. A site of thousands of servers may turn them off (stack
    config `rackform:bareMetalNodes: "false"`) to keep previews fast; the provision stage
    still powers and boots every server."""


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
        # The components themselves do nothing to wait for: every switch, Onyx and Cumulus,
        # is configured by the fabric stage. A block's BareMetalNodes wait for provision.
        platform = self._platform_maker(name, site) if site.kubernetes is not None else None
        self.stage_resources = stage_chain(name, site.name, args.root, args.stage_digests, self, platform)
        self.playbooks = {stage: r for stage, r in self.stage_resources.items() if isinstance(r, Playbook)}
        self.nodes = (self._create_nodes(name, site, args.root, self.playbooks.get("provision"))
                      if args.bare_metal_nodes else {})
        self.platform: GpuPlatform | None = self.stage_resources.get("platform")
        bootstrap = self.playbooks.get("kubernetes")
        self.kubeconfig: pulumi.Output[str] | None = (
            None if bootstrap is None else pulumi.Output.secret(bootstrap.kubeconfig))
        """The cluster's admin kubeconfig (secret; '' until the kubernetes stage fetched one)."""
        self._warn_if_large(name)
        outputs = {
            "site": site.name,
            "racks": [rack.name for rack in site.racks],
            "hosts": len(site.hosts),
            "power_w": sum(device.power_w(site.power_basis) for device in site.devices()),
            "gpu_count": sum(block.gpu_count for block in placed.values()),
            "stages": list(self.stage_resources),
        }
        for key, value in outputs.items():
            setattr(self, key, pulumi.Output.from_input(value))
        self.register_outputs(outputs)

    def _create_blocks(self, name: str, site: Site, placed: dict[str, BlockArgs]) -> dict[str, BuildingBlock]:
        """One component per placed non-switch device, its class chosen by block category."""
        return {
            device.name: component_for(device.block)(
                f"{name}-{device.name}", placed[device.name], pulumi.ResourceOptions(parent=self)
            )
            for device in site.devices()
            if device.name in placed
        }

    def _create_nodes(self, name: str, site: Site, root: str, provision: Playbook | None) -> dict[str, BareMetalNode]:
        """One BareMetalNode per server with a BMC address, under its block.

        They wait for the provision stage, which hardens each BMC and keeps its rotated
        password in the site's secret store, where the node's `login: site` finds it.
        The later stages do not wait for them: a server the provision stage let fail
        alone (within the site's max_fail_percentage) fails its node resource, not the rest.
        """
        after = [provision] if provision is not None else []
        nodes = {}
        for device in site.devices():
            block = self.blocks.get(device.name)
            for host_name in device.host_names if block is not None else ():
                host = site.hosts.get(host_name)
                if host is None or host.bmc_address is None:
                    continue
                nodes[host_name] = BareMetalNode(
                    f"{name}-{host_name}-bmc",
                    BareMetalNodeArgs(site=site.name, root=root, node=host_name, bmc_address=str(host.bmc_address)),
                    # Deleting one only forgets it (the server stays powered): retain says so
                    # in a preview, and the engine never calls the provider's delete.
                    pulumi.ResourceOptions(parent=block, depends_on=after, retain_on_delete=True),
                )
        return nodes

    def _platform_maker(self, name: str, site: Site):
        """The platform stage: a GpuPlatform on the cluster the kubernetes-stage Playbook bootstraps."""

        def make(bootstrap: Playbook, apply: PlaybookArgs, after: list[pulumi.Resource]) -> GpuPlatform:
            return GpuPlatform(
                f"{name}-platform",
                GpuPlatformArgs(site=site, kubeconfig=bootstrap.kubeconfig, apply=apply, after=after),
                pulumi.ResourceOptions(parent=self, depends_on=after),
            )

        return make

    def _create_switch_groups(self, name: str, site: Site) -> dict[str, SwitchGroup]:
        return {
            group: SwitchGroup(f"{name}-{group}", args, pulumi.ResourceOptions(parent=self))
            for group, args in switch_groups(site).items()
        }

    def resource_count(self) -> int:
        platform = 0 if self.platform is None else self.platform.resource_count()
        return (1 + len(self.blocks) + len(self.nodes) + len(self.switch_groups)
                + len(self.playbooks) + platform)

    def _warn_if_large(self, name: str) -> None:
        count = self.resource_count()
        if count > RESOURCE_WARNING_COUNT:
            hint = (f" ({len(self.nodes)} of them BareMetalNodes: stack config rackform:bareMetalNodes false "
                    f"leaves them out)" if self.nodes else "")
            pulumi.log.warn(
                f"{name}: {count} resources; previews slow down past {RESOURCE_WARNING_COUNT}{hint}",
                resource=self,
            )
