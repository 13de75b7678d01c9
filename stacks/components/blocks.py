"""One component per placed building block (a device of the site design).

The component class follows the block's catalog category (`BLOCK_COMPONENTS`; an
NVIDIA GPU block is a `DgxNode`, any other GPU server a `GpuServer`), so `pulumi
preview` reads like the rack: HciBlock, DgxNode, StorageBlock ... Each block's nodes
that have a BMC get a `BareMetalNode` (stacks/providers/baremetal.py) as its child.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pulumi

from rackform.model.schema import BlockType
from rackform.model.site import Device, Host, Site


@dataclass(frozen=True, slots=True)
class BlockArgs:
    """A placed building block and the hosts it carries."""

    device: pulumi.Input[str]
    """Device name in the site design (e.g. `gpu-1`)."""
    block_type: pulumi.Input[str]
    """Catalog block name (e.g. `dgx-h100`)."""
    rack: pulumi.Input[str]
    position_u: pulumi.Input[int]
    """Lowest rack unit the device occupies."""
    rack_units: pulumi.Input[int]
    power_w: pulumi.Input[int]
    """Chassis power on the site's power basis, scaled to the populated nodes."""
    hosts: pulumi.Input[list[str]]
    bmc_addresses: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    """Host name -> BMC (IPMI) address, for hosts whose inventory has one."""
    management_addresses: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    gpu_count: pulumi.Input[int] = 0
    """GPUs over all populated nodes."""
    raw_capacity_tb: pulumi.Input[float] = 0.0
    """Drive capacity over all populated nodes, before any redundancy."""


def block_args(site: Site, device: Device) -> BlockArgs:
    """Read a device's facts from the resolved model (never re-derived here)."""
    hosts = [site.hosts[name] for name in device.host_names if name in site.hosts]
    node = device.block.node
    per_node_tb = sum(d.count * (d.size_tb or 0) for d in node.drives) if node else 0.0
    per_node_gpus = node.gpus.count if node and node.gpus else 0
    return BlockArgs(
        device=device.name,
        block_type=device.block.name,
        rack=device.rack,
        position_u=device.position_u,
        rack_units=device.block.rack_units,
        power_w=device.power_w(site.power_basis),
        hosts=[host.name for host in hosts],
        bmc_addresses=_addresses(hosts, "bmc_address"),
        management_addresses=_addresses(hosts, "management_address"),
        gpu_count=per_node_gpus * len(hosts),
        raw_capacity_tb=round(per_node_tb * len(hosts), 2),
    )


def _addresses(hosts: list[Host], attribute: str) -> dict[str, str]:
    return {host.name: str(getattr(host, attribute)) for host in hosts if getattr(host, attribute) is not None}


class BuildingBlock(pulumi.ComponentResource):
    """What every placed block exposes: where it sits, what it draws, which hosts it holds."""

    pulumi_type: ClassVar[str] = "rackform:index:BuildingBlock"
    former_types: ClassVar[tuple[str, ...]] = ()
    """Types this class's resources had in earlier versions: aliases, so an existing stack
    keeps them (and their children) instead of replacing them."""

    device: pulumi.Output[str]
    block_type: pulumi.Output[str]
    rack: pulumi.Output[str]
    position_u: pulumi.Output[int]
    rack_units: pulumi.Output[int]
    power_w: pulumi.Output[int]
    hosts: pulumi.Output[list[str]]
    bmc_addresses: pulumi.Output[dict[str, str]]
    management_addresses: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: BlockArgs, opts: pulumi.ResourceOptions | None = None):
        aliases = [pulumi.Alias(type_=former) for former in self.former_types]
        super().__init__(self.pulumi_type, name, None, pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(aliases=aliases)) if aliases else opts)
        outputs = self.block_outputs(args)
        for key, value in outputs.items():
            setattr(self, key, pulumi.Output.from_input(value))
        self.register_outputs(outputs)

    def block_outputs(self, args: BlockArgs) -> dict[str, pulumi.Input]:
        return {
            "device": args.device,
            "block_type": args.block_type,
            "rack": args.rack,
            "position_u": args.position_u,
            "rack_units": args.rack_units,
            "power_w": args.power_w,
            "hosts": args.hosts,
            "bmc_addresses": args.bmc_addresses,
            "management_addresses": args.management_addresses,
        }


class HciBlock(BuildingBlock):
    """Hyperconverged nodes; the site's first three form the management plane."""

    pulumi_type = "rackform:index:HciBlock"


class ComputeBlock(BuildingBlock):
    """CPU compute nodes."""

    pulumi_type = "rackform:index:ComputeBlock"


class StorageBlock(BuildingBlock):
    """Storage nodes; exposes their raw drive capacity."""

    pulumi_type = "rackform:index:StorageBlock"

    raw_capacity_tb: pulumi.Output[float]

    def block_outputs(self, args: BlockArgs) -> dict[str, pulumi.Input]:
        return super().block_outputs(args) | {"raw_capacity_tb": args.raw_capacity_tb}


class GpuServer(BuildingBlock):
    """A GPU server; exposes its GPU count."""

    pulumi_type = "rackform:index:GpuServer"
    former_types = ("rackform:index:DgxNode",)
    """Every GPU block was a DgxNode until non-NVIDIA ones became GpuServers (the vGPU pod)."""

    gpu_count: pulumi.Output[int]

    def block_outputs(self, args: BlockArgs) -> dict[str, pulumi.Input]:
        return super().block_outputs(args) | {"gpu_count": args.gpu_count}


class DgxNode(GpuServer):
    """An NVIDIA DGX system; exposes its GPU count."""

    pulumi_type = "rackform:index:DgxNode"
    former_types = ()


DGX_VENDOR = "NVIDIA"
"""GPU blocks of this catalog vendor are DGX systems (NVIDIA sells its GPUs in others' servers)."""

BLOCK_COMPONENTS: dict[str, type[BuildingBlock]] = {
    "hci": HciBlock,
    "compute": ComputeBlock,
    "storage": StorageBlock,
    "gpu": GpuServer,
}
"""Catalog category -> component class. Switches are grouped instead (see switches.py)."""


def component_for(block: BlockType) -> type[BuildingBlock]:
    if block.category == "gpu" and block.vendor == DGX_VENDOR:
        return DgxNode
    try:
        return BLOCK_COMPONENTS[block.category]
    except KeyError:
        known = ", ".join(sorted(BLOCK_COMPONENTS))
        raise ValueError(f"no component for block category '{block.category}' (block {block.name}); "
                         f"known: {known}") from None
