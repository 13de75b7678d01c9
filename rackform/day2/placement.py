"""Where a new chassis goes: the rack position given, or the first free one that fits.

A position fits when the block's rack units lie inside the rack, overlap no device, and
the rack's power (the site's power basis: nameplate max or typical) stays within its
budget with the new chassis (or node, for a chassis of several nodes) added. Racks are
tried in design order, positions bottom up. Refusals name the rack and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from rackform.day2.errors import refuse
from rackform.model.schema import BlockType
from rackform.model.site import Rack, Site


@dataclass(frozen=True, slots=True)
class Placement:
    rack: str
    position_u: int


@dataclass(frozen=True, slots=True)
class Reserved:
    """A chassis placed earlier in the same run (not in the site yet)."""

    rack: str
    position_u: int
    block: BlockType

    @property
    def top_u(self) -> int:
        return self.position_u + self.block.rack_units - 1


def new_device_power_w(block: BlockType, basis: str, hosts: int = 1) -> int:
    full = block.power.max_w if basis == "max" else block.power.typical_w
    return full if block.nodes == 1 else round(full * hosts / block.nodes)


def rack_power_w(site: Site, rack: Rack) -> int:
    return sum(device.power_w(site.power_basis) for device in rack.devices)


def occupied_u(rack: Rack) -> set[int]:
    return {u for device in rack.devices for u in range(device.position_u, device.top_u + 1)}


def why_not(site: Site, rack: Rack, block: BlockType, position_u: int, reserved: tuple[Reserved, ...] = ()) -> str | None:
    """Why `block` cannot sit at `position_u` of `rack`, or None when it fits."""
    top = position_u + block.rack_units - 1
    if position_u < 1 or top > rack.height_u:
        return f"U{position_u}-U{top} is outside the rack's U1-U{rack.height_u}"
    mine = [item for item in reserved if item.rack == rack.name]
    clash = [device.name for device in rack.devices if device.position_u <= top and position_u <= device.top_u]
    clash += [f"the node placed at U{item.position_u}" for item in mine
              if item.position_u <= top and position_u <= item.top_u]
    if clash:
        return f"U{position_u}-U{top} overlaps {', '.join(clash)}"
    power = rack_power_w(site, rack) + sum(new_device_power_w(item.block, site.power_basis) for item in mine)
    added = new_device_power_w(block, site.power_basis)
    if power + added > rack.power_budget_w:
        return (f"power: {power} W + {added} W ({site.power_basis}) exceeds the budget of "
                f"{rack.power_budget_w} W")
    return None


def place(site: Site, block: BlockType, rack_name: str | None = None, position_u: int | None = None,
          reserved: tuple[Reserved, ...] = ()) -> Placement:
    racks = {rack.name: rack for rack in site.racks}
    if rack_name is not None and rack_name not in racks:
        raise refuse(site.loc, "racks", f"no rack {rack_name!r} in the site (racks: {', '.join(racks)})")
    if position_u is not None:
        if rack_name is None:
            raise refuse(None, "--position", "--position needs --rack")
        reason = why_not(site, racks[rack_name], block, position_u, reserved)
        if reason:
            raise refuse(racks[rack_name].loc, f"racks[{rack_name}]", f"{block.name} cannot go at U{position_u}: {reason}")
        return Placement(rack_name, position_u)
    reasons = []
    for rack in ([racks[rack_name]] if rack_name else site.racks):
        free = _first_free(rack, block, reserved)
        if free is None:
            reasons.append(f"{rack.name}: no {block.rack_units} free U in a row")
            continue
        reason = why_not(site, rack, block, free, reserved)
        if reason is None:
            return Placement(rack.name, free)
        reasons.append(f"{rack.name}: {reason}")
    where = racks[rack_name].loc if rack_name else site.loc
    raise refuse(where, "racks", f"rack full: no place for a {block.name} ({block.rack_units} U, "
                                 f"{new_device_power_w(block, site.power_basis)} W): {'; '.join(reasons)}")


def _first_free(rack: Rack, block: BlockType, reserved: tuple[Reserved, ...] = ()) -> int | None:
    used = occupied_u(rack) | {u for item in reserved if item.rack == rack.name
                               for u in range(item.position_u, item.top_u + 1)}
    for bottom in range(1, rack.height_u - block.rack_units + 2):
        if not any(u in used for u in range(bottom, bottom + block.rack_units)):
            return bottom
    return None
