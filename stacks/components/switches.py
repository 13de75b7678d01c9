"""Switches as groups: the leaf pair of a rack, the spines of a fabric, a rack's access switches.

A leaf pair is configured together (same fabric, same rack, dual-homed hosts), so
it is one component rather than two. Grouping is one pass over the switches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from rackform.model.site import Site, Switch


@dataclass(frozen=True, slots=True)
class SwitchGroupArgs:
    """Switches that share a role and fabric (and, below the spines, a rack)."""

    role: pulumi.Input[str]
    """leaf | spine | management | oob"""
    fabric: pulumi.Input[str]
    """Fabric network name; empty for management and out-of-band switches."""
    rack: pulumi.Input[str]
    """The rack of a leaf pair or access switch; empty for spines, which span racks."""
    switches: pulumi.Input[list[str]]
    switch_os: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    """Switch name -> switch OS (cumulus, onyx, unmanaged)."""
    asns: pulumi.Input[dict[str, int]] = field(default_factory=dict)
    """Switch name -> BGP AS number, where the design gives one."""
    management_addresses: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    power_w: pulumi.Input[int] = 0
    """Power of all switches of the group on the site's power basis."""


def group_key(switch: Switch) -> tuple[str, str, str]:
    rack = "" if switch.role == "spine" else switch.device.rack
    return switch.role, switch.fabric or "", rack


def group_name(key: tuple[str, str, str]) -> str:
    """`compute-leaf-r1`, `compute-spine`, `oob-r1`: readable in `pulumi preview`."""
    role, fabric, rack = key
    return "-".join(part for part in (fabric, role, rack) if part)


def switch_groups(site: Site) -> dict[str, SwitchGroupArgs]:
    """Group name -> args, in the design's order."""
    members: dict[tuple[str, str, str], list[Switch]] = {}
    for switch in site.switches.values():
        members.setdefault(group_key(switch), []).append(switch)
    return {group_name(key): _group_args(key, switches, site.power_basis) for key, switches in members.items()}


def _group_args(key: tuple[str, str, str], switches: list[Switch], power_basis: str) -> SwitchGroupArgs:
    role, fabric, rack = key
    return SwitchGroupArgs(
        role=role,
        fabric=fabric,
        rack=rack,
        switches=[switch.name for switch in switches],
        switch_os={switch.name: switch.os for switch in switches},
        asns={switch.name: switch.asn for switch in switches if switch.asn is not None},
        management_addresses={
            switch.name: str(switch.management_address) for switch in switches if switch.management_address
        },
        power_w=sum(switch.device.power_w(power_basis) for switch in switches),
    )


class SwitchGroup(pulumi.ComponentResource):
    """A leaf pair, the spines of a fabric, or a rack's management/out-of-band switches."""

    role: pulumi.Output[str]
    fabric: pulumi.Output[str]
    rack: pulumi.Output[str]
    switches: pulumi.Output[list[str]]
    switch_os: pulumi.Output[dict[str, str]]
    asns: pulumi.Output[dict[str, int]]
    management_addresses: pulumi.Output[dict[str, str]]
    power_w: pulumi.Output[int]

    def __init__(self, name: str, args: SwitchGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rackform:index:SwitchGroup", name, None, opts)
        outputs = {
            "role": args.role,
            "fabric": args.fabric,
            "rack": args.rack,
            "switches": args.switches,
            "switch_os": args.switch_os,
            "asns": args.asns,
            "management_addresses": args.management_addresses,
            "power_w": args.power_w,
        }
        for key, value in outputs.items():
            setattr(self, key, pulumi.Output.from_input(value))
        self.register_outputs(outputs)
